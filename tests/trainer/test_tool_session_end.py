"""The learner ends its rollouts' stateful `python` sessions when the rollouts end (issue 49): a real taught
tiny model, the transformers engine, `cohort serve sandbox` with ``COHORT_TOOL_SESSIONS=1``. While the
rollouts run, each holds one interpreter on the machine; once ``generate`` returns, none is left. Session
ids are unique per engine, so two engines (two rollout workers) never share an interpreter."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from cohort.rpc.launch import ServiceProcess
from cohort.tools.client import ToolClient
from cohort.trainer import tool_rollouts
from cohort.trainer.config import load_config
from cohort.trainer.engines.hf import TransformersEngine

TESTS = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


taught = _load("cohort_tests_taught_sessions", TESTS / "tools" / "taught.py")
sandbox_conftest = _load("cohort_tests_sandbox_conftest", TESTS / "sandbox" / "conftest.py")


def test_generate_ends_the_sessions_of_its_rollouts() -> None:
    model, tok = taught.taught_model()
    env = {"COHORT_SANDBOX_POOL_SIZE": "1", "COHORT_TOOL_SESSIONS": "1"}
    with ServiceProcess(["sandbox"], env=env) as sandbox:
        cfg = load_config(None, [
            f'rollout.tools=[{{endpoints: ["{sandbox.endpoint}"]}}]', "rollout.max_turns=2",
            "rollout.tool_format=fenced", "rollout.max_completion_length=60", "rollout.temperature=0.05",
            "rollout.tool_timeout_s=30"])
        client = ToolClient([[sandbox.endpoint]], timeout_s=30)
        assert client.handshake()["python"].stateful
        engines = [tool_rollouts.ToolRollouts(TransformersEngine(cfg.rollout, model, tok, 0), client, tok, cfg.rollout)
                   for _ in range(2)]
        live = []
        real_execute = client.execute

        def execute(calls):  # counts the interpreters alive right after the rollouts' calls
            out = real_execute(calls)
            live.append(len(sandbox_conftest.leftover_sandbox_processes()))
            return out

        client.execute = execute
        sessions = [[next(e._sessions) for _ in range(3)] for e in engines]
        try:
            batch = engines[0].generate([tok("Q:")["input_ids"]], 4)
            deadline = time.monotonic() + 10
            while sandbox_conftest.leftover_sandbox_processes() and time.monotonic() < deadline:
                time.sleep(0.05)
            left = sandbox_conftest.leftover_sandbox_processes()
        finally:
            for e in engines:
                e.engine.close()
            client.close()
    assert batch.tools.calls.tolist() == [1, 1, 1, 1] and not batch.tools.failed.any()
    assert batch.texts == [taught.CALL + taught.ANSWER] * 4  # the stateful tool answered every call
    assert live == [4]  # four rollouts, four interpreters while they ran
    assert left == []  # and none once they ended
    assert not set(sessions[0]) & set(sessions[1])  # two engines never share a session id
