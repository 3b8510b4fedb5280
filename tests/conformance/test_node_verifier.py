"""The Node.js example verifier (examples/node-verifier): passes the kit, and the trainer's client
scores a real batch with it combined with the Python ``format`` verifier, with no change to either."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from cohort.conformance import RULES, load_cases, run_kit
from cohort.conformance.runner import ServerProcess, free_port
from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.base import Reference, Rollout, RolloutStatus
from cohort.verifiers.client import VerifierClient, WeightedVerifier
from cohort.verifiers.records import Record, Task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "node-verifier"


@pytest.fixture(scope="module")
def node_cmd() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (apt-get install nodejs); the Node.js example verifier needs it")
    if not (EXAMPLE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail(f"run `npm ci` in {EXAMPLE} first (.ci/run does)")
    return f"{node} {EXAMPLE / 'server.js'} --port {{port}}"


def test_node_verifier_passes_the_kit(node_cmd):
    results = run_kit("127.0.0.1:0", "exact", load_cases(EXAMPLE / "cases.jsonl", "exact"), server_cmd=node_cmd)
    assert {r.rule: r.status for r in results} == {name: "pass" for name in RULES}, [r for r in results if r.status != "pass"]


def test_node_verifier_scores_a_batch_alongside_format(node_cmd):
    port = free_port()
    node = ServerProcess(node_cmd, f"127.0.0.1:{port}")
    try:
        node.start(30)
        with ServiceProcess(["format"]) as fmt:
            scored, versions = asyncio.run(_score(node.endpoint, fmt.endpoint))
    finally:
        node.close()
    assert versions == {"exact": "1.0.0", "format": "1.0.0"}
    # (exact reward, format reward) per rollout, worked out by hand.
    expected = [
        [(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)],  # gold "4"
        [(1.0, 1.0), (0.0, 1.0)],  # gold "Paris"
    ]
    for group, want in zip(scored, expected):
        assert len(group) == len(want)
        for rollout, (exact, fmt_reward) in zip(group, want):
            assert rollout.status is RolloutStatus.OK
            assert rollout.components["exact"] == exact and rollout.components["format"] == fmt_reward
            assert rollout.reward == pytest.approx(0.7 * exact + 0.3 * fmt_reward)
            assert "exact/match" in rollout.components and "format/think" in rollout.components
    # An unusable gold answer is masked (INVALID_REFERENCE), never a reward of 0.
    bad = scored[2]
    assert [r.status for r in bad] == [RolloutStatus.INVALID_REFERENCE] * 2
    assert not any(r.usable for r in bad)


async def _score(exact_endpoint: str, format_endpoint: str):
    verifiers = [
        WeightedVerifier("exact", 0.7, (exact_endpoint,)),
        WeightedVerifier("format", 0.3, (format_endpoint,)),
    ]
    requests = [
        Record(Task("g-four", "", Reference(answer="4")), (
            Rollout(0, "<think>2+2</think><answer>4</answer>"),
            Rollout(1, "<answer>4</answer>"),
            Rollout(2, "<think>2+2</think><answer>5</answer>"),
            Rollout(3, "five"),
        )),
        Record(Task("g-paris", "", Reference(answer="Paris")), (
            Rollout(5, "<think>capital</think><answer>paris</answer>"),
            Rollout(9, "<think>capital</think><answer>Lyon</answer>"),
        )),
        Record(Task("g-bad-gold", "", Reference(answer=" ")), (
            Rollout(0, "<think>x</think><answer>1</answer>"),
            Rollout(1, "<think>x</think><answer>2</answer>"),
        )),
    ]
    async with VerifierClient(verifiers, timeout_s=20.0) as client:
        versions = await client.handshake()
        return await client.score(requests), versions
