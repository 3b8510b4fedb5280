"""One oversize rollout is that rollout's problem (issue 49): a completion over ``max_completion_chars``
(1,000,000 characters by default) used to make the server refuse the whole request (INVALID_ARGUMENT);
now it is scored 0 and flagged ``candidate_limit``, and the rest of its group is scored as usual, on every
verifier (the check is the host's, which every verifier and every scoring process runs). Real servers
on loopback (``cohort serve format arith``, with and without ``--scoring-procs``); the 8 MiB message limit is
unchanged."""

from __future__ import annotations

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess

HUGE = "<think>" + "x" * 1_000_001 + "</think><answer>4</answer>"


def group(verifier: str, completions, reference: str | None = None) -> pb.VerifyGroupRequest:
    req = pb.VerifyGroupRequest(group_id="g", verifier=verifier,
                                rollouts=[pb.Rollout(index=i, completion=c) for i, c in enumerate(completions)])
    if reference is not None:
        req.reference.answer = reference
    return req


@pytest.mark.parametrize("procs", [[], ["--scoring-procs", "1"]], ids=["threads", "scoring-procs"])
def test_an_oversize_rollout_is_scored_0_and_flagged_and_its_group_kept(procs):
    with ServiceProcess(["format", "arith"], extra_args=procs) as proc, grpc.insecure_channel(
            proc.endpoint, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = pb_grpc.VerifierServiceStub(channel)
        batch = pb.BatchVerifyGroupsRequest(requests=[
            group("format", ["<think>add</think><answer>4</answer>", HUGE, "4"]),
            group("arith", ["4", HUGE, "5"], "4")])
        reply = stub.BatchVerifyGroups(batch, timeout=60)
        for resp, expected in zip(reply.responses, ([1.0, 0.0, 0.0], [1.0, 0.0, 0.0])):
            assert [r.status for r in resp.results] == [pb.ROLLOUT_STATUS_OK] * 3
            assert [r.reward for r in resp.results] == pytest.approx(expected, abs=0.25)
            big = resp.results[1]
            assert big.reward == 0.0 and "candidate_limit" in big.flags and f"{len(HUGE)} characters" in big.detail
            assert "candidate_limit" not in resp.results[0].flags and resp.results[0].reward > 0
        [alone] = stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=[group("format", [HUGE])]),
                                         timeout=60).responses  # a group of nothing but oversize rollouts
        assert alone.results[0].reward == 0.0 and "candidate_limit" in alone.results[0].flags
        with pytest.raises(grpc.RpcError) as err:  # the message limit is the transport's, unchanged
            stub.VerifyGroup(group("format", ["x" * 9_000_000]), timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
