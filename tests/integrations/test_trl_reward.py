"""``CohortReward`` called the way TRL 1.16 calls a reward function (see ``integrations/trl.py``),
against real ``cohort serve arith`` servers on loopback. Needs no TRL: the default suite runs it; the
real ``GRPOTrainer`` steps are in ``test_trl.py`` (marker ``trl``)."""

from __future__ import annotations

import math
import threading

import pytest

from cohort.integrations.trl import CohortReward, completion_text
from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.client import HandshakeError, WeightedVerifier

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def arith():
    with ServiceProcess(["arith"]) as proc:
        yield proc


class Log:
    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}
        self.extra: dict[str, list] = {}

    def metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(value)

    def column(self, name: str, values: list) -> None:
        self.extra.setdefault(name, []).extend(values)


def test_groups_by_prompt_and_maps_rewards_back_to_positions(arith) -> None:
    # interleaved prompts (TRL's order is p0 x G, p1 x G, but the adapter must not rely on it)
    prompts = ["12+35=", "40+37=", "12+35=", "40+37=", "12+35=", "40+37="]
    completions = ["47", "77", "47+1", "x", "48", "77"]
    answers = [47, 77, 47, 77, 47, 77]
    log = Log()
    with CohortReward({"arith": [arith.endpoint]}) as reward:
        out = reward(prompts=prompts, completions=completions, completion_ids=[[0]] * 6, answer=answers,
                     trainer_state=None, log_metric=log.metric, log_extra=log.column)
    assert out == [1.1, 1.1, 1.0, 0.0, 0.1, 1.1]  # correct + 0.1 * bare, each against its own prompt's answer
    assert reward.__name__ == "cohort"
    assert log.extra == {"cohort_status": ["ok"] * 6}
    assert log.metrics["cohort/status/ok"] == [6.0]
    assert log.metrics["cohort/status/dependency_unavailable"] == [0.0]
    assert log.metrics["cohort/unusable_frac"] == [0.0]
    assert log.metrics["cohort/arith/correct/mean"] == [pytest.approx(4 / 6)]
    assert log.metrics["cohort/arith/bare/mean"] == [pytest.approx(4 / 6)]


def test_conversational_completions_score_like_strings(arith) -> None:
    convo = [[{"role": "assistant", "content": "47"}],
             [{"role": "assistant", "content": [{"type": "text", "text": "4"}, {"type": "text", "text": "7"}]}],
             [{"role": "assistant", "content": "ask a tool"}, {"role": "tool", "content": "47"},
              {"role": "assistant", "content": "47 it is"}]]
    prompts = [[{"role": "user", "content": "12+35="}]] * 3
    with CohortReward({"arith": [arith.endpoint]}, name="arith_reward") as reward:
        assert reward(prompts, convo, answer=["47"] * 3) == [1.1, 1.1, 1.0]
        assert reward.__name__ == "arith_reward"
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    with pytest.raises(ValueError, match="no assistant message"):
        completion_text([{"role": "user", "content": "47"}])
    with pytest.raises(TypeError, match="string or a list of messages"):
        completion_text(47)


def test_weights_and_options_of_weighted_verifiers(arith) -> None:
    v = WeightedVerifier("arith", 2.0, [arith.endpoint], {"correct_weight": "1.0", "format_weight": "0.0"})
    with CohortReward([v]) as reward:
        assert reward(["1+1="] * 3, ["2", "2 or 3", "3"], answer=[2, 2, 2]) == [2.0, 2.0, 0.0]


def test_per_row_options_from_a_dataset_column(arith) -> None:
    v = WeightedVerifier("arith", 1.0, [arith.endpoint], {"format_weight": "0.5"})
    prompts = ["1+1="] * 4
    options = [{"arith": {"format_weight": "0.0"}}, {"arith": {"format_weight": "0.0"}}, None,
               {"arith": None, "steps": {"solution": "1 + 1 = 2"}}]  # None: the configured options
    with CohortReward([v], options_column="options") as reward:
        # the same prompt with other options is another group: the row's options win over the configured ones
        assert reward(prompts, ["2", "2 or 3", "2", "2"], answer=[2] * 4, options=options) == [1.0, 1.0, 1.5, 1.5]
        with pytest.raises(KeyError, match="no dataset column 'options'"):
            reward(prompts, ["2"] * 4, answer=[2] * 4)
        with pytest.raises(TypeError, match="expected"):
            reward(prompts[:1], ["2"], answer=[2], options=[{"arith": {"format_weight": 0.0}}])


def test_outage_gives_none_never_zero_and_counts_statuses(arith) -> None:
    log = Log()
    with ServiceProcess(["arith"]) as server:
        reward = CohortReward({"arith": [server.endpoint]}, timeout_s=5, retries=1)
        assert reward(["1+1="] * 2, ["2", "3"], answer=[2, 2]) == [1.1, 0.1]
        server.kill()
        out = reward(["1+1="] * 2, ["2", "3"], answer=[2, 2], log_metric=log.metric, log_extra=log.column)
    assert out == [None, None]
    assert log.extra["cohort_status"] == ["dependency_unavailable"] * 2
    assert log.metrics["cohort/status/dependency_unavailable"] == [2.0]
    assert log.metrics["cohort/unusable_frac"] == [1.0]
    assert not any(k.endswith("/mean") for k in log.metrics)  # no component mean over zero usable rollouts
    assert reward.status_counts == {"ok": 2, "dependency_unavailable": 2}
    reward.close()


def test_invalid_reference_is_none_not_zero(arith) -> None:
    with CohortReward({"arith": [arith.endpoint]}) as reward:
        assert reward(["1+1=", "2+2="], ["2", "4"], answer=["two", 4]) == [None, 1.1]


def test_close_stops_the_loop_thread_and_later_calls_fail(arith) -> None:
    before = {t.ident for t in threading.enumerate()}
    reward = CohortReward({"arith": [arith.endpoint]})
    assert reward._scorer.thread.is_alive() and reward._scorer.thread.ident not in before
    reward.close()
    reward.close()  # idempotent
    assert not reward._scorer.thread.is_alive() and reward.closed
    with pytest.raises(RuntimeError, match="closed"):
        reward(["1+1="], ["2"], answer=[2])


def test_bad_input_is_a_clear_error(arith, monkeypatch) -> None:
    with CohortReward({"arith": [arith.endpoint]}) as reward:
        with pytest.raises(KeyError, match="no dataset column 'answer'"):
            reward(["1+1="], ["2"], solution=[2])
        with pytest.raises(ValueError, match="2 prompts for 1 completions"):
            reward(["1+1=", "2+2="], ["2"], answer=[2])
    with pytest.raises(ValueError, match="exactly one of reference_column and code_tests_column"):
        CohortReward({"arith": [arith.endpoint]}, code_tests_column="tests")
    with pytest.raises(ValueError, match="not HOST:PORT"):
        CohortReward("arith=localhost")
    monkeypatch.delenv("COHORT_VERIFIER_ENDPOINTS", raising=False)
    with pytest.raises(ValueError, match="COHORT_VERIFIER_ENDPOINTS"):
        CohortReward()
    monkeypatch.setenv("COHORT_VERIFIER_ENDPOINTS", f"math={arith.endpoint}")
    with pytest.raises(HandshakeError, match="no endpoint serves verifier 'math'"):
        CohortReward()  # fails fast at construction, not at the first training step
    monkeypatch.setenv("COHORT_VERIFIER_ENDPOINTS", f"arith={arith.endpoint}")
    with CohortReward() as reward:
        assert reward(["1+1="], ["2"], answer=[2]) == [1.1]


def test_rewards_are_finite_floats_or_none(arith) -> None:
    with CohortReward({"arith": [arith.endpoint]}) as reward:
        out = reward(["9+9="] * 4, ["18", "-18", "", "1" * 80], answer=[18] * 4)
    assert all(isinstance(r, float) and math.isfinite(r) for r in out)
    assert out == [1.1, 0.1, 0.0, 0.1]  # an 80-digit "integer" is no answer, but it is bare
