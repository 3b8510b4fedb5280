"""Bad data, bad endpoints and missing model folders are reported before anything slow starts
(``cohort.trainer.preflight``): one line, exit 2, in about the time the command takes to print its config,
with nothing started (no model built, no local service, no run folder)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cohort(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "cohort.cli", *args], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out, time.monotonic() - start


@pytest.fixture(scope="module")
def budget_s() -> float:
    """What "before anything slow" allows on this machine: the start-up of the command (measured as
    ``--print-config``) several times over plus a margin, well under building a model and starting services."""
    _, took = cohort("train", "--print-config")
    return 10 * took + 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_reported_early(out: subprocess.CompletedProcess, took: float, budget_s: float, run_dir: Path) -> str:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert out.stdout == ""  # no "policy: ..." line: the model was never built
    assert not run_dir.exists()
    assert took < budget_s, f"reported after {took:.1f} s (budget {budget_s:.1f} s)"
    return lines[0]


def test_a_malformed_dataset_line_is_reported_first(tmp_path, budget_s):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": \n')
    out, took = cohort("train", f"data.path={rows}", f"run.output_dir={tmp_path / 'run'}")
    line = assert_reported_early(out, took, budget_s, tmp_path / "run")
    assert f"{rows}:2: not JSON" in line


def test_an_unreachable_endpoint_is_reported_first(tmp_path, budget_s):
    endpoint = f"127.0.0.1:{free_port()}"
    out, took = cohort("train", f"scoring.verifiers=[{{name: arith, endpoints: ['{endpoint}']}}]",
                       f"run.output_dir={tmp_path / 'run'}")
    line = assert_reported_early(out, took, budget_s, tmp_path / "run")
    assert f"nothing is listening at {endpoint} (connection refused)" in line
    out, took = cohort("train", "scoring.verifiers=[{name: arith, endpoints: ['verifier-typo.invalid:50051']}]",
                       f"run.output_dir={tmp_path / 'run'}")
    assert "cannot resolve host 'verifier-typo.invalid'" in assert_reported_early(out, took, budget_s, tmp_path / "run")


def test_a_missing_model_folder_is_reported_first(tmp_path, budget_s):
    missing = tmp_path / "no-such-checkpoint"
    out, took = cohort("train", f"model.path={missing}", f"run.output_dir={tmp_path / 'run'}")
    assert assert_reported_early(out, took, budget_s, tmp_path / "run") == f"error: model.path {missing}: no such folder"
    empty = tmp_path / "empty"
    empty.mkdir()
    out, took = cohort("train", f"model.path={empty}", f"run.output_dir={tmp_path / 'run'}")
    assert "no config.json in that folder" in assert_reported_early(out, took, budget_s, tmp_path / "run")


def test_eval_names_a_missing_model_folder_not_an_unknown_model_name(tmp_path, budget_s):
    missing = tmp_path / "runs" / "x" / "final"
    out, took = cohort("eval", "--model", str(missing))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"error: --model {missing}: no such folder; packaged model names: smollm2-135m-instruct"
    assert "model.name" not in out.stderr  # the issue: a missing folder was reported as an unknown model.name
    assert took < budget_s
