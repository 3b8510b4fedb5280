"""Domain <-> protobuf conversion: round trips, and what a client makes of values it does not know."""

from __future__ import annotations

from grpo.verifier.v1 import verifier_service_pb2 as pb

from verifiers import convert
from verifiers.base import CodeTests, GroupRequest, GroupResult, Reference, Rollout, RolloutResult, RolloutStatus, Verdict


def test_batch_request_round_trip_keeps_every_field():
    groups = [
        GroupRequest("math", (Rollout(3, "x = 4", True), Rollout(1, "")), Reference(answer="4"), "q1", "2+2?", 2.5, {"mode": "soft"}),
        GroupRequest("code", (Rollout(0, "def f(): pass"),), Reference(code_tests=CodeTests("asserts", asserts=("assert f() is None",))), "q2"),
        GroupRequest("format", (Rollout(7, "<answer>1</answer>"),)),
    ]
    wire = convert.batch_to_pb(groups).SerializeToString()
    back = [convert.group_from_pb(m) for m in pb.BatchVerifyGroupsRequest.FromString(wire).requests]
    assert back == groups
    assert convert.group_from_pb(convert.group_to_pb(groups[0])) == groups[0]


def test_batch_result_round_trip_and_duration_shares():
    results = [
        GroupResult("q1", "format", "1.0", (
            RolloutResult.ok(0, 1.0, components={"think": 1.0, "answer": 1.0}, detail="ok", flags=("text_after_answer",)),
            RolloutResult(1, RolloutStatus.OK, Verdict.INCORRECT, 0.0, {}, "", 0.25),
            RolloutResult.unusable(2, RolloutStatus.VERIFIER_TIMEOUT, "too slow"),
        ), 0.9),
    ]
    wire = convert.batch_result_to_pb(results).SerializeToString()
    (back,) = [convert.group_result_from_pb(m) for m in pb.BatchVerifyGroupsResponse.FromString(wire).responses]
    assert [(r.index, r.status, r.verdict, r.reward, r.components, r.detail, r.flags) for r in back.results] == [
        (r.index, r.status, r.verdict, r.reward, r.components, r.detail, r.flags) for r in results[0].results
    ]
    # only a result timed alone carries a duration on the wire; the others get their share of the group's
    assert [r.HasField("verify_duration") for r in pb.BatchVerifyGroupsResponse.FromString(wire).responses[0].results] == [
        False, True, False]
    assert [round(r.duration_s, 6) for r in back.results] == [0.3, 0.25, 0.3]
    assert abs(back.duration_s - 0.9) < 1e-6


def test_a_server_that_times_only_rollouts_gives_the_group_their_sum():
    """Other implementations (the Node.js example) may set only per-rollout durations."""
    msg = pb.VerifyGroupResponse(group_id="g", verifier="v", results=[
        pb.RolloutResult(index=i, status=pb.ROLLOUT_STATUS_OK, reward=1.0) for i in range(2)])
    msg.results[0].verify_duration.nanos = 200_000_000
    msg.results[1].verify_duration.nanos = 300_000_000
    back = convert.group_result_from_pb(msg)
    assert [round(r.duration_s, 6) for r in back.results] == [0.2, 0.3]
    assert abs(back.duration_s - 0.5) < 1e-6


def test_unknown_status_from_a_newer_server_is_an_error_never_a_zero():
    msg = pb.VerifyGroupResponse(group_id="g", verifier="v", results=[
        pb.RolloutResult(index=0, status=pb.ROLLOUT_STATUS_UNSPECIFIED, reward=0.0),
        pb.RolloutResult(index=1, status=42, reward=1.0),
        pb.RolloutResult(index=2, status=pb.ROLLOUT_STATUS_OK, verdict=99, reward=1.0),
    ])
    results = convert.group_result_from_pb(msg).results
    assert [r.status for r in results] == [RolloutStatus.VERIFIER_ERROR, RolloutStatus.VERIFIER_ERROR, RolloutStatus.OK]
    assert not results[0].usable and "server sent status 0" in results[0].detail
    assert "server sent status 42" in results[1].detail
    assert results[2].verdict is Verdict.UNSPECIFIED and results[2].reward == 1.0
