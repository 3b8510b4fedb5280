"""A small standalone verifier server, correct by default, with one deliberate defect per kit rule.

It implements ``grpo.verifier.v1`` directly with grpcio (not through Cohort's runtime), scoring like
the Node.js example: ``exact``, the last ``<answer>`` block (or the whole completion) against
``reference.answer``. The conformance tests start it in a subprocess::

    python tests/conformance/broken_server.py --port 50123 --defect wrong_order
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

NAME = "exact"
SERVICE = pb.DESCRIPTOR.services_by_name["VerifierService"].full_name
MAX_GROUPS, MAX_ROLLOUTS, MAX_BYTES = 256, 64, 1024 * 1024
ANSWER_RE = re.compile(r"<answer>([\s\S]*?)</answer>", re.IGNORECASE)

DEFECTS = {
    "none": "conforms",
    "no_health": "no grpc.health.v1 service",
    "no_reflection": "no server reflection",
    "no_version": "ListVerifiers gives an empty version",
    "wrong_answer": "any non-empty answer is CORRECT",
    "missing_result": "drops the last result of groups with several rollouts",
    "wrong_order": "returns results sorted by index instead of in request order",
    "nondeterministic": "adds float noise (1e-9) to rewards",
    "wrong_status": "unknown verifier -> NOT_FOUND, duplicate indexes accepted",
    "racy": "shares the request between concurrent calls",
    "hang": "hangs forever on calls with less than a second of deadline",
    "unresponsive": "VerifierService never answers (health and reflection do)",
    "reflection_hangs": "server reflection accepts the stream and never answers",
    "no_sigterm": "no SIGTERM handler: dies at once, dropping in-flight calls",
    "bad_steps": "step rewards that end past the completion",
    "small_receive": "advertises 8 MiB but keeps gRPC's default 4 MiB receive limit",
}
ADVERTISED_BYTES = {"small_receive": 8 * 1024 * 1024}


def normalise(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.lower()


def score(rollout: pb.Rollout, gold: str, case_sensitive: bool, defect: str) -> pb.RolloutResult:
    if not gold.strip():
        return pb.RolloutResult(index=rollout.index, status=pb.ROLLOUT_STATUS_INVALID_REFERENCE, detail="empty gold answer")
    blocks = ANSWER_RE.findall(rollout.completion)
    answer = normalise(blocks[-1] if blocks else rollout.completion, case_sensitive)
    if not answer:
        return pb.RolloutResult(index=rollout.index, status=pb.ROLLOUT_STATUS_OK, verdict=pb.VERDICT_NO_ANSWER,
                                reward=0.0, reward_components={"match": 0.0})
    match = answer == normalise(gold, case_sensitive) or defect == "wrong_answer"
    reward = float(match) + (random.random() * 1e-9 if defect == "nondeterministic" else 0.0)
    steps = [pb.StepReward(end=len(rollout.completion) + 1, reward=reward)] if defect == "bad_steps" else []
    return pb.RolloutResult(index=rollout.index, status=pb.ROLLOUT_STATUS_OK,
                            verdict=pb.VERDICT_CORRECT if match else pb.VERDICT_INCORRECT,
                            reward=reward, reward_components={"match": float(match)}, steps=steps)


class Servicer(pb_grpc.VerifierServiceServicer):
    def __init__(self, defect: str) -> None:
        self.defect = defect
        self.draining = False
        self.shared: pb.BatchVerifyGroupsRequest | None = None

    def _validate(self, req: pb.VerifyGroupRequest, context) -> None:
        if req.verifier != NAME:
            code = grpc.StatusCode.NOT_FOUND if self.defect == "wrong_status" else grpc.StatusCode.INVALID_ARGUMENT
            context.abort(code, f"unknown verifier {req.verifier!r}")
        if not req.rollouts:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty group")
        if len(req.rollouts) > MAX_ROLLOUTS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"more than {MAX_ROLLOUTS} rollouts")
        indexes = [r.index for r in req.rollouts]
        if len(set(indexes)) != len(indexes) and self.defect != "wrong_status":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "duplicate rollout index")
        if req.reference.WhichOneof("kind") != "answer":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "needs reference.answer")

    def _group(self, req: pb.VerifyGroupRequest) -> pb.VerifyGroupResponse:
        case_sensitive = req.options.get("case_sensitive") == "true"
        results = [score(r, req.reference.answer, case_sensitive, self.defect) for r in req.rollouts]
        if self.defect == "wrong_order":
            results.sort(key=lambda r: r.index)
        if self.defect == "missing_result" and len(results) > 1:
            results = results[:-1]
        return pb.VerifyGroupResponse(group_id=req.group_id, verifier=NAME, verifier_version="1.0.0", results=results)

    def _admit(self, context) -> None:
        if self.draining:
            context.abort(grpc.StatusCode.UNAVAILABLE, "draining")
        remaining = context.time_remaining()
        if self.defect == "unresponsive":
            time.sleep(3600)  # accepts every call, answers none
        if self.defect == "hang" and remaining is not None and remaining < 1.0:
            time.sleep(3600)  # ignores the deadline and holds a worker thread forever
        if remaining is not None and remaining <= 0:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed")

    def VerifyGroup(self, request, context):
        self._admit(context)
        self._validate(request, context)
        return self._group(request)

    def BatchVerifyGroups(self, request, context):
        self._admit(context)
        if not request.requests or len(request.requests) > MAX_GROUPS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"a batch has 1 to {MAX_GROUPS} groups")
        for req in request.requests:
            self._validate(req, context)
        if self.defect == "racy":
            self.shared = request
            time.sleep(0.005)
            request = self.shared
        return pb.BatchVerifyGroupsResponse(responses=[self._group(r) for r in request.requests])

    def ListVerifiers(self, request, context):
        self._admit(context)
        version = "" if self.defect == "no_version" else "1.0.0"
        limits = pb.ServerLimits(max_groups_per_batch=MAX_GROUPS, max_rollouts_per_group=MAX_ROLLOUTS,
                                 max_message_bytes=ADVERTISED_BYTES.get(self.defect, MAX_BYTES))
        return pb.ListVerifiersResponse(verifiers=[pb.VerifierInfo(name=NAME, version=version, reference_kinds=["answer"])],
                                        limits=limits, server_version="broken-server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--defect", choices=sorted(DEFECTS), default="none")
    args = parser.parse_args()

    workers = 4 if args.defect == "hang" else 8  # unresponsive: the kit stops after its first call hangs
    options = [("grpc.so_reuseport", 0)]
    if args.defect != "small_receive":  # small_receive: gRPC's default (4 MiB) stays, whatever is advertised
        options.append(("grpc.max_receive_message_length", MAX_BYTES))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=options)
    servicer = Servicer(args.defect)
    pb_grpc.add_VerifierServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    if args.defect != "no_health":
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if args.defect == "reflection_hangs":
        never = grpc.stream_stream_rpc_method_handler(lambda requests, context: time.sleep(3600) or iter(()))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(reflection.SERVICE_NAME, {"ServerReflectionInfo": never}),))
    elif args.defect != "no_reflection":
        reflection.enable_server_reflection([SERVICE, reflection.SERVICE_NAME], server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    for name in ("", SERVICE, NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    stop = threading.Event()
    if args.defect != "no_sigterm":
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    servicer.draining = True
    health_servicer.enter_graceful_shutdown()
    server.stop(grace=10).wait()


if __name__ == "__main__":
    main()
