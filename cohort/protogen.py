"""Regenerate the Python gRPC stubs from proto/: ``python -m cohort.protogen``.

Stubs are written next to the .proto files (``proto/grpo/...``), which is the
import root of the ``grpo`` package. ``--check`` exits 1 when the committed
stubs differ from what the pinned grpcio-tools would generate (CI runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent.parent / "proto"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


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
