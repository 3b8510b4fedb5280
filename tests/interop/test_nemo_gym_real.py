"""NeMo-Gym itself (PyPI `nemo-gym` 0.7.0, its own classes) on both sides of Cohort, on 127.0.0.1.

- theirs behind ours: their `equivalence_rule` resources server (`EquivalenceRuleResourcesServer`, their FastAPI
  app: `nemo_gym_real/server.py`) behind `cohort serve nemo_gym`; killed mid-run, its rollouts are masked, never
  scored, and the Cohort server scores again once it is back;
- ours behind theirs: their `ServerClient.post(..., "/verify")`, the call their agents make, read with their
  `BaseVerifyResponse` (`nemo_gym_real/client.py`), against `cohort serve front nemo-gym` in front of `cohort serve
  math`; a Cohort verifier that is down answers with their `mask_sample` and `failure_kind`, never a plain 0.

nemo-gym 0.7.0 declares Python >= 3.13.14 and pulls Ray, MLflow and W&B, so it lives in a venv of its own
(`scripts/ci-nemo-gym` makes `.venv-nemo`, on this machine's Python with `--ignore-requires-python`: the modules
used here import and run on 3.11) and these tests call it as processes; without that venv they skip, saying why.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cohort.rpc.launch import ServiceProcess, health_status
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict
from cohort.verifiers.client import VerifierClient

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VERSION = "0.7.0"


def nemo_python() -> str:
    given = os.environ.get("COHORT_NEMO_PYTHON") or str(REPO / ".venv-nemo" / "bin" / "python")
    if not Path(given).exists():
        pytest.skip(f"no venv with NeMo-Gym ({given}): run scripts/ci-nemo-gym")
    probe = subprocess.run([given, "-c", "import importlib.metadata as m, resources_servers.equivalence_rule.app; "
                            "print(m.version('nemo-gym'))"], capture_output=True, text=True, cwd="/", timeout=300)
    if probe.returncode != 0 or probe.stdout.strip() != VERSION:
        pytest.skip(f"{given} has no nemo-gym {VERSION}: {(probe.stdout + probe.stderr)[-200:]}")
    return given


@pytest.fixture(scope="module")
def theirs(tmp_path_factory, foreign_server):
    server = foreign_server("nemo_gym_real/server.py", tmp_path_factory.mktemp("nemo"), "/", python=nemo_python())
    try:
        yield server.start(timeout_s=300)
    finally:
        server.kill()


@pytest.fixture(scope="module")
def cohort_server(theirs):
    with ServiceProcess(["nemo_gym"], env={"COHORT_NEMO_GYM_URL": theirs.url, "COHORT_NEMO_GYM_TIMEOUT_S": "20"}) as proc:
        yield proc


def score(endpoint: str, groups: list[GroupRequest]) -> list[tuple]:
    async def go():
        async with VerifierClient({"nemo_gym": [endpoint]}, timeout_s=60, retries=0) as client:
            await client.handshake()
            return await client.verify_groups(groups)
    return [g.results for g in asyncio.run(go())]


def group(expected: str, completions, gid: str = "g") -> GroupRequest:
    return GroupRequest("nemo_gym", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer=expected),
                        gid, "What is 2+2?", None, {})


def test_their_equivalence_server_scores_through_cohort(cohort_server):
    (got,) = score(cohort_server.endpoint, [group("4", ["4", " 4\n", "5", ""])])
    assert [(r.status, r.reward) for r in got] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 1.0),
                                                   (RolloutStatus.OK, 0.0), (RolloutStatus.OK, 0.0)]
    assert got[0].verdict is Verdict.CORRECT and got[2].verdict is Verdict.INCORRECT


def test_their_server_killed_mid_run_masks_its_rollouts_and_the_run_continues(cohort_server, theirs):
    assert [r.reward for r in score(cohort_server.endpoint, [group("4", ["4", "5"], "before")])[0]] == [1.0, 0.0]
    steps: list[tuple] = []  # a run: one batch of groups after another, every answer right (a 0 would be a fake)

    def run() -> None:
        for i in range(30):
            steps.append(score(cohort_server.endpoint, [group("4", ["4"] * 8, f"step-{i}-{j}") for j in range(4)]))

    t = threading.Thread(target=run)
    t.start()
    while len(steps) < 2 and t.is_alive():
        time.sleep(0.01)
    theirs.kill()  # SIGKILL mid-run
    t.join(timeout=300)
    assert not t.is_alive() and len(steps) == 30  # the run went on to its end
    rollouts = [r for batch in steps for g in batch for r in g]
    outcomes = {(r.status, r.reward if r.status is RolloutStatus.OK else None) for r in rollouts}
    assert outcomes == {(RolloutStatus.OK, 1.0), (RolloutStatus.DEPENDENCY_UNAVAILABLE, None)}, outcomes
    assert all(r.status is RolloutStatus.OK for g in steps[0] + steps[1] for r in g)
    after = score(cohort_server.endpoint, [group("4", ["4", "5"], "down")])[0]
    assert {r.status for r in after} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    assert health_status(cohort_server.endpoint) == "SERVING"
    theirs.start(timeout_s=300)  # back on its port: the same Cohort server scores again
    assert [r.reward for r in score(cohort_server.endpoint, [group("4", ["4", "5"], "again")])[0]] == [1.0, 0.0]


def their_client(url: str, cases: list[list[str]], cwd: Path) -> list[dict]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    out = subprocess.run([nemo_python(), str(HERE / "nemo_gym_real" / "client.py"), host, port, json.dumps(cases)],
                         capture_output=True, text=True, cwd=cwd, timeout=300)  # cwd: Hydra writes outputs/ there
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_their_client_calls_a_cohort_verifier_and_reads_a_mask(tmp_path, cohort_front):
    with ServiceProcess(["math"]) as math:
        with cohort_front("nemo_gym", math.endpoint, "math", tmp_path, timeout="5") as url:
            up = their_client(url, [["The answer is \\boxed{4}.", "4"], ["\\boxed{5}", "4"]], tmp_path)
            assert [(r["http"], r["reward"], r["mask_sample"]) for r in up] == [(200, 1.0, False), (200, 0.0, False)]
            math.stop()  # the Cohort verifier goes away: their client must see a mask, not a 0 to learn from
            (down,) = their_client(url, [["\\boxed{4}", "4"]], tmp_path)
    assert (down["http"], down["mask_sample"]) == (200, True) and down["failure_kind"], down


def test_the_kit_passes_the_adapter_in_front_of_their_server(theirs, monkeypatch):
    """`cohort conformance`'s rules over Cohort's wire with their real server behind: known answers, determinism,
    order, status codes, concurrency, deadlines and the SIGTERM drain."""
    from cohort.conformance import RULES, load_cases, run_kit

    monkeypatch.setenv("COHORT_NEMO_GYM_URL", theirs.url)
    cases = load_cases(HERE / "cases" / "nemo_gym_real.jsonl", "nemo_gym")
    results = run_kit("127.0.0.1:0", "nemo_gym", cases,
                      server_cmd=f"{sys.executable} -m cohort.cli serve nemo_gym --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]
