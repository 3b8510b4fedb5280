"""The way users run Cohort: the built wheel in a fresh venv (not the editable install, no
``PYTHONSAFEPATH``), its ``cohort`` command started from the repository root and from an unrelated
folder that holds a ``cohort/`` package of its own.

Before the layout fix a wheel-installed ``cohort serve math`` started in the repository root lost every
math worker at start (the forkserver put the working folder first on ``sys.path`` and imported the
checkout's partial ``cohort/`` folder), and ``cohort train`` there could not start its local services.

The venv gets the wheel alone (``--no-deps``); its dependencies come from the test's own environment
through a ``.pth`` line (that folder's own ``.pth`` files, the editable install's finder among them,
are not processed), so the test runs offline. ``scripts/ci-namespace`` installs the wheel with its
dependencies from the registry into an empty venv and repeats the serve check there.
"""

from __future__ import annotations

import asyncio
import json
import os
import site
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    (whl,) = out.glob("cohort_rl-*.whl")
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    purelib = next(env_dir.glob("lib/python*/site-packages"))
    (purelib / "_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "--no-deps",
                    "-q", str(whl)], check=True, capture_output=True, timeout=300)
    return env_dir


def _user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    return {**env, "HF_HUB_OFFLINE": "1"}


def _serve_and_score(env_dir: Path, cwd: Path, tmp_path: Path) -> None:
    from cohort.verifiers.base import Reference, Rollout
    from cohort.verifiers.client import VerifierClient
    from cohort.verifiers.records import Record, Task

    port_file = tmp_path / "port"
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(env_dir / "bin" / "cohort"), "serve", "math", "--port", "0", "--port-file",
                                 str(port_file)], cwd=cwd, env=_user_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        endpoint = f"127.0.0.1:{port_file.read_text().strip()}"

        async def score():
            async with VerifierClient({"math": [endpoint]}, timeout_s=60) as client:
                # answers that need SymPy (a math worker), not the server's string fast path
                return await client.score([Record(Task("g0", "", Reference(answer="0.5")),
                                                  (Rollout(0, "so \\boxed{\\frac{2}{4}}"), Rollout(1, "\\boxed{0.6}")))])

        (group,) = asyncio.run(score())
        assert [(r.status.name, r.reward) for r in group] == [("OK", 1.0), ("OK", 0.0)], log.read_text()[-2000:]
        time.sleep(1)  # a worker that died at start would have written its traceback by now
        assert "Traceback" not in log.read_text(), log.read_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_installed_cohort_is_the_wheel(wheel_venv):
    run = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", "import cohort.verifiers; print(cohort.verifiers.__file__)"],
                         cwd="/", env=_user_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert str(wheel_venv) in run.stdout and str(ROOT) not in run.stdout


@pytest.mark.slow
def test_serve_from_the_repository_root(wheel_venv, tmp_path):
    _serve_and_score(wheel_venv, ROOT, tmp_path)


@pytest.mark.slow
def test_serve_from_a_folder_holding_another_cohort_package(wheel_venv, tmp_path):
    project = tmp_path / "project"
    (project / "cohort").mkdir(parents=True)
    (project / "cohort" / "__init__.py").write_text("'''A user project named cohort.'''\n")
    _serve_and_score(wheel_venv, project, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_from_the_repository_root(wheel_venv, tmp_path):
    """The embedded default for two steps: its local math and arith services start and score."""
    run = subprocess.run([str(wheel_venv / "bin" / "cohort"), "train", f"run.output_dir={tmp_path / 'run'}",
                          "run.max_steps=2", "run.progress=false", "run.plot=false"],
                         cwd=ROOT, env=_user_env(), capture_output=True, text=True, timeout=840)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["verify/unusable_frac"] == 0.0 for r in records), records
