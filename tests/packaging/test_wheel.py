"""The wheel owns one import namespace: ``cohort`` is its only top-level package.

The repository root is the package ``cohort`` (pyproject's ``package-dir``: ``"cohort" = "."``), so
each top-level package folder ``X/`` is ``cohort.X`` in the wheel; ``tests/test_import_layers.py``
checks that ``packages`` lists every one of them. ``test_wheel_install.py`` runs the installed wheel.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # --no-build-isolation: setuptools and wheel come from the dev extra, so this runs offline.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("cohort_rl-*.whl")
    return zipfile.ZipFile(path)


def test_only_top_level_package_is_cohort(wheel):
    names = wheel.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"cohort"}
    for mapped in ("cohort/verifiers/hosting/server.py", "cohort/sandbox/_zygote.py", "cohort/trainer/default.yaml",
                   "cohort/trainer/train.py", "cohort/proto/grpo/verifier/v1/verifier_service_pb2.py",
                   "cohort/proto/grpo/verifier/v1/verifier_service.proto", "cohort/integrations/__init__.py"):
        assert mapped in names, mapped


def test_entry_points_name_the_namespace(wheel):
    ep = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(ep).decode()
    targets = re.findall(r"=\s*([\w.]+):", text)
    assert targets and all(t.startswith("cohort.") for t in targets), text


def test_stubs_import_inside_the_namespace():
    """Generated stubs import each other as ``cohort.proto.grpo``; the wire package stays ``grpo.verifier.v1``."""
    from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

    assert pb.DESCRIPTOR.package == "grpo.verifier.v1"
    assert pb.DESCRIPTOR.name == "grpo/verifier/v1/verifier_service.proto"
    assert pb.VerifyGroupRequest.__module__ == "cohort.proto.grpo.verifier.v1.verifier_service_pb2"
    for stub in [*(ROOT / "proto").rglob("*_pb2*.py"), *(ROOT / "proto").rglob("*_pb2*.pyi")]:  # not __pycache__
        assert not re.search(r"^(from|import) grpo\b", stub.read_text(), re.MULTILINE), stub


def test_no_source_imports_a_bare_top_level_folder():
    """Every import of our own code goes through ``cohort.`` (a bare ``verifiers`` may be PyPI's package)."""
    # at a line start, or inside a string of code run in a subprocess ("...\nfrom sandbox.server import ...")
    bare = re.compile(r"(^\s*|\\n|[\"'])(from|import)\s+(verifiers|sandbox|trainer|grpo|cli|rpc|conformance|integrations|proto)(\.|\s|$)", re.MULTILINE)
    # the prime_verifiers adapter and its tests import PyPI's `verifiers` (prime's) on purpose: `verifiers.v1` only
    prime = re.compile(r"(from|import)\s+verifiers\.v1\b")
    offenders = [str(p.relative_to(ROOT)) for folder in ("cli", "conformance", "integrations", "rpc", "verifiers", "sandbox",
                                                         "trainer", "tests", "bench", "deploy", "examples")
                 for p in (ROOT / folder).rglob("*.py")
                 if p != Path(__file__) and bare.search(prime.sub("", p.read_text()))]
    assert offenders == []
