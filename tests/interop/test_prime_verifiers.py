"""prime's `verifiers` (PyPI `verifiers` 0.4.0) behind Cohort: `cohort serve prime_verifiers`, scoring with their
own `Task.score` over their `@vf.reward` methods (`prime_envs/cohort_prime_arith.py`, a taskset written with
their real classes), called over gRPC on 127.0.0.1 from this venv.

PyPI's `verifiers` needs `openai<3` and this venv has openai 3, so the server runs in a venv of its own with
both packages side by side (`scripts/ci-prime` makes `.venv-prime` and runs this module with
COHORT_PRIME_PYTHON pointing at it); without one these tests skip, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cohort.rpc.launch import ServiceProcess, health_status
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict
from cohort.verifiers.client import VerifierClient

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def prime_python() -> str:
    given = os.environ.get("COHORT_PRIME_PYTHON") or str(REPO / ".venv-prime" / "bin" / "python")
    if not Path(given).exists():
        pytest.skip(f"no venv with prime's verifiers ({given}): run scripts/ci-prime")
    probe = subprocess.run([given, "-c", "import verifiers, cohort.verifiers.interop.prime; print(verifiers.__version__)"],
                           capture_output=True, text=True, cwd="/", env={**os.environ, "PYTHONSAFEPATH": "1"}, timeout=120)
    if probe.returncode != 0 or probe.stdout.strip() != "0.4.0":
        pytest.skip(f"{given} has no verifiers 0.4.0 beside cohort: {(probe.stdout + probe.stderr)[-200:]}")
    return given


@contextlib.contextmanager
def serving_prime(tmp: Path, taskset: str, **env: str):
    """``cohort serve prime_verifiers`` for ``taskset`` (a module of prime_envs/), run by the prime venv's Python;
    its endpoint."""
    python = prime_python()
    port_file = tmp / "port"
    path = os.pathsep.join(p for p in (str(HERE / "prime_envs"), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": path, "COHORT_PRIME_TASKSET": taskset, **env}
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen([python, "-m", "cohort.cli", "serve", "prime_verifiers", "--port", "0", "--port-file",
                             str(port_file)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.read_text()):
            assert proc.poll() is None, (tmp / "server.log").read_text()
            assert time.monotonic() < deadline, "cohort serve prime_verifiers did not start"
            time.sleep(0.1)
        endpoint = f"127.0.0.1:{port_file.read_text()}"
        while health_status(endpoint) != "SERVING":
            assert time.monotonic() < deadline, "not SERVING"
            time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def prime_server(tmp_path_factory):
    with serving_prime(tmp_path_factory.mktemp("prime"), "cohort_prime_arith", COHORT_PRIME_TIMEOUT_S="2") as endpoint:
        yield endpoint


def score(endpoint: str, groups: list[GroupRequest]) -> list[tuple]:
    async def go():
        async with VerifierClient({"prime_verifiers": [endpoint]}, timeout_s=60, retries=0) as client:
            await client.handshake()
            return await client.verify_groups(groups)
    return [g.results for g in asyncio.run(go())]


def group(completions, **options) -> GroupRequest:
    return GroupRequest("prime_verifiers", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(), "g",
                        "", None, options)


def test_their_rewards_are_the_reward_and_their_failures_are_masked(prime_server):
    scored, other, own, failing, no_task, refused = score(prime_server, [
        group(["4", "5", "4 is the answer, surely"], idx="0"),
        group(["15"], idx="1"),
        group(["2"], task_data='{"prompt": "What is 1+1?", "answer": "2"}'),  # the row carries the task's data
        group(["RAISE", "PROVIDER", "SLOW", "NAN"], idx="0"),
        group(["4"], idx="7"),
        group(["4"], task_data='{"answer": [1]}'),
    ])
    # their weighted sum: correct (weight 1) + short (weight 0.5), each named in the components
    assert [(r.status, r.reward) for r in scored] == [(RolloutStatus.OK, 1.5), (RolloutStatus.OK, 0.5), (RolloutStatus.OK, 0.0)]
    assert dict(scored[0].components) == {"correct": 1.0, "short": 1.0} and scored[0].verdict is Verdict.CORRECT
    assert dict(scored[1].components) == {"correct": 0.0, "short": 1.0}
    assert (other[0].reward, own[0].reward) == (1.5, 1.5)
    raised, provider, slow, nan = failing
    assert raised.status is RolloutStatus.VERIFIER_ERROR and "TaskError" in raised.detail
    assert provider.status is RolloutStatus.DEPENDENCY_UNAVAILABLE and "ProviderError" in provider.detail
    assert slow.status is RolloutStatus.VERIFIER_TIMEOUT
    assert nan.status is RolloutStatus.VERIFIER_ERROR and "no usable reward" in nan.detail
    assert no_task[0].status is RolloutStatus.INVALID_REFERENCE and "idx (0..1)" in no_task[0].detail
    assert refused[0].status is RolloutStatus.INVALID_REFERENCE and "task_data" in refused[0].detail


def test_a_taskset_that_needs_a_sandbox_is_refused_at_startup(tmp_path):
    python = prime_python()
    (tmp_path / "needs_box.py").write_text(
        "import verifiers.v1 as vf\n"
        "class T(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):\n"
        "    @vf.reward\n"
        "    async def tests_pass(self, trace, runtime) -> float:\n"
        "        return 1.0\n"
        "class S(vf.Taskset[T, vf.TasksetConfig]):\n"
        "    def load(self):\n"
        "        yield T(vf.TaskData(prompt='x'), self.config.task)\n"
        "__all__ = ['S']\n")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "COHORT_PRIME_TASKSET": "needs_box",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)}
    out = subprocess.run([python, "-m", "cohort.cli", "serve", "prime_verifiers", "--port", "0"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "scores in a runtime (a sandbox: tests_pass)" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_a_cohort_verifier_is_their_tasks_reward_declared_or_plugged_and_its_outage_is_their_provider_error(tmp_path):
    """Ours behind theirs: Cohort's math verifier as a prime task's reward (``CohortReward``), declared on the task
    class (``correct``) and plugged by the taskset's config (``again``, weight 0.5), scored by their own
    ``Task.score`` (in the prime_verifiers adapter, so the test reads their trace back through Cohort's contract).
    With the math server stopped, their reward raises their ``ProviderError``: an error on the trace, not a 0."""
    with ServiceProcess(["math"]) as math_server:
        plug = json.dumps({"task": {"rewards": {"again": {"fn": "cohort_prime_math:again", "weight": 0.5}}}})
        with serving_prime(tmp_path, "cohort_prime_math", COHORT_VERIFIER_ENDPOINTS=f"math={math_server.endpoint}",
                           COHORT_PRIME_TASKSET_CONFIG=plug) as endpoint:
            scored, empty_gold, no_answer = score(endpoint, [
                group(["The sum is \\boxed{4}", "\\boxed{5}"], idx="0"),
                group(["\\boxed{4}"], task_data='{"prompt": "What is 2+2?", "answer": " "}'),  # INVALID_REFERENCE
                group(["\\boxed{4}"], task_data='{"prompt": "What is 2+2?"}'),  # no answer: the request is refused
            ])
            assert [(r.status, r.reward) for r in scored] == [(RolloutStatus.OK, 1.5), (RolloutStatus.OK, 0.0)]
            assert dict(scored[0].components) == {"correct": 1.0, "again": 1.0}
            assert dict(scored[1].components) == {"correct": 0.0, "again": 0.0}
            # INVALID_REFERENCE raised as a plain error, as is a refused request: their boundary records a TaskError
            # (which our adapter reads back as VERIFIER_ERROR)
            assert empty_gold[0].status is RolloutStatus.VERIFIER_ERROR, empty_gold[0]
            assert "TaskError" in empty_gold[0].detail and "INVALID_REFERENCE: gold answer is empty" in empty_gold[0].detail
            assert no_answer[0].status is RolloutStatus.VERIFIER_ERROR, no_answer[0]
            assert "TaskError" in no_answer[0].detail and "needs reference.answer" in no_answer[0].detail
            math_server.stop()
            (down,) = score(endpoint, [group(["\\boxed{4}"], idx="0")])
    assert down[0].status is RolloutStatus.DEPENDENCY_UNAVAILABLE, down[0]
    assert "ProviderError" in down[0].detail and "Cohort verifier math: DEPENDENCY_UNAVAILABLE" in down[0].detail


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
