"""Pathological inputs against a real ``cohort serve math`` over gRPC on loopback.

Each input is one VerifyGroup call with a 1 s rollout timeout: it must be answered within twice that
budget + 0.25 s (a check that runs out of its budget is followed by the attribution probes of issue 29: the
gold and the answer alone, in parallel, each under the same budget; the slack scaled by how loaded the
machine is just then: ``slowdown``, tests/conftest.py),
never scored CORRECT by accident, never crash the server; afterwards the server is still SERVING and scores
ordinary requests correctly.
"""

from __future__ import annotations

import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess, health_status

TIMEOUT_S = 1.0
SLACK_S = 0.25
"""What an answer may take past its two budgets on an idle machine (the server's own work around the check)."""
ANSWER_BY_S = 2 * TIMEOUT_S  # the check's budget, then the attribution probes' (in parallel)


def scaled_slack(slowdown: float) -> float:
    """SLACK_S on an idle machine; on a loaded one the server's work around the check takes ``slowdown``
    times longer, and half as much again covers the error of a 50 ms sample of the slowdown (its share of
    the CPU is not the server's to the millisecond). 0.25 s idle, 0.625 s at 2x, 0.8125 s at 2.5x (five busy
    processes on two CPUs).

    >>> round(scaled_slack(1.0), 3), round(scaled_slack(2.0), 3)
    (0.25, 0.625)
    """
    return SLACK_S * (1.0 + 1.5 * (max(1.0, slowdown) - 1.0))

REASONING = "Let us think about this carefully. We try a few values and simplify the expression. " * 6


def _fraction_tower(depth: int) -> str:
    s = "1"
    for _ in range(depth):
        s = "1+\\frac{1}{" + s + "}"
    return s


def _sqrt_tower(depth: int) -> str:
    s = "2"
    for _ in range(depth):
        s = "\\sqrt{" + s + "}"
    return s


def _symbolic_det(n: int) -> str:
    rows = " \\\\ ".join(" & ".join(f"a_{{{i}{j}}}" for j in range(n)) for i in range(n))
    return "\\det\\begin{pmatrix}" + rows + "\\end{pmatrix}"


def _big_matrix(n: int) -> str:
    rows = " \\\\ ".join(" & ".join(str((i * 7 + j * 3) % 11) for j in range(n)) for i in range(n))
    return "\\begin{pmatrix}" + rows + "\\end{pmatrix}"


BOXED = [  # final answers that are pathological for SymPy
    "9^{9^{9^9}}",
    "10^{10^{10}}",
    "7^{12345678}",
    "2^{2^{2^{2^{2}}}}",
    "(10^{10})!",
    "((100!)!)!",
    "1000000!",
    "\\binom{10^8}{5\\cdot10^7}",
    "\\binom{100000000}{50000000}",
    _fraction_tower(60),
    "+".join(str(k) for k in range(1, 2001)),
    "\\sum_{k=1}^{10^{9}} k^2",
    "\\sum_{k=1}^{1000000} \\frac{1}{k^2}",
    "\\int_0^1 e^{x^2}\\sin(x^3)\\,dx",
    "\\int x^{x} \\, dx",
    _symbolic_det(6),
    _sqrt_tower(40),
    "x^{x^{x^{x}}}",
    "(x+y+z)^{60}",
    "\\sin(10^{100})",
    "10^{-10^{10}}",
    "9" * 5000,
    "\\frac{1}{0}",
    "0^0",
    "\\tan(\\pi/2)",
    "\\log(0)",
    "\\prod_{k=1}^{10^6} k",
    "\\lim_{x\\to 0} \\frac{\\sin x}{x}",
    "\\sum_{n=1}^{\\infty} \\frac{1}{n^2}",
    "\\Gamma(10^6)",
    "e^{e^{e^{e^{e}}}}",
    "2^{-2^{64}}",
    _big_matrix(30),
    "1e999999",
    "\\frac{x^{100}-1}{x-1}",
    "\\left(\\left(\\left(\\left(" * 50,
    "\\frac{1}{",
    "(((((((((" * 200 + "1",
    "x^{1000000}-x^{999999}",
    "\\sqrt[10^{10}]{2}",
]

RAW = [  # whole responses that are pathological for extraction
    REASONING * 100 + "so the answer is $\\boxed{5}$.",  # ~50 KB, correct (checked below)
    "word " * 10_000,  # 50 KB without any answer
    "\\boxed{" + "{" * 25_000 + "}" * 25_000 + "}",
    " ".join(f"\\boxed{{{k % 2}}}" for k in range(8_000)),  # box spam
    "<answer>" * 10_000,
    "$" * 50_000,
    "\\boxed{" * 10_000,
    "\x00\x01\x02" * 5_000 + "\\boxed{5}",
    "∑∫√∞≠" * 4_000,
    "Final Answer: " * 5_000,
    # each froze the whole server (a regex backtracking exponentially or polynomially holds the GIL to its
    # end; a Python loop joining its output at every newline) before tests/verifiers/test_redos.py:
    "The answer is " + "0" * 40 + " dollars!",
    "The answer is \\text{A)}" + " " * 5_000 + "$$",
    "Final answer: " + "\n" * 200_000,
    "Final answer: " + " " * 150_000 + "so the answer is $\\boxed{5}$.",  # correct (checked below)
]

CASES = [("5", REASONING + f"Therefore the answer is $\\boxed{{{b}}}$.") for b in BOXED] + [("5", r) for r in RAW]
# pathological gold answers: unparseable or capped references are INVALID_REFERENCE, not rewards
GOLD_CASES = [("\\frac{1}{", "\\boxed{5}"), ("9^{9^{9^9}}", "\\boxed{5}"), ("", "\\boxed{5}")]


def _request(gold: str, completion: str, gid: str) -> pb.VerifyGroupRequest:
    return pb.VerifyGroupRequest(
        group_id=gid, verifier="math", reference=pb.Reference(answer=gold),
        rollouts=[pb.Rollout(index=0, completion=completion)],
        rollout_timeout=Duration(seconds=int(TIMEOUT_S), nanos=int((TIMEOUT_S % 1) * 1e9)),
    )


@pytest.fixture(scope="module")
def math_server():
    with ServiceProcess(["math"], env={"COHORT_MATH_WORKERS": "2"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def stub(math_server):
    opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(math_server.endpoint, options=opts) as ch:
        yield pb_grpc.VerifierServiceStub(ch)


def _assert_scores_correctly(stub, within_s: float = 0.0) -> None:
    """An ordinary group is scored right. With ``within_s``, a group the workers were not ready for yet
    (VERIFIER_TIMEOUT: still starting, or replacing the ones killed at a deadline, slower on a loaded
    machine) is asked again until then; a wrong reward or any other status fails at once."""
    req = pb.VerifyGroupRequest(
        group_id="good", verifier="math", reference=pb.Reference(answer="(x+1)^2"),
        rollouts=[pb.Rollout(index=0, completion="\\boxed{x^2+2x+1}"), pb.Rollout(index=1, completion="\\boxed{x^2+1}"),
                  pb.Rollout(index=2, completion="The answer is $\\frac{a}{b}$")],
        rollout_timeout=Duration(seconds=10),
    )
    deadline = time.monotonic() + within_s
    resp = stub.VerifyGroup(req, timeout=30)
    while (time.monotonic() < deadline and any(r.status == pb.ROLLOUT_STATUS_VERIFIER_TIMEOUT for r in resp.results)
           and all(r.status in (pb.ROLLOUT_STATUS_OK, pb.ROLLOUT_STATUS_VERIFIER_TIMEOUT) for r in resp.results)):
        time.sleep(0.5)
        resp = stub.VerifyGroup(req, timeout=30)
    assert [r.status for r in resp.results] == [pb.ROLLOUT_STATUS_OK] * 3, resp
    assert [r.reward for r in resp.results] == [1.0, 0.0, 0.0]


def test_there_are_at_least_40_pathological_inputs():
    assert len(CASES) + len(GOLD_CASES) >= 40


def test_pathological_inputs_answered_within_deadline(stub, math_server, slowdown, deadline):
    _assert_scores_correctly(stub, within_s=deadline(60))  # warm: workers started
    slow = []
    for k, (gold, completion) in enumerate(CASES):
        before = slowdown(0.05)  # measured on either side of the call: a neighbour's load comes and goes
        t0 = time.monotonic()
        resp = stub.VerifyGroup(_request(gold, completion, f"p{k}"), timeout=30)
        elapsed = time.monotonic() - t0
        (result,) = resp.results
        slack = scaled_slack(max(before, slowdown(0.05)))
        if elapsed > ANSWER_BY_S + slack:
            slow.append((k, round(elapsed, 3), f"slack {slack:.3f}", completion[-80:]))
        expected_correct = completion.endswith("so the answer is $\\boxed{5}$.") or completion.endswith("\\boxed{5}")
        if expected_correct:
            assert result.status == pb.ROLLOUT_STATUS_OK and result.reward == 1.0, (k, result)
        else:
            assert result.reward == 0.0, (k, completion[-80:], result)
            assert result.status in (pb.ROLLOUT_STATUS_OK, pb.ROLLOUT_STATUS_VERIFIER_TIMEOUT, pb.ROLLOUT_STATUS_VERIFIER_ERROR), (k, result)
            assert result.verdict != pb.VERDICT_CORRECT
    assert not slow, f"answered later than {ANSWER_BY_S} s + {SLACK_S} s x the machine's slowdown: {slow}"
    assert health_status(math_server.endpoint) == "SERVING"
    _assert_scores_correctly(stub, within_s=deadline(30))  # once the killed workers are replaced


def test_pathological_gold_is_invalid_reference(stub, math_server, slowdown):
    for k, (gold, completion) in enumerate(GOLD_CASES):
        before = slowdown(0.05)
        t0 = time.monotonic()
        resp = stub.VerifyGroup(_request(gold, completion, f"g{k}"), timeout=30)
        elapsed = time.monotonic() - t0
        slack = scaled_slack(max(before, slowdown(0.05)))
        assert elapsed <= TIMEOUT_S + slack, (k, elapsed, slack)
        (result,) = resp.results
        assert result.status in (pb.ROLLOUT_STATUS_INVALID_REFERENCE, pb.ROLLOUT_STATUS_VERIFIER_TIMEOUT), (gold, result)
    assert health_status(math_server.endpoint) == "SERVING"
    _assert_scores_correctly(stub)


MIXED = [  # (gold, completion): SymPy-path and cheap-path checks, right and wrong. '{k}' makes each call's
    # answer distinct (so the server's verdict cache cannot answer it) without changing its value.
    ("(x+1)^2", "\\boxed{x^2+2x+1+{k}-{k}}"), ("(x+1)^2", "\\boxed{x^2+2x+{k}-{k}}"), ("\\frac{1}{3}", "Answer: 0.333"),
    ("\\sqrt{12}", "\\boxed{2\\sqrt3+{k}-{k}}"), ("[1,2)", "\\boxed{[1,2]}"), ("5\\text{ cm}", "\\boxed{5\\text{ m}}"),
    ("y = 2x+1", "\\boxed{y-2x={k}+1-{k}}"), ("\\tan^2 x + 1", "\\boxed{\\sec^2 x+{k}-{k}}"),
]


def test_concurrent_grpc_requests_match_serial(stub):
    from concurrent.futures import ThreadPoolExecutor

    def call(k: int):
        gold, completion = MIXED[k % len(MIXED)]
        completion = completion.replace("{k}", str(k))
        req = pb.VerifyGroupRequest(group_id=f"c{k}", verifier="math", reference=pb.Reference(answer=gold),
                                    rollouts=[pb.Rollout(index=0, completion=completion)], rollout_timeout=Duration(seconds=20))
        (r,) = stub.VerifyGroup(req, timeout=60).results
        return r.status, r.verdict, r.reward

    serial = [call(k) for k in range(len(MIXED))]
    assert all(s[0] == pb.ROLLOUT_STATUS_OK for s in serial)
    assert [s[2] for s in serial] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    with ThreadPoolExecutor(max_workers=32) as ex:
        concurrent = list(ex.map(call, range(96)))
    assert concurrent == [serial[k % len(MIXED)] for k in range(96)]
