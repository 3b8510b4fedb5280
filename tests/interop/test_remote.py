"""Foreign reward servers behind Cohort: `nemo_gym` (NeMo-Gym `/verify`) and `ors` (Open Reward Standard).

`cohort serve nemo_gym ors` runs as a subprocess on loopback, and the learner's client scores groups through
it; behind it, each foreign server runs in a process of its own on loopback:

- ORS: the `openreward` SDK's own `Server` class (openreward==0.1.167) hosting `ors_env.py`'s environments;
- NeMo-Gym: `nemo_gym_standin.py`, written from NeMo-Gym's published `BaseVerifyRequest` / `BaseVerifyResponse`
  schema, validating the completion with the `openai` Responses types that NeMo-Gym's own models extend: it
  fails on demand with each of their failure kinds, which their real servers do not (NeMo-Gym itself, in a venv
  of its own: test_nemo_gym_real.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("httpx")
pytest.importorskip("openreward.environments")  # extra interop-test: the ORS server, and fastapi/openai for the stand-in

from cohort.rpc.launch import ServiceProcess, health_status  # noqa: E402
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict  # noqa: E402
from cohort.verifiers.client import VerifierClient  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def foreign(tmp_path_factory, foreign_server):
    tmp = tmp_path_factory.mktemp("foreign")
    nemo = foreign_server("nemo_gym_standin.py", tmp, "/docs")
    ors = foreign_server("ors_env.py", tmp, "/health")
    try:
        nemo.start(), ors.start()
        yield {"nemo": nemo, "ors": ors}
    finally:
        nemo.kill(), ors.kill()


def adapter_env(foreign, **extra) -> dict[str, str]:
    return {"COHORT_NEMO_GYM_URL": foreign["nemo"].url, "COHORT_ORS_URL": foreign["ors"].url,
            "COHORT_ORS_ENV": "arithmetic", **extra}


@pytest.fixture(scope="module")
def cohort_server(foreign):
    with ServiceProcess(["nemo_gym", "ors"], env=adapter_env(foreign)) as proc:
        yield proc


def score(endpoint: str, groups: list[GroupRequest], timeout_s: float = 60) -> list[tuple]:
    async def go():
        async with VerifierClient({"nemo_gym": [endpoint], "ors": [endpoint]}, timeout_s=timeout_s, retries=0) as client:
            await client.handshake()
            return await client.verify_groups(groups)
    return [g.results for g in asyncio.run(go())]


def nemo_group(expected: str, completions, gid="g", **options) -> GroupRequest:
    return GroupRequest("nemo_gym", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer=expected),
                        gid, "What is 2+2?", None, options)


def ors_group(completions, gid="o", **options) -> GroupRequest:
    return GroupRequest("ors", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer="4"), gid,
                        "What is 2+2?", None, {"split": "test", "index": "0", **options})


def test_nemo_gym_rewards_are_ok_and_their_failures_are_masked(cohort_server):
    groups = [nemo_group("4", ["4", " 4 ", "5", ""]),
              nemo_group("MASK:judge_failed", ["4"]),
              nemo_group("MASK:transport_timeout", ["4"]),
              nemo_group("MASK:judge_unparseable", ["4"]),
              nemo_group("DEGRADED", ["4"]),
              nemo_group("HTTP500", ["4"]),
              nemo_group("HTTP503", ["4"]),
              nemo_group("NOT_JSON", ["4"]),
              nemo_group("NO_REWARD", ["4"]),
              nemo_group("4", ["4"], fields='{"expected_answer": "5"}'),  # the row's task fields win
              nemo_group("4", ["4"], fields="[1]")]
    got = score(cohort_server.endpoint, groups)
    assert [(r.status, r.reward) for r in got[0]] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 1.0),
                                                      (RolloutStatus.OK, 0.0), (RolloutStatus.OK, 0.0)]
    assert got[0][0].verdict is Verdict.CORRECT and got[0][2].verdict is Verdict.INCORRECT
    want = [RolloutStatus.DEPENDENCY_UNAVAILABLE, RolloutStatus.VERIFIER_TIMEOUT, RolloutStatus.VERIFIER_ERROR]
    assert [g[0].status for g in got[1:4]] == want
    assert "judge_failed: standin" in got[1][0].detail
    degraded = got[4][0]  # mask_sample false: a valid measurement even with a failure named
    assert (degraded.status, degraded.reward) == (RolloutStatus.OK, 0.5) and "judge_unparseable" in degraded.detail
    assert got[5][0].status is RolloutStatus.DEPENDENCY_UNAVAILABLE and "HTTP 500" in got[5][0].detail
    assert got[6][0].status is RolloutStatus.DEPENDENCY_UNAVAILABLE and "HTTP 503" in got[6][0].detail
    assert got[7][0].status is RolloutStatus.VERIFIER_ERROR and "not JSON" in got[7][0].detail
    assert got[8][0].status is RolloutStatus.VERIFIER_ERROR and "not a finite number" in got[8][0].detail
    assert (got[9][0].status, got[9][0].reward) == (RolloutStatus.OK, 0.0)
    assert got[10][0].status is RolloutStatus.INVALID_REFERENCE


def test_nemo_gym_refusing_the_task_data_is_invalid_reference(cohort_server):
    """No expected_answer reaches their server (answer_field disabled): their 422 masks the row."""
    (results,) = score(cohort_server.endpoint, [nemo_group("4", ["4"], answer_field="")])
    assert results[0].status is RolloutStatus.INVALID_REFERENCE and "HTTP 422" in results[0].detail


def test_nemo_gym_timeout_is_verifier_timeout(foreign, slowdown):
    timeout_s = 1.0 * slowdown()  # the stand-in's SLOW answer takes 30 s
    with ServiceProcess(["nemo_gym", "ors"], env=adapter_env(foreign, COHORT_NEMO_GYM_TIMEOUT_S=f"{timeout_s:.2f}")) as proc:
        t0 = time.monotonic()
        (slow, fast) = score(proc.endpoint, [nemo_group("SLOW", ["4", "5"]), nemo_group("4", ["4"])])
        assert time.monotonic() - t0 < 20
    assert [r.status for r in slow] == [RolloutStatus.VERIFIER_TIMEOUT] * 2 and "no answer in time" in slow[0].detail
    assert (fast[0].status, fast[0].reward) == (RolloutStatus.OK, 1.0)


def test_ors_rewards_and_failures_through_the_openreward_server(cohort_server):
    groups = [ors_group(["4", "5", " 4"]),
              ors_group(["15"], task_spec='{"question": "3*5?", "answer": "15"}'),
              ors_group(["RAISE"]),
              ors_group(["NO_REWARD"]),
              ors_group(["4"], index="99"),
              ors_group(["4"], index="x")]
    got = score(cohort_server.endpoint, groups)
    assert [(r.status, r.reward) for r in got[0]] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0),
                                                      (RolloutStatus.OK, 1.0)]
    assert (got[1][0].status, got[1][0].reward) == (RolloutStatus.OK, 1.0)
    assert got[2][0].status is RolloutStatus.VERIFIER_ERROR and "environment raised" in got[2][0].detail
    assert got[3][0].status is RolloutStatus.VERIFIER_ERROR and "no reward" in got[3][0].detail
    assert got[4][0].status is RolloutStatus.INVALID_REFERENCE and "Invalid index" in got[4][0].detail
    assert got[5][0].status is RolloutStatus.INVALID_REFERENCE and "names no ORS task" in got[5][0].detail


def test_an_ors_environment_without_a_terminal_tool_is_a_request_error(cohort_server):
    from cohort.verifiers.client import VerifierRequestError

    with pytest.raises(VerifierRequestError, match="no @terminal tool"):
        score(cohort_server.endpoint, [ors_group(["4"], env="chat")])
    assert health_status(cohort_server.endpoint) == "SERVING"


@pytest.mark.parametrize("which", ["nemo", "ors"])
def test_a_foreign_server_killed_mid_run_masks_its_rollouts_and_the_run_continues(cohort_server, foreign, which):
    server = foreign[which]
    make = (lambda c, gid: nemo_group("SLOW", c, gid)) if which == "nemo" else (lambda c, gid: ors_group(c, gid))
    fine = (lambda gid: nemo_group("4", ["4", "5"], gid)) if which == "nemo" else (lambda gid: ors_group(["4", "5"], gid))
    assert [r.reward for r in score(cohort_server.endpoint, [fine("before")])[0]] == [1.0, 0.0]
    in_flight: dict = {}
    t = threading.Thread(target=lambda: in_flight.update(r=score(cohort_server.endpoint, [make(["4"] * 4, "during")])))
    t.start()
    time.sleep(0.5)
    server.kill()  # SIGKILL: connections drop, new ones are refused
    t.join(timeout=120)
    assert not t.is_alive()
    if which == "nemo":  # the SLOW calls were in flight when it died
        assert {r.status for r in in_flight["r"][0]} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    else:  # ORS answers fast: scored before the kill, or masked after it, never a fake 0
        assert all(r.status is RolloutStatus.DEPENDENCY_UNAVAILABLE or (r.status, r.reward) == (RolloutStatus.OK, 1.0)
                   for r in in_flight["r"][0])
    after = score(cohort_server.endpoint, [fine("down")])[0]
    assert {r.status for r in after} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    assert all("unreachable" in r.detail for r in after)
    assert health_status(cohort_server.endpoint) == "SERVING"
    server.start()  # back on the same port: the same Cohort server scores again
    assert [r.reward for r in score(cohort_server.endpoint, [fine("again")])[0]] == [1.0, 0.0]


def test_a_missing_url_is_a_clear_load_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_NEMO_GYM")}
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "serve", "nemo_gym", "--port", "0"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "COHORT_NEMO_GYM_URL=http://HOST:PORT" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("name", ["nemo_gym", "ors"])
def test_the_adapters_pass_the_conformance_kit_in_front_of_a_foreign_server(foreign, monkeypatch, name):
    """The kit over Cohort's wire, with the foreign server behind: known answers (their failures masked),
    determinism, order, status codes, concurrency, deadlines and the SIGTERM drain."""
    from cohort.conformance import RULES, load_cases, run_kit

    for key, value in adapter_env(foreign).items():
        monkeypatch.setenv(key, value)
    cases = load_cases(HERE / "cases" / f"{name}.jsonl", name)
    results = run_kit("127.0.0.1:0", name, cases, server_cmd=f"{sys.executable} -m cohort.cli serve {name} --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]
