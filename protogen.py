"""Regenerate the Python gRPC stubs from proto/: ``python -m cohort.protogen``.

Stubs are written next to the .proto files (``proto/grpo/...``). Packaging maps
``proto/`` to ``cohort.proto``, so the stubs import as ``cohort.proto.grpo...``
while the wire packages and descriptor file names stay ``grpo.verifier.v1`` and
``grpo/verifier/v1/*.proto``. protoc writes imports from the .proto paths
(``from grpo.verifier.v1 import ...``); :func:`namespace` rewrites those two
kinds of line after generation (a regex over protoc's fixed output shape: a
dependency such as protoletariat would do the same for one line each).
``--check`` exits 1 when the committed stubs mean something other than what
grpcio-tools generates from the .proto files now (CI and
tests/cli/test_cli.py run it). It compares what a stub means, not the
version that wrote it: a ``*_pb2.py`` by its FileDescriptorProto (the
serialized descriptor protoc embeds), the ``*_pb2_grpc.py`` and ``*_pb2.pyi``
by their text with the generator's version banners masked. So a grpcio-tools
other than the pinned one (pyproject.toml's dev extra, ``==`` the version in
the committed banners) passes as long as it generates the same contract; a
changed .proto fails. Regenerate with the pinned version, so that the committed
banners, and the protobuf runtime the ``_pb2.py`` files require, stay the ones
the dependencies promise.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent / "proto"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
PYTHON_ROOT = "cohort.proto"

# `from grpo.x import y_pb2` (grpc stubs, .pyi) and the module name passed to the descriptor builder.
_IMPORT = re.compile(r"^from grpo\.", re.MULTILINE)
_MODULE_NAME = re.compile(r"(BuildTopDescriptorsAndMessages\(DESCRIPTOR, )'grpo\.")


def namespace(source: str) -> str:
    """Move a generated stub's own imports and module name under :data:`PYTHON_ROOT`."""
    source = _IMPORT.sub(f"from {PYTHON_ROOT}.grpo.", source)
    return _MODULE_NAME.sub(rf"\1'{PYTHON_ROOT}.grpo.", source)


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    return sorted(root.glob("grpo/**/*.proto"))


def generate(out_dir: Path, root: Path = PROTO_ROOT) -> None:
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(root)) for p in proto_files(root)],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out_dir.rglob("*"):
        if path.is_file() and path.name.endswith(SUFFIXES):
            path.write_text(namespace(path.read_text()))


# The lines that name the generator's versions: `# Protobuf Python Version: 7.35.1` (_pb2.py),
# `GRPC_GENERATED_VERSION = '1.85.1'` (_pb2_grpc.py).
_VERSION_BANNER = re.compile(r"^(# Protobuf Python Version: |GRPC_GENERATED_VERSION = ).*$", re.MULTILINE)


def descriptor(pb2_source: str):
    """The FileDescriptorProto a generated ``*_pb2.py`` embeds (its ``AddSerializedFile(b'...')`` argument)."""
    from google.protobuf import descriptor_pb2

    for node in ast.walk(ast.parse(pb2_source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "AddSerializedFile":
            return descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(node.args[0]))
    raise ValueError("no AddSerializedFile(...) call: not a protoc-generated _pb2.py")


def same_meaning(fresh: str, committed: str, name: str) -> bool:
    """Whether two generations of the stub ``name`` define the same contract (see the module docstring)."""
    if name.endswith("_pb2.py"):
        try:
            return descriptor(fresh) == descriptor(committed)
        except (ValueError, SyntaxError):
            return False
    return _VERSION_BANNER.sub(r"\1", fresh) == _VERSION_BANNER.sub(r"\1", committed)


def stale_files(root: Path = PROTO_ROOT) -> list[str]:
    """Generated files under ``root`` that are missing or mean something other than a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), root)
        stale = []
        for fresh in sorted(Path(tmp).rglob("*")):
            if fresh.is_file() and fresh.name.endswith(SUFFIXES):
                rel = fresh.relative_to(tmp)
                committed = root / rel
                if not committed.exists() or not same_meaning(fresh.read_text(), committed.read_text(), fresh.name):
                    stale.append(str(rel))
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed stubs are stale")
    ns = parser.parse_args(argv)
    if ns.check:
        stale = stale_files()
        if stale:
            from importlib.metadata import version

            print(
                f"stale generated stubs (regenerate with the dev extra's pinned grpcio-tools: "
                f"`python -m cohort.protogen`; installed: grpcio-tools {version('grpcio-tools')}):",
                *stale,
                sep="\n  ",
            )
            return 1
        print("generated stubs are current")
        return 0
    generate(PROTO_ROOT)
    for d in {p.parent for p in proto_files()} | {PROTO_ROOT / "grpo"}:
        while d != PROTO_ROOT:
            (d / "__init__.py").touch()
            d = d.parent
    print(f"generated stubs for {len(proto_files())} proto files under {PROTO_ROOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
