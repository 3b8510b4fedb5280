"""Domain <-> protobuf conversion: round trips, and what a client makes of values it does not know."""

from __future__ import annotations

import pytest
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


# ---- results as columns (RESULT_LAYOUT_COLUMNS) ---------------------------------------------------

def _mixed_results() -> list[GroupResult]:
    """Every shape a column must carry: components that differ per row or are missing, several flags,
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


def test_columns_carry_exactly_what_rows_carry():
    results = _mixed_results()
    rows = convert.batch_result_to_pb(results)
    columns = convert.batch_result_to_pb(results, columns=True)
    assert columns.HasField("columns") and not any(g.results for g in columns.responses)
    assert [g.column_rows for g in columns.responses] == [4, 1, 8]
    from_rows, from_columns = _decode(rows.SerializeToString()), _decode(columns.SerializeToString())
    assert from_columns == from_rows
    assert from_columns[0].results[3].flags == ("multiple_answers", "nested_tags")
    assert from_columns[0].results[2].components == {} and from_columns[0].results[1].components == {"answer": 0.0, "think": 0.5}
    # durations: timed alone travels as is, the rest get their share of the group's time
    assert [round(r.duration_s, 6) for r in from_columns[0].results] == [0.225, 0.3, 0.225, 0.225]
    assert from_columns[1].duration_s == 0.125  # no group time: the sum of what was timed alone


def test_replies_to_consecutive_chunks_joined_are_the_reply_to_the_batch():
    """What the scoring processes rely on: protobuf merges the repeated `columns` field by concatenation."""
    results = _mixed_results()
    whole = _decode(convert.batch_result_to_pb(results, columns=True).SerializeToString())
    chunks = [(0, 1), (1, 3)]
    joined = b"".join(convert.batch_result_to_pb(results[a:b], True, first_group=a).SerializeToString() for a, b in chunks)
    assert _decode(joined) == whole
    # chunks that do not say where they start carry wrong group tags: refused, not guessed
    untagged = b"".join(convert.batch_result_to_pb(results[a:b], True).SerializeToString() for a, b in chunks)
    with pytest.raises(convert.MalformedMessage, match="group tags"):
        _decode(untagged)


def test_rows_written_in_another_group_order_are_refused():
    """A server that writes each group's rows as the group finishes (here b before a), tagging them with
    their group: with equal indexes in every group, only the tags show the rows are not in order."""
    ones = GroupResult("a", "v", "1", tuple(RolloutResult.ok(i, 1.0) for i in range(4)), 0.1)
    zeros = GroupResult("b", "v", "1", tuple(RolloutResult.ok(i, 0.0) for i in range(4)), 0.1)
    honest = convert.batch_result_to_pb([ones, zeros], columns=True)
    assert [r.reward for g in _decode(honest.SerializeToString()) for r in g.results] == [1.0] * 4 + [0.0] * 4
    liar = pb.BatchVerifyGroupsResponse()
    liar.responses.extend(honest.responses)
    liar.columns.CopyFrom(convert.batch_result_to_pb([zeros], True, first_group=1).columns)
    liar.columns.MergeFrom(convert.batch_result_to_pb([ones], True, first_group=0).columns)
    assert list(liar.columns.group) == [1] * 4 + [0] * 4
    with pytest.raises(convert.MalformedMessage, match="group tags"):
        _decode(liar.SerializeToString())


def test_unknown_status_in_columns_is_an_error_never_a_zero():
    batch = convert.batch_result_to_pb([GroupResult("g", "v", "1", tuple(RolloutResult.ok(i, 1.0) for i in range(3)), 0.1)], columns=True)
    batch.columns.status[0] = pb.ROLLOUT_STATUS_UNSPECIFIED
    batch.columns.status[1] = 42
    (group,) = _decode(batch.SerializeToString())
    assert [r.status for r in group.results] == [RolloutStatus.VERIFIER_ERROR, RolloutStatus.VERIFIER_ERROR, RolloutStatus.OK]
    assert "server sent status 42" in group.results[1].detail and group.results[2].reward == 1.0


@pytest.mark.parametrize("corrupt,message", [
    (lambda b: b.columns.reward.pop(), "do not line up"),
    (lambda b: b.columns.detail.append("extra"), "do not line up"),
    (lambda b: setattr(b.responses[0], "column_rows", 2), "claim 3 column rows"),
    (lambda b: setattr(b.responses[0], "column_rows", 2**32 - 1), "column rows"),  # never allocated
    (lambda b: b.columns.component_values.pop(), "component_counts"),
    (lambda b: b.columns.component_counts.__setitem__(0, 5), "component_counts"),
    (lambda b: b.columns.flag_counts.__setitem__(1, 1), "flag_counts"),
    (lambda b: b.columns.flag_counts.__setitem__(1, 2**32 - 1), "flag_counts"),
    (lambda b: b.responses[1].results.add(index=0), "has rows although"),
])
def test_columns_that_do_not_line_up_are_refused(corrupt, message):
    batch = convert.batch_result_to_pb(_mixed_results()[:2], columns=True)
    corrupt(batch)
    with pytest.raises(convert.MalformedMessage, match=message):
        _decode(batch.SerializeToString())
