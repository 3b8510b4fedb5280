"""`cohort new-verifier` writes a plugin that installs, is served by `cohort serve`, and passes the kit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cohort.conformance import RULES, load_cases, run_kit

ROOT = Path(__file__).resolve().parents[2]
NAME = "scaffold_probe"
DIST = "cohort-verifier-scaffold-probe"


def run(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_generated_plugin_installs_serves_and_passes_the_kit(tmp_path):
    made = run(sys.executable, "-m", "cohort.cli", "new-verifier", NAME, "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    root = tmp_path / DIST
    assert {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} == {
        "pyproject.toml", "README.md", f"src/cohort_verifier_{NAME}/__init__.py", f"src/cohort_verifier_{NAME}/verifier.py",
        "tests/cases.jsonl", "tests/test_verifier.py", "tests/test_conformance.py",
    }
    assert f'{NAME} = "cohort_verifier_{NAME}.verifier:ScaffoldProbeVerifier"' in (root / "pyproject.toml").read_text()

    # Installing it (offline: the venv's setuptools, cohort-rl already present) registers the entry point.
    pip = [sys.executable, "-m", "pip"]
    installed = run(*pip, "install", "-q", "--no-build-isolation", "--no-deps", str(root))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    try:
        listed = run(sys.executable, "-m", "cohort.cli", "list-verifiers")
        assert NAME in listed.stdout, listed.stdout + listed.stderr

        # `cohort serve NAME` in a subprocess, checked by the kit over the wire: every rule passes.
        server_cmd = f"{sys.executable} -m cohort.cli serve {NAME} --port {{port}}"
        results = run_kit("127.0.0.1:0", NAME, load_cases(root / "tests" / "cases.jsonl", NAME), server_cmd=server_cmd)
        assert {r.rule: r.status for r in results} == {name: "pass" for name in RULES}, [r for r in results if r.status != "pass"]

        # The package's own tests (logic and its conformance test) and its doctest pass out of the box.
        own = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests"), cwd=root)
        assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-2000:]
        assert "4 passed" in own.stdout, own.stdout[-2000:]
        doctest = run(sys.executable, "-m", "doctest", "-v", str(root / "src" / f"cohort_verifier_{NAME}" / "verifier.py"))
        assert doctest.returncode == 0 and "0 failed" in doctest.stdout, doctest.stdout[-2000:] + doctest.stderr
    finally:
        removed = run(*pip, "uninstall", "-y", "-q", DIST)
    assert removed.returncode == 0, removed.stderr
    assert NAME not in run(sys.executable, "-m", "cohort.cli", "list-verifiers").stdout


def test_new_verifier_rejects_bad_names_and_existing_dirs(tmp_path):
    bad = run(sys.executable, "-m", "cohort.cli", "new-verifier", "Not-A-Name", "--dir", str(tmp_path))
    assert bad.returncode == 2 and "must match" in bad.stderr
    taken = run(sys.executable, "-m", "cohort.cli", "new-verifier", "format", "--dir", str(tmp_path))
    assert taken.returncode == 2 and "already registered" in taken.stderr
    assert run(sys.executable, "-m", "cohort.cli", "new-verifier", "twice", "--dir", str(tmp_path)).returncode == 0
    again = run(sys.executable, "-m", "cohort.cli", "new-verifier", "twice", "--dir", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr
