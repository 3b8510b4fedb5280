"""Regenerate the Python gRPC stubs from proto/: ``python -m cohort.protogen``.

Stubs are written next to the .proto files (``proto/grpo/...``). Packaging maps
``proto/`` to ``cohort.proto``, so the stubs import as ``cohort.proto.grpo...``
while the wire packages and descriptor file names stay ``grpo.verifier.v1`` and
``grpo/verifier/v1/*.proto``. protoc writes imports from the .proto paths
(``from grpo.verifier.v1 import ...``); :func:`namespace` rewrites those two
kinds of line after generation (a regex over protoc's fixed output shape: a
dependency such as protoletariat would do the same for one line each).
``--check`` exits 1 when the committed stubs differ from what the pinned
grpcio-tools would generate (CI runs it).
"""

from __future__ import annotations

import argparse
import filecmp
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


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("grpo/**/*.proto"))


def generate(out_dir: Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in proto_files()],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out_dir.rglob("*"):
        if path.is_file() and path.name.endswith(SUFFIXES):
            path.write_text(namespace(path.read_text()))


def stale_files() -> list[str]:
    """Generated files that are missing or differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = []
        for fresh in sorted(Path(tmp).rglob("*")):
            if fresh.is_file() and fresh.name.endswith(SUFFIXES):
                rel = fresh.relative_to(tmp)
                committed = PROTO_ROOT / rel
                if not committed.exists() or not filecmp.cmp(fresh, committed, shallow=False):
                    stale.append(str(rel))
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed stubs are stale")
    ns = parser.parse_args(argv)
    if ns.check:
        stale = stale_files()
        if stale:
            print("stale generated stubs (run `python -m cohort.protogen`):", *stale, sep="\n  ")
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
