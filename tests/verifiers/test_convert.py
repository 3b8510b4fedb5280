"""Domain <-> protobuf conversion: round trips, and what a client makes of values it does not know."""

from __future__ import annotations

from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

from cohort.verifiers import convert
from cohort.verifiers.base import CodeTests, GroupRequest, GroupResult, Reference, Rollout, RolloutResult, RolloutStatus, Verdict


def test_batch_request_round_trip_keeps_every_field():
    groups = [
        GroupRequest("math", (Rollout(3, "x = 4", True), Rollout(1, "")), Reference(answer="4"), "q1", "2+2?", 2.5, {"mode": "soft"}),
        GroupRequest("code", (Rollout(0, "def f(): pass"),), Reference(code_tests=CodeTests("asserts", asserts=("assert f() is None",))), "q2"),
        GroupRequest("format", (Rollout(7, "<answer>1</answer>"),)),
    ]
    wire = convert.batch_to_pb(groups).SerializeToString()
    back = [convert.group_from_pb(m) for m in pb.BatchVerifyGroupsRequest.FromString(wire).requests]
    assert back == groups
    assert convert.group_from_pb(convert.batch_to_pb(groups[:1]).requests[0]) == groups[0]


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


def _mixed_results() -> list[GroupResult]:
    """Every shape a result must carry: components that differ per row or are missing, several flags,
    rollouts timed alone or not, unusable rows, groups of different sizes, a group without a duration."""
    return [
        GroupResult("q1", "format", "1.0", (
            RolloutResult.ok(0, 1.0, components={"think": 1.0, "answer": 1.0}, detail="ok", flags=("text_after_answer",)),
            RolloutResult(1, RolloutStatus.OK, Verdict.INCORRECT, 0.0, {"answer": 0.0, "think": 0.5}, "", 0.3),
            RolloutResult.unusable(2, RolloutStatus.VERIFIER_TIMEOUT, "too slow"),
            RolloutResult.ok(5, 0.5, components={"partial": 0.5}, flags=("multiple_answers", "nested_tags")),
        ), 0.9),
        GroupResult("q2", "math", "2.1", (RolloutResult(9, RolloutStatus.OK, Verdict.CORRECT, 1.0, {}, "x = 4", 0.125),), 0.0),
        GroupResult("q3", "format", "1.0", tuple(RolloutResult.ok(i, 1.0, components={"think": 1.0}) for i in range(8)), 0.4),
    ]


def _decode(wire: bytes) -> list[GroupResult]:
    return convert.batch_result_from_pb(pb.BatchVerifyGroupsResponse.FromString(wire))


def test_mixed_results_round_trip_as_rows():
    """(Was a rows-vs-columns comparison; rows are now the one encoding, and carry all of it.)"""
    results = _mixed_results()
    rows = convert.batch_result_to_pb(results)
    assert [len(g.results) for g in rows.responses] == [4, 1, 8]
    from_rows = _decode(rows.SerializeToString())
    assert [(g.group_id, g.verifier, g.verifier_version) for g in from_rows] == [(g.group_id, g.verifier, g.verifier_version) for g in results]
    assert [[(r.index, r.status, r.verdict, r.reward, r.components, r.detail, r.flags) for r in g.results] for g in from_rows] == [
        [(r.index, r.status, r.verdict, r.reward, r.components, r.detail, r.flags) for r in g.results] for g in results]
    assert from_rows[0].results[3].flags == ("multiple_answers", "nested_tags")
    assert from_rows[0].results[2].components == {} and from_rows[0].results[1].components == {"answer": 0.0, "think": 0.5}
    # durations: timed alone travels as is, the rest get their share of the group's time
    assert [round(r.duration_s, 6) for r in from_rows[0].results] == [0.225, 0.3, 0.225, 0.225]
    assert from_rows[1].duration_s == 0.125  # no group time: the sum of what was timed alone


def test_the_removed_columns_layout_stays_wire_compatible():
    """Fields of the removed columnar layout are reserved, never reused; an old client's request that
    still asks for columns (field 2 = 2) parses, and the answer is rows."""
    request_fields = pb.BatchVerifyGroupsRequest.DESCRIPTOR
    response_fields = pb.BatchVerifyGroupsResponse.DESCRIPTOR
    group_fields = pb.VerifyGroupResponse.DESCRIPTOR
    for desc, number, name in [(request_fields, 2, "result_layout"), (response_fields, 2, "columns"), (group_fields, 6, "column_rows")]:
        assert number not in desc.fields_by_number and name not in desc.fields_by_name, (desc.name, name)
    assert "ResultLayout" not in pb.DESCRIPTOR.enum_types_by_name and "ResultColumns" not in pb.DESCRIPTOR.message_types_by_name
    from google.protobuf import descriptor_pb2

    file_proto = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file_proto)
    reserved = {m.name: ([(r.start, r.end) for r in m.reserved_range], list(m.reserved_name)) for m in file_proto.message_type}
    assert reserved["BatchVerifyGroupsRequest"] == ([(2, 3)], ["result_layout"])
    assert reserved["BatchVerifyGroupsResponse"] == ([(2, 3)], ["columns"])
    assert reserved["VerifyGroupResponse"] == ([(6, 7)], ["column_rows"])
    old = convert.batch_to_pb([GroupRequest("format", (Rollout(0, "x"),), group_id="g")]).SerializeToString() + b"\x10\x02"
    parsed = pb.BatchVerifyGroupsRequest.FromString(old)
    assert [convert.group_from_pb(r).group_id for r in parsed.requests] == ["g"]
