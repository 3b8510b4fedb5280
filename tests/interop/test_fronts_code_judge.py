"""Cohort's code and judge verifiers behind each front (NeMo-Gym, ORS, OpenEnv); math is in each front's own test.

- code: a row's unit tests travel in the row schema's `code_tests` form, the candidate runs in the real sandbox
  (`cohort serve sandbox` + `cohort serve code` on 127.0.0.1), and the other standard's client gets the
  verdict; bad tests are refused, never scored;
- judge: `cohort serve judge` with its OpenAI-compatible back-end pointed at a rule-following stand-in model
  (tests/verifiers/openai_standin.py), scoring answer rows; the stand-in killed, each front answers with its
  own failure form, never a 0.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openreward.environments")
pytest.importorskip("openenv")

from cohort.rpc.launch import ServiceProcess  # noqa: E402
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus  # noqa: E402
from cohort.verifiers.client import VerifierClient  # noqa: E402

_spec = importlib.util.spec_from_file_location("openai_standin", Path(__file__).parents[1] / "verifiers" / "openai_standin.py")
standin_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standin_mod)

TESTS = {"asserts": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


def verify_request(completion: str) -> dict:
    """NeMo-Gym's BaseVerifyRequest shape: the prompt as Responses input, the completion as a Response."""
    return {"responses_create_params": {"input": [{"role": "user", "content": "Write add(a, b)."}]},
            "response": {"id": "resp_1", "object": "response", "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": completion}]}]}}


def through_our_ors_adapter(url: str, *completions: str) -> tuple:
    """Task 0 of the ORS front at ``url`` scored for ``completions`` by Cohort's own `ors` adapter (its results)."""
    with ServiceProcess(["ors"], env={"COHORT_ORS_URL": url, "COHORT_ORS_ENV": "cohort"}) as adapter:
        async def go():
            async with VerifierClient({"ors": [adapter.endpoint]}, timeout_s=120, retries=0) as client:
                g = GroupRequest("ors", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer="?"),
                                 "g", "", None, {"split": "train", "index": "0"})
                return (await client.verify_groups([g]))[0].results
        return asyncio.run(go())


@pytest.fixture(scope="module")
def code_server():
    with ServiceProcess(["sandbox"]) as sandbox, \
            ServiceProcess(["code"], env={"COHORT_SANDBOX_ENDPOINT": sandbox.endpoint}) as code:
        yield code


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("code-rows") / "rows.jsonl"
    path.write_text(json.dumps({"id": "add", "prompt": "Write add(a, b).", "code_tests": TESTS}) + "\n")
    return path


def test_nemo_gym_front_scores_code_with_the_request_tests(code_server, tmp_path, cohort_front):
    with cohort_front("nemo_gym", code_server.endpoint, "code", tmp_path) as url:
        def post(completion: str, tests) -> httpx.Response:
            return httpx.post(f"{url}/verify", json={**verify_request(completion), "code_tests": tests}, timeout=60)
        right, wrong = post(RIGHT, TESTS).json(), post(WRONG, json.dumps(TESTS)).json()  # a mapping or its JSON
        bad = post(RIGHT, {"asserts": []})
    assert (right["reward"], right["mask_sample"], right["cohort_verdict"]) == (1.0, False, "CORRECT")
    assert (wrong["reward"], wrong["mask_sample"], wrong["cohort_verdict"]) == (0.0, False, "INCORRECT")
    assert bad.status_code == 422 and "code_tests" in bad.json()["detail"]


def test_ors_front_serves_code_rows_read_back_by_our_adapter(code_server, rows, tmp_path, cohort_front):
    with cohort_front("ors", code_server.endpoint, "code", tmp_path, "--rows", str(rows)) as url:
        got = through_our_ors_adapter(url, RIGHT, WRONG)
    assert [(r.status, r.reward) for r in got] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]


def test_openenv_front_scores_code_rows_and_tests_given_to_reset(code_server, rows, tmp_path, cohort_front):
    from openenv.core import GenericEnvClient

    with cohort_front("openenv", code_server.endpoint, "code", tmp_path, "--rows", str(rows)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        env.reset(index=0)
        assert (env.step({"message": RIGHT}).reward, env.reset(index=0) and env.step({"message": WRONG}).reward) == (1.0, 0.0)
        env.reset(prompt="Write add(a, b).", code_tests=TESTS)  # tests the trainer holds, not a row
        assert env.step({"message": RIGHT}).reward == 1.0
        with pytest.raises(RuntimeError, match="code_tests"):
            env.reset(prompt="Write add(a, b).", code_tests={"asserts": []})


@pytest.fixture(scope="module")
def judge_server():
    with standin_mod.StandIn() as model, ServiceProcess(["judge"], env={
            "COHORT_JUDGE_BACKEND": "openai", "COHORT_JUDGE_URL": model.url, "COHORT_JUDGE_MODEL": "standin"}) as judge:
        yield judge, model


def test_the_judge_behind_each_front(judge_server, tmp_path, cohort_front):
    from openenv.core import GenericEnvClient

    judge, model = judge_server
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q", "prompt": "What is 3 + 4?", "answer": "7"}) + "\n")
    right, wrong = "3 + 4 = 7, so the answer is 7.", "3 + 4 = 9, so the answer is 9."
    with cohort_front("nemo_gym", judge.endpoint, "judge", tmp_path) as url:
        def post(completion: str) -> dict:
            return httpx.post(f"{url}/verify", json={**verify_request(completion), "expected_answer": "7"}, timeout=60).json()
        assert [post(c)["reward"] for c in (right, wrong)] == [1.0, 0.0]
    with cohort_front("ors", judge.endpoint, "judge", tmp_path, "--rows", str(rows)) as url:
        got = through_our_ors_adapter(url, right, wrong)
        assert [(r.status, r.reward) for r in got] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]
    with cohort_front("openenv", judge.endpoint, "judge", tmp_path, "--rows", str(rows)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        env.reset(index=0)
        assert env.step({"message": right}).reward == 1.0
        model.mode = "garbage"  # the judge model answers with no verdict: the judge cannot judge, a mask
        env.reset(index=0)
        with pytest.raises(RuntimeError, match="cohort_status="):
            env.step({"message": "Seven, I think: 7."})  # a response not judged before (verdicts are cached)
