"""Cohort's verifiers behind the Open Reward Standard: `cohort serve front ors` (rows served by the
openreward SDK's own `Server`, scored by a real `cohort serve math`), called through Cohort's `ors` adapter."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("openreward.environments")

from cohort.rpc.launch import ServiceProcess  # noqa: E402
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus  # noqa: E402
from cohort.verifiers.client import VerifierClient  # noqa: E402


@pytest.fixture(scope="module")
def ors_front(math_server, tmp_path_factory, cohort_front):
    tmp = tmp_path_factory.mktemp("ors-front")
    rows = tmp / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q1", "prompt": "What is 2+2?", "answer": "4"}) + "\n"
                    + json.dumps({"id": "q2", "prompt": "A broken row", "answer": ""}) + "\n")
    with cohort_front("ors", math_server.endpoint, "math", tmp, "--rows", str(rows)) as url:
        yield url


@pytest.fixture(scope="module")
def ors_adapter(ors_front):
    with ServiceProcess(["ors"], env={"COHORT_ORS_URL": ors_front, "COHORT_ORS_ENV": "cohort"}) as proc:
        yield proc


def score(endpoint, groups):
    async def go():
        async with VerifierClient({"ors": [endpoint]}, timeout_s=60, retries=0) as client:
            return await client.verify_groups(groups)
    return [g.results for g in asyncio.run(go())]


def group(index: int, completions, gid="g") -> GroupRequest:
    return GroupRequest("ors", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer="?"), gid, "",
                        None, {"split": "train", "index": str(index)})


def test_our_verdicts_through_their_server_and_back(ors_adapter):
    scored, broken = score(ors_adapter.endpoint, [group(0, ["\\boxed{4}", "The answer is 5."]), group(1, ["4"])])
    assert [(r.status, r.reward) for r in scored] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]
    # math masks the row's empty answer: ORS has no field for it, so the tool call fails naming the status
    assert broken[0].status is RolloutStatus.INVALID_REFERENCE and "cohort_status=INVALID_REFERENCE" in broken[0].detail


def test_the_cohort_verifier_going_down_is_an_error_there_and_a_mask_here(ors_adapter, math_server):
    math_server.kill()
    math_server.requested_port = math_server.port
    try:
        (down,) = score(ors_adapter.endpoint, [group(0, ["\\boxed{4}"])])
    finally:
        math_server.start()
    assert down[0].status is RolloutStatus.DEPENDENCY_UNAVAILABLE and "cohort_status=" in down[0].detail
    (again,) = score(ors_adapter.endpoint, [group(0, ["\\boxed{4}"])])
    assert (again[0].status, again[0].reward) == (RolloutStatus.OK, 1.0)
