"""The comparator's verdicts are those it gave before ``compare.py`` was split by kind of answer (issue 18).

``data/math_compare_snapshot.jsonl`` is a sample of a larger corpus (every case the math tests compare, GSM8K
answers against themselves and perturbed, ``bench/math_bench.py``'s development set, and generated
variants of every kind of answer), with the verdicts the comparator gave before the split:
the cheap pass, the structure code with a deterministic stand-in for SymPy (and what it handed to it), the
SymPy verdict through the worker pool for a few, and the rounding request read from each prompt (the tests'
and the development set's, GSM8K questions with and without a rounding request, or a look-alike, added).
``data/make_math_compare_snapshot.py`` built it and says how to rebuild and check the whole corpus.

A verdict that changes on purpose (a rule fixed) means rebuilding the snapshot, in the commit that changes
the rule, and saying so there.
"""

from __future__ import annotations

import collections
import importlib.util
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SNAPSHOT = DATA / "math_compare_snapshot.jsonl"


@pytest.fixture(scope="module")
def snap():
    spec = importlib.util.spec_from_file_location("make_math_compare_snapshot", DATA / "make_math_compare_snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in SNAPSHOT.read_text().splitlines() if line.strip()]


def test_the_snapshot_covers_every_outcome(rows):
    """Not a vacuous corpus: each way a comparison can end is there in numbers."""
    cases = [r for r in rows if "g" in r]
    ends = collections.Counter(tuple(r["cheap"][:2]) if r["cheap"][0] == "equal" else (r["cheap"][0],) for r in cases)
    assert ends[("equal", True)] >= 300 and ends[("equal", False)] >= 1000, ends
    assert ends[("need_sympy",)] >= 500 and ends[("over_limits",)] >= 20, ends
    assert sum(r["stub"][-2] > 0 for r in cases) >= 1000  # cases whose structure code hands leaves to SymPy
    full = collections.Counter(r["full"][0] for r in rows if "full" in r)
    assert full["equal"] >= 25 and full["invalid_reference"] + full["over_limits"] + full["error"] >= 1, full
    assert sum(1 for r in cases if r.get("p")) >= 100 and sum(1 for r in cases if r.get("f")) >= 100
    assert sum(1 for r in rows if r.get("rounding")) >= 100 and sum(1 for r in rows if "rounding" in r and r["rounding"] is None) >= 100


def test_cheap_pass_and_structure_verdicts_are_unchanged(snap, rows):
    diffs = []
    for r in (r for r in rows if "g" in r):
        for name, verdict in (("cheap", snap.cheap_verdict), ("stub", snap.stub_verdict)):
            got = verdict(r)
            if got != r[name]:
                diffs.append(f"{name}: gold {r['g']!r} answers {r['a']!r} policy {r.get('p')} forms {r.get('f')}: {got} != {r[name]}")
    assert not diffs, f"{len(diffs)} verdicts changed:\n" + "\n".join(diffs[:20])


def test_rounding_requests_are_unchanged(snap, rows):
    diffs = [(r["prompt"][-100:], snap.prompt_verdict(r["prompt"]), r["rounding"]) for r in rows if "prompt" in r]
    assert [d for d in diffs if d[1] != d[2]] == []


def test_sympy_verdicts_through_the_worker_pool_are_unchanged(snap, rows):
    want = [r for r in rows if "full" in r]
    got = snap.full_verdicts(want)
    diffs = [f"gold {r['g']!r} answers {r['a']!r}: {g} != {r['full']}" for r, g in zip(want, got) if g != r["full"]]
    assert not diffs, f"{len(diffs)} verdicts changed:\n" + "\n".join(diffs[:20])


def test_a_changed_rule_is_seen(snap, rows, monkeypatch):
    """Negative control: a change of one number rule (no relative tolerance for decimals) changes verdicts."""
    from fractions import Fraction

    from cohort.verifiers.math import numbers

    monkeypatch.setattr(numbers, "REL_TOL", Fraction(0))
    cases = [r for r in rows if "g" in r]
    assert any(snap.cheap_verdict(r) != r["cheap"] for r in cases)
