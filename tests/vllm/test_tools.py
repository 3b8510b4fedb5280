"""Multi-turn rollouts with tools on the vLLM engine (run in .venv-vllm: pytest -m vllm): the taught tiny
model calls the sandbox's `python` tool, reads its output and answers (vLLM generates each turn from the
whole transcript), with vLLM's log-probs on the generated tokens and none on the tool's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer import tool_rollouts
from cohort.trainer.config import load_config
from cohort.trainer.rollout import build_engine

pytestmark = pytest.mark.vllm

_TAUGHT = importlib.util.spec_from_file_location("cohort_tests_taught", Path(__file__).parents[1] / "tools" / "taught.py")
taught = importlib.util.module_from_spec(_TAUGHT)
sys.modules[_TAUGHT.name] = taught
_TAUGHT.loader.exec_module(taught)


def test_vllm_rollouts_call_the_tool_and_answer():
    model, tok = taught.taught_model()
    with ServiceProcess(["sandbox"]) as sandbox:
        cfg = load_config(None, [
            "rollout.engine=vllm", f'rollout.tools=[{{endpoints: ["{sandbox.endpoint}"]}}]', "rollout.max_turns=3",
            "rollout.tool_format=fenced", "rollout.max_completion_length=80", "rollout.temperature=0.05"])
        engine = tool_rollouts.wrap(build_engine(cfg.rollout, model, tok, seed=0), cfg.rollout, tok)
        try:
            batch = engine.generate([tok("Q:")["input_ids"]], 2)
        finally:
            engine.engine.close()
    assert batch.texts == [taught.CALL + taught.ANSWER] * 2
    assert batch.tools.calls.tolist() == [1, 1] and not batch.tools.failed.any()
    tool, gen = batch.tools.tool_mask, batch.loss_mask
    assert tool.any() and torch.equal(gen | tool, batch.completion_mask.bool())
    # vLLM's own log-probs on the generated tokens (about 0: the taught model is sure), none on the tool's
    assert batch.rollout_logprobs is not None and bool((batch.rollout_logprobs[tool] == 0).all())
    assert bool((batch.rollout_logprobs[gen] <= 0).all()) and bool(batch.rollout_logprobs[gen].isfinite().all())
