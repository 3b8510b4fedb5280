"""OpenEnv both ways, against OpenEnv's own server (openenv==0.10.0, extra interop-test), on 127.0.0.1.

- theirs behind ours: `cohort serve openenv` in front of `openenv_env.py` (an `Environment` subclass served by
  their `create_app`): rewards are OK, their failures masked, never a 0; the server killed mid-run masks its
  rollouts and the run continues; the conformance kit passes through the adapter;
- ours behind theirs: `cohort serve front openenv` (a real `cohort serve math` behind their
  `create_app`), driven by OpenEnv's own `GenericEnvClient`, and read back through the `openenv` adapter.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("websockets")
pytest.importorskip("openenv.core.env_server")  # extra interop-test

from cohort.rpc.launch import ServiceProcess, health_status  # noqa: E402
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict  # noqa: E402
from cohort.verifiers.client import VerifierClient  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def openenv_server(tmp_path_factory, foreign_server):
    server = foreign_server("openenv_env.py", tmp_path_factory.mktemp("openenv"), "/health")
    try:
        yield server.start()
    finally:
        server.kill()


@pytest.fixture(scope="module")
def adapter(openenv_server):
    with ServiceProcess(["openenv"], env={"COHORT_OPENENV_URL": openenv_server.url}) as proc:
        yield proc


def score(endpoint: str, groups: list[GroupRequest], timeout_s: float = 60) -> list[tuple]:
    async def go():
        async with VerifierClient({"openenv": [endpoint]}, timeout_s=timeout_s, retries=0) as client:
            await client.handshake()
            return await client.verify_groups(groups)
    return [g.results for g in asyncio.run(go())]


def group(completions, gid="g", answer="4", **options) -> GroupRequest:
    options.setdefault("reset", '{"index": 0}')
    return GroupRequest("openenv", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer=answer),
                        gid, "What is 2+2?", None, options)


def test_openenv_rewards_are_ok_and_their_failures_are_masked(adapter):
    groups = [group(["4", "5", " 4 ", "BOOL"]),
              group(["15"], reset='{"seed": 1}'),
              group(["7"], answer="7", answer_field="answer", reset="{}"),  # the row's answer sent to reset
              group(["RAISE", "NO_REWARD", "NOT_DONE"]),
              group(["4"], reset='{"index": 99}'),
              group(["4"], reset="[1]"),
              group(["4"], action_field="text")]
    got = score(adapter.endpoint, groups)
    assert [(r.status, r.reward) for r in got[0]] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0),
                                                      (RolloutStatus.OK, 1.0), (RolloutStatus.OK, 1.0)]
    assert got[0][0].verdict is Verdict.CORRECT and got[0][1].verdict is Verdict.INCORRECT
    assert (got[1][0].status, got[1][0].reward) == (RolloutStatus.OK, 1.0)
    assert (got[2][0].status, got[2][0].reward) == (RolloutStatus.OK, 1.0)
    raised, no_reward, not_done = got[3]
    assert raised.status is RolloutStatus.VERIFIER_ERROR and "environment failure on purpose" in raised.detail
    assert no_reward.status is RolloutStatus.VERIFIER_ERROR and "no reward" in no_reward.detail
    assert not_done.status is RolloutStatus.VERIFIER_ERROR and "multi-turn" in not_done.detail
    assert got[4][0].status is RolloutStatus.VERIFIER_ERROR and "no task 99" in got[4][0].detail  # their reset raised
    assert got[5][0].status is RolloutStatus.INVALID_REFERENCE and "JSON object" in got[5][0].detail
    # an action field their schema does not have: their VALIDATION_ERROR on the step, a configuration fault, masked
    assert got[6][0].status is RolloutStatus.VERIFIER_ERROR and "VALIDATION_ERROR" in got[6][0].detail


def test_openenv_timeout_is_verifier_timeout(openenv_server, slowdown):
    timeout_s = 1.0 * slowdown()  # SLOW answers after 30 s
    with ServiceProcess(["openenv"], env={"COHORT_OPENENV_URL": openenv_server.url,
                                          "COHORT_OPENENV_TIMEOUT_S": f"{timeout_s:.2f}"}) as proc:
        t0 = time.monotonic()
        slow, fast = score(proc.endpoint, [group(["SLOW", "SLOW"]), group(["4"])])
        assert time.monotonic() - t0 < 20
    assert [r.status for r in slow] == [RolloutStatus.VERIFIER_TIMEOUT] * 2 and "in time" in slow[0].detail
    assert (fast[0].status, fast[0].reward) == (RolloutStatus.OK, 1.0)


def test_openenv_server_killed_mid_run_masks_its_rollouts_and_the_run_continues(adapter, openenv_server):
    assert [r.reward for r in score(adapter.endpoint, [group(["4", "5"], "before")])[0]] == [1.0, 0.0]
    in_flight: dict = {}
    t = threading.Thread(target=lambda: in_flight.update(r=score(adapter.endpoint, [group(["SLOW"] * 4, "during")])))
    t.start()
    time.sleep(1.0)
    openenv_server.kill()  # SIGKILL: the sessions drop, new ones are refused
    t.join(timeout=120)
    assert not t.is_alive()
    assert {r.status for r in in_flight["r"][0]} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    after = score(adapter.endpoint, [group(["4", "5"], "down")])[0]
    assert {r.status for r in after} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    assert all("unreachable" in r.detail for r in after)
    assert health_status(adapter.endpoint) == "SERVING"
    openenv_server.start()  # back on the same port: the same Cohort server scores again
    assert [r.reward for r in score(adapter.endpoint, [group(["4", "5"], "again")])[0]] == [1.0, 0.0]


def test_the_openenv_adapter_passes_the_conformance_kit(openenv_server, monkeypatch):
    from cohort.conformance import RULES, load_cases, run_kit

    monkeypatch.setenv("COHORT_OPENENV_URL", openenv_server.url)
    cases = load_cases(HERE / "cases" / "openenv.jsonl", "openenv")
    results = run_kit("127.0.0.1:0", "openenv", cases,
                      server_cmd=f"{sys.executable} -m cohort.cli serve openenv --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]


# ---- ours behind theirs -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def front(math_server, tmp_path_factory, cohort_front):
    tmp = tmp_path_factory.mktemp("openenv-front")
    rows = tmp / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q1", "prompt": "What is 2+2?", "answer": "4"}) + "\n"
                    + json.dumps({"id": "q2", "prompt": "A broken row", "answer": ""}) + "\n")
    with cohort_front("openenv", math_server.endpoint, "math", tmp, "--rows", str(rows)) as url:
        yield url


def test_a_cohort_verifier_behind_openenv_through_their_own_client(front):
    from openenv.core import GenericEnvClient

    with GenericEnvClient(base_url=front).sync() as env:
        first = env.reset(index=0)
        assert first.observation["prompt"] == "What is 2+2?" and not first.done
        scored = env.step({"message": "The answer is \\boxed{4}."})
        assert (scored.reward, scored.done) == (1.0, True)
        assert scored.observation["metadata"]["cohort_verdict"] == "CORRECT"
        env.reset(prompt="What is 6*7?", answer="42")  # a task the trainer holds, not a row
        assert env.step({"message": "\\boxed{41}"}).reward == 0.0
        env.reset(index=1)  # a row whose answer the math verifier cannot use: an error, never a 0
        with pytest.raises(RuntimeError, match="cohort_status=INVALID_REFERENCE"):
            env.step({"message": "\\boxed{4}"})


def test_the_openenv_adapter_reads_the_front_back(front, math_server):
    with ServiceProcess(["openenv"], env={"COHORT_OPENENV_URL": front}) as proc:
        right, broken = score(proc.endpoint, [group(["\\boxed{4}", "\\boxed{5}"]), group(["\\boxed{4}"], reset='{"index": 1}')])
        assert [(r.status, r.reward) for r in right] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]
        assert broken[0].status is RolloutStatus.INVALID_REFERENCE
        math_server.kill()
        math_server.requested_port = math_server.port
        try:
            (down,) = score(proc.endpoint, [group(["\\boxed{4}"])])
        finally:
            math_server.start()
        assert down[0].status is RolloutStatus.DEPENDENCY_UNAVAILABLE and "cohort_status=" in down[0].detail
        (again,) = score(proc.endpoint, [group(["\\boxed{4}"])])
        assert (again[0].status, again[0].reward) == (RolloutStatus.OK, 1.0)
