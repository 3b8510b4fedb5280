"""Step rewards in the contract (rows, server and client validation) and the `steps` verifier:
phrasings, commas and currency, text without arithmetic, and hostile inputs that must stay bounded."""

from __future__ import annotations

import asyncio
import time
from concurrent import futures

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.verifiers import convert
from cohort.verifiers.base import (
    GroupRequest,
    GroupResult,
    Reference,
    Rollout,
    RolloutResult,
    RolloutStatus,
    StepReward,
    Verdict,
    VerifierBase,
    VerifyContext,
    step_problem,
)
from cohort.verifiers.steps import StepsVerifier


def score(*completions: str, gold: str | None = None) -> list[RolloutResult]:
    group = GroupRequest("steps", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer=gold))
    return StepsVerifier().verify_group(group, VerifyContext())


def steps_of(text: str, gold: str | None = None) -> list[tuple[str, float]]:
    """Each step as (the text up to its end, reward): readable expectations."""
    (r,) = score(text, gold=gold)
    assert r.status is RolloutStatus.OK, r.detail
    return [(text[: s.end], s.reward) for s in r.steps]


# ---- the verifier ------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("16 - 3 - 4 = 9", [("16 - 3 - 4 = 9", 1.0)]),
    ("16 - 3 - 4 = 10", [("16 - 3 - 4 = 10", 0.0)]),
    ("She eats 3 and bakes 4, so 16 - 3 - 4 = 9 eggs are left.", [("She eats 3 and bakes 4, so 16 - 3 - 4 = 9", 1.0)]),
    ("Each sells for $2: 9 * 2 = $18 a day", [("Each sells for $2: 9 * 2 = $18", 1.0)]),
    ("9*2=18\n18/4=4.5\n", [("9*2=18", 1.0), ("9*2=18\n18/4=4.5", 1.0)]),
    ("2 × (3 + 4) = 14, and 14 ÷ 7 = 3", [("2 × (3 + 4) = 14", 1.0), ("2 × (3 + 4) = 14, and 14 ÷ 7 = 3", 0.0)]),
    ("3 - 5 = -2 and -2 * -2 = 4", [("3 - 5 = -2", 1.0), ("3 - 5 = -2 and -2 * -2 = 4", 1.0)]),
    ("2^10 = 1024 and 2**3 = 9", [("2^10 = 1024", 1.0), ("2^10 = 1024 and 2**3 = 9", 0.0)]),
    ("10 / 3 = 3.33 but 10 / 3 = 3.34", [("10 / 3 = 3.33", 1.0), ("10 / 3 = 3.33 but 10 / 3 = 3.34", 0.0)]),
    ("1/0 = 5", [("1/0 = 5", 0.0)]),  # a division by zero is a wrong step, not a crash
])
def test_steps_in_several_phrasings(text, expected):
    assert steps_of(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("$1,200 / 4 = $300", [("$1,200 / 4 = $300", 1.0)]),
    ("1,000 + 2,500 = 3,500", [("1,000 + 2,500 = 3,500", 1.0)]),
    ("€1,234.50 + €0.50 = €1,235", [("€1,234.50 + €0.50 = €1,235", 1.0)]),
    ("£3 * 4 = £13", [("£3 * 4 = £13", 0.0)]),
    ("She had 3, 16 - 3 = 13", [("She had 3, 16 - 3 = 13", 1.0)]),  # "3, 16" is not a number: the step is 16 - 3
])
def test_commas_and_currency(text, expected):
    assert steps_of(text) == expected


@pytest.mark.parametrize("text", ["no arithmetic here", "x = 5", "Total = 18", "18 = 18", "a == b", "2 < 3 and 3 <= 4", ""])
def test_text_without_an_arithmetic_step_has_no_steps(text):
    (r,) = score(text)
    assert r.status is RolloutStatus.OK and r.steps == () and r.verdict is Verdict.NO_ANSWER and r.reward == 0.0


def test_final_answer_step_with_a_reference():
    text = "16 - 3 - 4 = 9 eggs, 9 * 2 = 18. The answer is $18"
    assert steps_of(text, gold="18") == [("16 - 3 - 4 = 9", 1.0), ("16 - 3 - 4 = 9 eggs, 9 * 2 = 18", 1.0), (text, 1.0)]
    assert steps_of(text, gold="$20")[-1] == (text, 0.0)
    # the last number is the last equation's result: one step, right only if both hold
    assert steps_of("9 * 2 = 18", gold="18") == [("9 * 2 = 18", 1.0)]
    assert steps_of("9 * 2 = 20", gold="20") == [("9 * 2 = 20", 0.0)]
    assert steps_of("#### 1,800", gold="1800") == [("#### 1,800", 1.0)]
    (r,) = score("9 * 2 = 18 #### 18", gold="18")
    assert r.components == {"answer": 1.0, "steps": 2.0, "step_frac": 1.0} and r.verdict is Verdict.CORRECT


def test_a_reference_that_is_not_a_number_is_masked():
    results = score("2 + 2 = 4", "5", gold="four")
    assert [r.status for r in results] == [RolloutStatus.INVALID_REFERENCE] * 2


@pytest.mark.parametrize("text", [
    "9**9**9 = 1",
    "10^100000 = 1",
    "99999999999999999999999999999999999999 ^ 64 = 1",
    "2 ^ 64 ^ 64 = 1",
    "1" * 100 + " = 1",
    "(" * 5000 + "1" + ")" * 5000 + " = 1",
    "1+" * 50_000 + "1 = 50001",
    "2=" * 50_000,
    "1 + 1 = 2, " * 2_000,
    ("1 1 1 1 1 1 1 1 1 1 " * 10 + "= 1 ") * 2_000,
    "9" * 100_000 + " * 9 = 1",
    "= 1" * 30_000,
])
def test_hostile_inputs_are_bounded(text):
    start = time.perf_counter()
    results = score(text, text, gold="1")
    assert time.perf_counter() - start < 5.0
    for r in results:
        # the policy wrote it: scored, never masked (a mask would let it escape the wrong step's gradient)
        assert r.status is RolloutStatus.OK, r
        assert step_problem(r.steps, text) is None
        if "candidate_limit" in r.flags:
            assert r.steps and any(s.reward == 0.0 for s in r.steps) and "candidate limit" in r.detail


@pytest.mark.parametrize("text,refused", [
    ("9^99 = 123", "9^99 = 123"),
    ("so 2 + 2 = 4, then 9^99 = 123", "so 2 + 2 = 4, then 9^99 = 123"),
    ("2 + 2 = " + "4" * 45, "2 + 2 = " + "4" * 45),  # a 45-digit result
    ("4" * 45 + " - 1 = 3", "4" * 45 + " - 1 = 3"),  # a 45-digit literal in the expression
    ("2^64 * 2^64 * " * 40 + "1 = 1", None),  # over 200 characters before '=': the step is wrong
])
def test_a_step_beyond_the_bounds_is_a_wrong_step_not_a_mask(text, refused):
    (r,) = score(text, gold="4")
    assert r.status is RolloutStatus.OK, r.detail
    assert r.flags == ("candidate_limit",)
    assert "candidate limit" in r.detail
    ends = {text[: s.end]: s.reward for s in r.steps}
    if refused is not None:
        assert ends[refused] == 0.0
    assert r.reward < 1.0 and r.verdict is not Verdict.CORRECT
    if text.startswith("so 2 + 2 = 4"):
        assert ends["so 2 + 2 = 4"] == 1.0  # the steps before it keep their rewards


def test_too_many_steps_score_the_whole_completion_zero():
    text = "1 + 1 = 2, " * 300
    (r,) = score(text, gold="2")
    assert r.status is RolloutStatus.OK and r.flags == ("candidate_limit",)
    assert r.reward == 0.0 and r.verdict is Verdict.INCORRECT and [(s.end, s.reward) for s in r.steps] == [(len(text), 0.0)]


def test_steps_within_the_bounds_carry_no_flag():
    (r,) = score("2^64 = 18446744073709551616 and 9 * 2 = 18", gold="18")
    assert r.status is RolloutStatus.OK and r.flags == () and r.verdict is Verdict.CORRECT


def test_a_huge_final_answer_is_wrong_not_masked():
    (r,) = score("the answer is " + "9" * 200, gold="18")
    assert r.status is RolloutStatus.OK and r.components["answer"] == 0.0 and r.flags == ("candidate_limit",)


# ---- the contract ------------------------------------------------------------------------------


def test_step_problem_names_each_rule():
    assert step_problem([StepReward(1, 0.0), StepReward(5, 1.0)], "abcde") is None
    assert "past the completion" in step_problem([StepReward(6, 1.0)], "abcde")
    assert "not after the previous end 0" in step_problem([StepReward(0, 1.0)], "abcde")
    assert "not after the previous end 3" in step_problem([StepReward(3, 1.0), StepReward(2, 1.0)], "abcde")
    assert "reward nan" in step_problem([StepReward(3, float("nan"))], "abcde")


def results_with_steps() -> list[GroupResult]:
    return [
        GroupResult("a", "steps", "1", (
            RolloutResult.ok(0, 1.0, steps=[StepReward(3, 1.0), StepReward(7, 0.0)]),
            RolloutResult.ok(1, 0.0),
            RolloutResult.unusable(2, RolloutStatus.VERIFIER_TIMEOUT, "slow"),
        ), 0.5),
        GroupResult("b", "steps", "1", (RolloutResult.ok(5, 0.5, steps=[StepReward(2, 0.5)]),), 0.1),
    ]


def test_steps_round_trip_as_rows():
    wire = convert.batch_result_to_pb(results_with_steps()).SerializeToString()
    back = convert.batch_result_from_pb(pb.BatchVerifyGroupsResponse.FromString(wire))
    assert [[r.steps for r in g.results] for g in back] == [[r.steps for r in g.results] for g in results_with_steps()]


class _Stepper(VerifierBase):
    """A verifier with bugs in its step rewards (rollout i: the case named by its completion)."""

    name, version, description, reference_kinds = "stepper", "1", "test", ()

    def verify_group(self, group, ctx):
        out = []
        for r in group.rollouts:
            if r.completion == "past":
                out.append(RolloutResult.ok(r.index, 1.0, steps=[StepReward(len(r.completion) + 1, 1.0)]))
            elif r.completion == "unordered":
                out.append(RolloutResult.ok(r.index, 1.0, steps=[StepReward(5, 1.0), StepReward(2, 0.0)]))
            elif r.completion == "unusable":
                bad = RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_TIMEOUT, "slow")
                bad.steps = (StepReward(1, 1.0),)
                out.append(bad)
            else:
                out.append(RolloutResult.ok(r.index, 1.0, steps=[StepReward(len(r.completion), 1.0)]))
        return out


def test_server_turns_malformed_steps_into_verifier_error():
    from cohort.verifiers.hosting.host import ServerLimits, VerifierHost

    scorer = VerifierHost({"stepper": _Stepper()}, ServerLimits())
    try:
        group = GroupRequest("stepper", tuple(Rollout(i, c) for i, c in enumerate(["fine", "past", "unordered", "unusable"])))
        (result,) = scorer.score_now([group], VerifyContext())
    finally:
        scorer.close()
    fine, past, unordered, unusable = result.results
    assert fine.usable and fine.steps == (StepReward(4, 1.0),)
    assert past.status is RolloutStatus.VERIFIER_ERROR and "past the completion" in past.detail
    assert unordered.status is RolloutStatus.VERIFIER_ERROR and "not after the previous end 5" in unordered.detail
    assert unusable.status is RolloutStatus.VERIFIER_TIMEOUT and unusable.steps == ()


class _LyingSteps(pb_grpc.VerifierServiceServicer):
    """Sends step rewards as it likes (bypassing any server-side check): rollout 1's end past its completion."""

    def BatchVerifyGroups(self, request, context):
        groups = []
        for req in request.requests:
            rows = []
            for r in req.rollouts:
                end = len(r.completion) + (1 if r.index == 1 else 0)
                rows.append(RolloutResult.ok(r.index, 1.0, steps=[StepReward(end, 1.0)]))
            groups.append(GroupResult(req.group_id, req.verifier, "1", tuple(rows)))
        return convert.batch_result_to_pb(groups)


def test_client_checks_steps_against_the_completions():
    from cohort.verifiers.client import VerifierClient, WeightedVerifier
    from cohort.verifiers.records import Record, Task

    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_VerifierServiceServicer_to_server(_LyingSteps(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        async def run():
            verifiers = [WeightedVerifier("liar", 1.0, (f"127.0.0.1:{port}",))]
            async with VerifierClient(verifiers) as client:
                return await client.score([Record(Task("g", ""), (Rollout(0, "2+2=4"), Rollout(1, "abc"), Rollout(2, "x")))])

        (scored,) = asyncio.run(run())
    finally:
        server.stop(0)
    assert [r.status for r in scored] == [RolloutStatus.OK, RolloutStatus.VERIFIER_ERROR, RolloutStatus.OK]
    assert scored[0].steps == {"liar": (StepReward(5, 1.0),)} and scored[1].steps == {}


@pytest.mark.parametrize("extra", [[], ["--scoring-procs", "1"]], ids=["in-process", "scoring-procs"])
def test_the_server_counts_candidate_limits(extra):
    """`cohort serve steps` over gRPC: a step beyond the bounds is OK (scored), flagged, and counted in
    cohort_verifier_candidate_limit_rollouts, both when scored in the server and in scoring processes."""
    import urllib.request

    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["steps"], extra_args=[*extra, "--metrics-port", "0"]) as sp, grpc.insecure_channel(sp.endpoint) as ch:
        stub = pb_grpc.VerifierServiceStub(ch)
        req = pb.VerifyGroupRequest(group_id="g", verifier="steps", reference=pb.Reference(answer="123"), rollouts=[
            pb.Rollout(index=0, completion="9^99 = 123"), pb.Rollout(index=1, completion="2 + 2 = 4"),
            pb.Rollout(index=2, completion="2 + 2 = " + "4" * 45)])
        resp = stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=[req]), timeout=30)
        results = resp.responses[0].results
        assert [r.status for r in results] == [pb.ROLLOUT_STATUS_OK] * 3
        assert [list(r.flags) for r in results] == [["candidate_limit"], [], ["candidate_limit"]]
        body = urllib.request.urlopen(f"http://127.0.0.1:{sp.metrics_port}/metrics", timeout=5).read().decode()
    assert 'cohort_verifier_candidate_limit_rollouts_total{verifier="steps"} 2.0' in body


QUESTION = ("Kofi has 4 pencils. A friend gives him 8 more. Then he has twice as many as before. "
            "How many pencils does Kofi have now?")


def score_with(options: dict[str, str], *completions: str, gold: str = "24") -> list[RolloutResult]:
    group = GroupRequest("steps", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer=gold),
                         prompt=QUESTION, options=options)
    return StepsVerifier().verify_group(group, VerifyContext())


def test_grounded_steps_credit_only_numbers_from_the_question_or_earlier_right_steps() -> None:
    right = "4 + 8 = 12. 12 * 2 = 24. The answer is 24."
    unrelated = "1 + 2 = 3. 3 + 4 = 7. So 24."  # right arithmetic, not this problem's (1 and 2 are not in it)
    wrong_factor = "4 + 8 = 12. 12 * 3 = 36. The answer is 36."  # 3: not in the question ('twice' is 2)
    slip = "4 + 8 = 13. 13 * 2 = 26. The answer is 26."  # builds on a wrong result: nothing after it is grounded
    plain = score_with({}, right, unrelated, wrong_factor, slip)
    grounded = score_with({"grounded": "true"}, right, unrelated, wrong_factor, slip)
    assert [s.reward for s in plain[1].steps] == [1.0, 1.0, 1.0]  # without the option: right, and the answer
    assert [s.reward for s in plain[3].steps] == [0.0, 1.0, 0.0]
    assert [s.reward for s in grounded[0].steps] == [1.0, 1.0, 1.0]  # 12 is an earlier result, 2 is 'twice'
    assert [s.reward for s in grounded[1].steps] == [0.0, 0.0, 1.0]  # 3 came from the ungrounded step
    assert [s.reward for s in grounded[2].steps] == [1.0, 0.0, 0.0]
    assert [s.reward for s in grounded[3].steps] == [0.0, 0.0, 0.0]
    assert "2 right but not from the question" in grounded[1].detail
    assert all(r.status is RolloutStatus.OK for r in grounded)


def test_a_bad_steps_option_is_invalid_argument_over_grpc() -> None:
    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["steps"], extra_args=["--metrics-port", "0"]) as sp, grpc.insecure_channel(sp.endpoint) as ch:
        stub = pb_grpc.VerifierServiceStub(ch)
        req = pb.VerifyGroupRequest(group_id="g", verifier="steps", prompt=QUESTION, options={"grounded": "yes"},
                                    rollouts=[pb.Rollout(index=0, completion="4 + 8 = 12")])
        with pytest.raises(grpc.RpcError) as err:
            stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=[req]), timeout=30)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "grounded" in err.value.details()
        ok = pb.VerifyGroupRequest(group_id="g", verifier="steps", prompt=QUESTION, options={"grounded": "true"},
                                   rollouts=[pb.Rollout(index=0, completion="4 + 8 = 12"), pb.Rollout(index=1, completion="1 + 2 = 3")])
        results = stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=[ok]), timeout=30).responses[0].results
        assert [r.reward for r in results] == [1.0, 0.0]  # the option travels over the wire


def test_answer_step_false_leaves_the_final_answer_to_the_outcome_verifier() -> None:
    text = "4 + 8 = 12. 12 * 2 = 24. The answer is 25."
    (with_answer,) = score_with({"grounded": "true"}, text)
    (without,) = score_with({"grounded": "true", "answer_step": "false"}, text)
    assert [s.reward for s in with_answer.steps] == [1.0, 1.0, 0.0]
    assert [s.reward for s in without.steps] == [1.0, 1.0] and without.reward == 1.0
    assert without.components["answer"] == 0.0  # still reported


def test_a_malformed_steps_option_is_refused() -> None:
    from cohort.verifiers.base import InvalidRequest

    with pytest.raises(InvalidRequest, match="grounded"):
        score_with({"grounded": "yes"}, "4 + 8 = 12.")


def test_grounding_reads_magnitudes_words_and_needs_the_question() -> None:
    from cohort.verifiers.base import InvalidRequest
    from cohort.verifiers.steps import question_numbers

    assert {2, 3, 12, 100} <= question_numbers("She has twice as many, then three times, a dozen eggs and 5% off")
    negative = "4 - 8 = -4. -4 - 8 = -12. -12 * 2 = -24."  # 12 is grounded only as the magnitude of -12
    (r,) = score_with({"grounded": "true", "answer_step": "false"}, negative)
    assert [s.reward for s in r.steps] == [1.0, 1.0, 1.0]
    (none,) = score_with({"grounded": "true", "answer_step": "false"}, "I do not know.")
    assert [(s.end, s.reward) for s in none.steps] == [(len("I do not know."), 0.0)]  # no step: one wrong step
    group = GroupRequest("steps", (Rollout(0, "4 + 8 = 12"),), Reference(), prompt="  ", options={"grounded": "true"})
    with pytest.raises(InvalidRequest, match="prompt is empty"):
        StepsVerifier().verify_group(group, VerifyContext())


def test_complete_adds_a_last_step_scoring_the_share_of_the_question_numbers_used() -> None:
    question = "Omar has 4 shells. He uses 1. He sells 2. He gets 1 more. How many shells does Omar have now?"
    whole = "4 - 1 = 3. 3 - 2 = 1. 1 + 1 = 2. The answer is 2."
    shortcut = "Omar now has 4 - 1 = 3."  # one right step and a stop: 2 is never used
    in_one = "4 - 1 - 2 + 1 = 2. The answer is 2."  # one step that uses every number
    wrong_use = "4 - 1 = 3. 3 - 2 = 2."  # 2 only in a wrong step: not used
    ends_on_step = "4 + 8 = 12"  # none of 1, 2 used, and the text ends on the step: one step scoring the product
    nothing = "I think it is 2."
    opts = {"grounded": "true", "answer_step": "false", "complete": "true"}
    texts = (whole, shortcut, in_one, wrong_use, ends_on_step, nothing)
    group = GroupRequest("steps", tuple(Rollout(i, c) for i, c in enumerate(texts)), Reference(answer="2"),
                         prompt=question, options=opts)
    r = StepsVerifier().verify_group(group, VerifyContext())
    assert [(s.end, s.reward) for s in r[0].steps] == [(9, 1.0), (20, 1.0), (31, 1.0), (len(whole), 1.0)]
    assert r[0].components["unused"] == 0.0
    assert [(s.end, s.reward) for s in r[1].steps] == [(len(shortcut) - 1, 1.0), (len(shortcut), pytest.approx(2 / 3))]
    assert r[1].reward == pytest.approx((1 + 2 / 3) / 2) and r[1].reward < r[0].reward
    assert r[1].components["unused"] == 1.0 and "never used (2)" in r[1].detail
    assert [s.reward for s in r[2].steps] == [1.0, 1.0]
    assert [s.reward for s in r[3].steps] == [1.0, 0.0, pytest.approx(2 / 3)]
    assert [(s.end, s.reward) for s in r[4].steps] == [(len(ends_on_step), 0.0)]  # 8 and 12 are not the question's
    assert [(s.end, s.reward) for s in r[5].steps] == [(len(nothing), 0.0)]
    for result, text in zip(r, texts):  # the contract's step ends: strictly increasing, within the text
        assert result.status is RolloutStatus.OK and step_problem(result.steps, text) is None, text
    plain = StepsVerifier().verify_group(GroupRequest("steps", (Rollout(0, shortcut),), Reference(answer="2"),
                                                      prompt=question, options={"grounded": "true", "answer_step": "false"}),
                                         VerifyContext())
    assert plain[0].reward == 1.0 and "unused" not in plain[0].components  # the option is what charges for stopping


def test_every_option_gives_well_formed_steps_on_random_text() -> None:
    """Whatever the policy writes, the steps keep the contract (ends strictly increasing, within the text): a
    malformed one is masked as VERIFIER_ERROR, and a policy that found such a text would escape its gradient."""
    import itertools
    import random

    rng = random.Random(0)
    pieces = ["4", "1", "2", "12", "3", " + ", " - ", " * ", " = ", ". ", "The answer is ", "-", "(", ")", "$", "#### ",
              ",", "0", "=", " "]
    texts = ["", " ", *("".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(600))]
    for grounded, answer_step, complete, connected, solution in itertools.product(("true", "false"), repeat=5):
        opts = {"grounded": grounded, "answer_step": answer_step, "complete": complete, "connected": connected}
        if solution == "true":
            opts["solution"] = "4 - 1 = 3. 3 - 2 = 1. 1 + 1 = 2. The answer is 2."
        group = GroupRequest("steps", tuple(Rollout(i, t) for i, t in enumerate(texts)), Reference(answer="2"),
                             prompt="Omar has 4 shells. He uses 1. He sells 2. He gets 1 more.", options=opts)
        for result, text in zip(StepsVerifier().verify_group(group, VerifyContext()), texts):
            assert result.status is RolloutStatus.OK, (opts, text)
            assert step_problem(result.steps, text) is None, (opts, text, result.steps)


def test_complete_needs_the_question_and_a_true_or_false() -> None:
    from cohort.verifiers.base import InvalidRequest

    with pytest.raises(InvalidRequest, match="complete"):
        score_with({"complete": "yes"}, "4 + 8 = 12.")
    group = GroupRequest("steps", (Rollout(0, "4 + 8 = 12"),), Reference(), prompt=" ", options={"complete": "true"})
    with pytest.raises(InvalidRequest, match="complete=true needs the question"):
        StepsVerifier().verify_group(group, VerifyContext())


def test_connected_makes_a_right_step_that_leads_nowhere_a_wrong_step() -> None:
    question = "Sara has 6 stamps. She loses 4. She gets 3 more. She finds 3 more. How many stamps does Sara have now?"
    chain = "6 - 4 = 2. 2 + 3 = 5. 5 + 3 = 8. The answer is 8."
    side_sums = "6 + 4 = 10. 4 + 3 = 7. 3 + 3 = 6. The answer is 6."  # every number used, nothing chained
    meeting = "6 - 4 = 2. 3 + 3 = 6. 2 + 6 = 8."  # two results that meet in the last step
    opts = {"grounded": "true", "answer_step": "false", "complete": "true", "connected": "true"}
    group = GroupRequest("steps", tuple(Rollout(i, c) for i, c in enumerate((chain, side_sums, meeting))),
                         Reference(answer="8"), prompt=question, options=opts)
    r = StepsVerifier().verify_group(group, VerifyContext())
    assert [s.reward for s in r[0].steps] == [1.0, 1.0, 1.0, 1.0]
    # 10 and 7 are never used again; the last step keeps its credit; used: only 3 of {6, 4, 3}
    assert [s.reward for s in r[1].steps] == [0.0, 0.0, 1.0, pytest.approx(1 / 3)]
    assert "2 right but unused by any later step" in r[1].detail
    assert [s.reward for s in r[2].steps] == [1.0, 1.0, 1.0, 1.0]  # 2 and 6 meet in the last step
    without = StepsVerifier().verify_group(GroupRequest("steps", (Rollout(0, side_sums),), Reference(answer="8"),
                                                        prompt=question, options={**opts, "connected": "false"}),
                                           VerifyContext())
    assert [s.reward for s in without[0].steps] == [1.0, 1.0, 1.0, 1.0]  # the hack complete alone pays in full


def test_solution_credits_only_the_worked_solutions_steps_in_their_place() -> None:
    question = "Sara has 6 stamps. She loses 4. She gets 3 more. She finds 3 more. How many stamps does Sara have now?"
    opts = {"answer_step": "false", "solution": "6 - 4 = 2. 2 + 3 = 5. 5 + 3 = 8. The answer is 8."}
    texts = {
        "whole": "6 - 4 = 2. 3 + 2 = 5. 5 + 3 = 8. The answer is 8.",  # 3 + 2 matches 2 + 3
        "short": "6 - 4 = 2. 2 + 3 = 5. The answer is 5.",  # stops a step early: ends on a wrong step
        "side sums": "6 + 4 = 10. 4 + 3 = 7. 3 + 3 = 6. The answer is 6.",  # right arithmetic, not the chain
        "loop": "6 - 4 = 2. 2 + 3 = 5. 5 + 3 = 8. 5 + 3 = 8. The answer is 8.",  # a step past the end
        "signs": "4 - 6 = -2. -2 + 3 = 1.",  # the same numbers, the wrong result
        "ends on a step": "6 - 4 = 2. 2 + 3 = 5",
        "empty": "",
    }
    group = GroupRequest("steps", tuple(Rollout(i, t) for i, t in enumerate(texts.values())), Reference(answer="8"),
                         prompt=question, options=opts)
    r = dict(zip(texts, StepsVerifier().verify_group(group, VerifyContext())))
    assert [s.reward for s in r["whole"].steps] == [1.0, 1.0, 1.0] and r["whole"].components["solution_frac"] == 1.0
    short = r["short"].steps
    assert [s.reward for s in short] == [1.0, 1.0, 0.0] and short[-1].end == len(texts["short"])
    assert r["short"].reward < r["whole"].reward and r["short"].components["solution_frac"] == pytest.approx(2 / 3)
    assert [s.reward for s in r["side sums"].steps] == [0.0, 0.0, 0.0]
    assert [s.reward for s in r["loop"].steps] == [1.0, 1.0, 1.0, 0.0]
    assert [s.reward for s in r["signs"].steps] == [0.0, 0.0, 0.0]  # and the chain is unfinished
    assert [(s.end, s.reward) for s in r["ends on a step"].steps] == [(9, 1.0), (len(texts["ends on a step"]), 0.0)]
    assert r["empty"].steps == () and r["empty"].reward == 0.0
    assert "2 of the solution's 3 steps" in r["short"].detail
    # the outcome view is the share of the solution written in place, out of the steps written when there are
    # more: stopping early never beats the chain, and neither does going on past its end
    assert [x.reward for x in r.values()] == [1.0, pytest.approx(2 / 3), 0.0, 0.75, 0.0, pytest.approx(2 / 3), 0.0]
    assert r["loop"].components["solution_frac"] == 1.0  # the share of the solution alone is unchanged
    for result, text in zip(r.values(), texts.values()):
        assert result.status is RolloutStatus.OK and step_problem(result.steps, text) is None, text


@pytest.mark.parametrize("solution", ["The answer is 8.", "6 - 4 = 3. 3 + 3 = 6.", "9^99 = 1. 1 + 1 = 2.", ""])
def test_a_solution_without_steps_or_with_a_wrong_one_is_an_invalid_reference(solution) -> None:
    group = GroupRequest("steps", (Rollout(0, "6 - 4 = 2."), Rollout(1, "")), Reference(answer="8"), prompt="q",
                         options={"solution": solution})
    for r in StepsVerifier().verify_group(group, VerifyContext()):
        assert r.status is RolloutStatus.INVALID_REFERENCE and "solution" in r.detail
