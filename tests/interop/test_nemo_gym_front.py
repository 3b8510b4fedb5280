"""Cohort's verifiers behind NeMo-Gym: `cohort serve front nemo-gym` answers NeMo-Gym's `/verify`.

A real `cohort serve math` on loopback; the front in a subprocess; requests in NeMo-Gym's shape
(`BaseVerifyRequest`: `responses_create_params` + `response` built and validated with the `openai` Responses
types NeMo-Gym's models extend, + `expected_answer`), answers read as its `BaseVerifyResponse`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

httpx = pytest.importorskip("httpx")
responses = pytest.importorskip("openai.types.responses")



def verify_request(completion: str, expected: str | None, question: str = "What is 2+2?") -> dict:
    response = responses.Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 0, "model": "policy", "parallel_tool_calls": False,
        "tool_choice": "auto", "tools": [],
        "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": completion, "annotations": []}]}]})
    body = {"responses_create_params": {"input": [{"role": "user", "content": question}]},
            "response": response.model_dump(mode="json")}
    return body if expected is None else {**body, "expected_answer": expected}


@pytest.fixture(scope="module")
def front(math_server, tmp_path_factory, cohort_front):
    with cohort_front("nemo_gym", math_server.endpoint, "math", tmp_path_factory.mktemp("front"), health=False) as url:
        yield url


def post(front: str, body) -> httpx.Response:
    return httpx.post(f"{front}/verify", json=body, timeout=30)


def test_their_request_shape_gets_our_reward(front):
    right = post(front, verify_request("So it is \\boxed{4}.", "4"))
    wrong = post(front, verify_request("\\boxed{5}", "4"))
    assert right.status_code == wrong.status_code == 200
    r, w = right.json(), wrong.json()
    assert (r["reward"], r["mask_sample"], r["failure_kind"]) == (1.0, False, None)
    assert (w["reward"], w["mask_sample"]) == (0.0, False) and w["cohort_verdict"] == "INCORRECT"
    assert r["response"]["id"] == "resp_1" and r["expected_answer"] == "4"  # the request echoed, as theirs do
    assert r["cohort_status"] == "OK"


def test_an_unusable_reference_is_masked_with_a_failure_kind(front):
    got = post(front, verify_request("\\boxed{4}", "")).json()
    assert (got["reward"], got["mask_sample"], got["failure_kind"]) == (0.0, True, "cohort:invalid_reference")
    assert got["failure_reason"] and got["cohort_status"] == "INVALID_REFERENCE"


def test_a_body_that_is_not_a_verify_request_is_422(front):
    for body in ({"response": {}}, [1, 2], {"responses_create_params": {"input": "q"}, "response": {"output": 3}}):
        got = post(front, body)
        assert got.status_code == 422 and got.json()["detail"], body
    assert httpx.post(f"{front}/verify", content=b"{nope", timeout=10).status_code == 422
    assert post(front, verify_request("\\boxed{4}", "4")).json()["reward"] == 1.0  # still serving


def test_our_nemo_gym_adapter_reads_it_back(front, monkeypatch):
    """Both directions meet: Cohort's `nemo_gym` verifier, scoring through this front, gets Cohort's statuses back."""
    from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, VerifyContext
    from cohort.verifiers.interop.remote import NemoGymVerifier

    v = NemoGymVerifier(url=front)  # what `cohort serve` gives it from verifiers.nemo_gym.url
    try:
        ok = v.verify_group(GroupRequest("nemo_gym", (Rollout(0, "\\boxed{4}"), Rollout(1, "\\boxed{3}")),
                                         Reference(answer="4"), "g", "What is 2+2?"), VerifyContext())
        bad = v.verify_group(GroupRequest("nemo_gym", (Rollout(0, "\\boxed{4}"),), Reference(answer=""), "g", "q"),
                             VerifyContext())
    finally:
        v.close()
    assert [(r.status, r.reward) for r in ok] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]
    assert bad[0].status is RolloutStatus.VERIFIER_ERROR and "cohort:invalid_reference" in bad[0].detail


def test_the_cohort_verifier_going_down_masks_as_provider_unavailable(math_server, front):
    math_server.kill()
    math_server.requested_port = math_server.port  # restarted where the front expects it
    try:
        got = post(front, verify_request("\\boxed{4}", "4")).json()
    finally:
        math_server.start()
    assert (got["reward"], got["mask_sample"], got["failure_kind"]) == (0.0, True, "provider_unavailable")
    again = post(front, verify_request("\\boxed{4}", "4")).json()
    assert again["reward"] == 1.0 and again["mask_sample"] is False


def test_an_unreachable_verifier_at_start_is_one_line_exit_2():
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "serve", "front", "nemo-gym", "--verifier", "math", "--endpoint",
                          "127.0.0.1:1", "--port", "0", "--timeout", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr


def test_concurrent_calls_each_get_their_own_verdict(front):
    """NeMo-Gym calls /verify once per rollout, many at a time: 64 calls from 16 threads, each its own answer."""
    from concurrent.futures import ThreadPoolExecutor

    bodies = [verify_request(f"\\boxed{{{i % 7}}}", str(i % 5)) for i in range(64)]
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda b: client.post(f"{front}/verify", json=b).json(), bodies))
    assert [g["reward"] for g in got] == [float(i % 7 == i % 5) for i in range(64)]
    assert not any(g["mask_sample"] for g in got)

