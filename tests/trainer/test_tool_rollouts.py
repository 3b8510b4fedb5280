"""Multi-turn rollouts with tools on a real tiny model, the real transformers engine and real tool
servers on loopback: the transcript's tool tokens are context but never loss or KL, a sandbox that is
down masks its rollouts (never scored), and the run goes on once it is back.

The tiny model is taught the transcript below by a few hundred supervised steps (it is a real Llama;
nothing is scripted): asked ``Q:``, it writes a fenced ``python`` block, reads the tool's output and
answers ``A42``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer import tool_rollouts
from cohort.trainer.config import load_config
from cohort.trainer.engines.hf import TransformersEngine
from cohort.trainer.forward import token_logprobs
from cohort.trainer.loss import LossConfig, LossInputs, k3_kl, normaliser, policy_loss
from cohort.trainer.rollout import build_engine

_TAUGHT = importlib.util.spec_from_file_location("cohort_tests_taught", Path(__file__).parents[1] / "tools" / "taught.py")
taught_module = importlib.util.module_from_spec(_TAUGHT)
sys.modules[_TAUGHT.name] = taught_module
_TAUGHT.loader.exec_module(taught_module)
CALL, RESULT, ANSWER = taught_module.CALL, taught_module.RESULT, taught_module.ANSWER


@pytest.fixture(scope="module")
def taught():
    """A tiny Llama that has learned: Q: -> CALL, then (after the tool's RESULT) ANSWER, EOS."""
    return taught_module.taught_model()


@pytest.fixture(scope="module")
def sandbox_server():
    with ServiceProcess(["sandbox"]) as proc:
        yield proc


def engine_for(rollout, model, tok, seed=0):
    return tool_rollouts.wrap(build_engine(rollout, model, tok, seed), rollout, tok)


def cfg_for(endpoint: str, *extra: str):
    return load_config(None, [
        f'rollout.tools=[{{endpoints: ["{endpoint}"]}}]', "rollout.max_turns=3", "rollout.tool_format=fenced",
        "rollout.max_completion_length=80", "rollout.temperature=0.05", "rollout.tool_timeout_s=3", *extra])


def test_the_model_calls_the_tool_reads_the_result_and_answers(taught, sandbox_server):
    model, tok = taught
    cfg = cfg_for(sandbox_server.endpoint)
    engine = engine_for(cfg.rollout, model, tok, seed=0)
    assert isinstance(engine, tool_rollouts.ToolRollouts)
    batch = engine.generate([tok("Q:")["input_ids"]], 2)
    assert batch.texts == [CALL + ANSWER] * 2  # what the verifiers score: the model's turns, not the tool's output
    n_call, n_result = len(tok(CALL)["input_ids"]), len(tok(RESULT)["input_ids"])
    for row in range(2):
        length = int(batch.completion_mask[row].sum())
        assert tok.decode(batch.completion_ids[row, :length]) == CALL + RESULT + ANSWER + "<eos>"
        expected = torch.zeros(batch.completion_ids.shape[1], dtype=torch.bool)
        expected[n_call : n_call + n_result] = True  # exactly the result's tokens are the tool's
        assert torch.equal(batch.tools.tool_mask[row], expected)
        assert torch.equal(batch.loss_mask[row], batch.completion_mask[row].bool() & ~expected)
    assert batch.tools.calls.tolist() == [1, 1] and batch.tools.turns.tolist() == [2, 2]
    assert not batch.truncated.any() and not batch.tools.failed.any()
    stats = tool_rollouts.metrics(batch)
    assert stats["tools/calls_per_rollout"] == 1.0 and stats["tools/error_frac"] == 0.0


def test_the_turn_limit_stops_calls(taught, sandbox_server):
    """With one turn allowed, the call the model writes is never run: the turn stays as generated (the model
    goes on past its call), the row is marked turn-limited, and no tool token is in the transcript."""
    model, tok = taught
    rollout = cfg_for(sandbox_server.endpoint).rollout
    client = engine_for(rollout, model, tok).client  # a handshaken client of the same server
    limited = tool_rollouts.ToolRollouts(TransformersEngine(rollout, model, tok, 0), client, tok,
                                         rollout.model_copy(update={"max_turns": 1}))
    batch = limited.generate([tok("Q:")["input_ids"]], 1)
    assert batch.tools.turn_limited.tolist() == [True] and batch.tools.calls.tolist() == [0]
    assert not batch.tools.tool_mask.any() and batch.texts[0].startswith(CALL) and batch.texts[0] != CALL


def test_tool_tokens_get_zero_gradient_and_zero_kl(taught, sandbox_server):
    """The update's loss on a real multi-turn batch (forward, loss, backward on the tiny model): the per-token gradient of the loss (with a KL term against a
    reference that differs) is exactly 0 on every tool-result token and non-zero on the generated tokens
    before and after them; the KL the loss sums covers the generated tokens only."""
    model, tok = taught
    cfg = cfg_for(sandbox_server.endpoint, "grpo.beta=0.1")
    batch = engine_for(cfg.rollout, model, tok, seed=0).generate([tok("Q:")["input_ids"]], 2)
    t = batch.completion_ids.shape[1]
    logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, t)  # (B, T), with grad
    logprobs.retain_grad()
    ref = logprobs.detach() + torch.linspace(-0.5, 0.5, t)  # a reference that disagrees on every token
    adv = torch.tensor([[1.0], [-1.0]]).expand(2, t)
    mask = batch.loss_mask
    norm = normaliser(mask, "dapo", cfg.rollout.max_completion_length)
    out = policy_loss(LossInputs(logprobs, logprobs.detach(), adv, mask, ref, None),
                      LossConfig(0.2, 0.2, 0.1), norm)
    out.loss.backward()
    tool = batch.tools.tool_mask
    assert tool.any() and bool((logprobs.grad[tool] == 0).all())
    assert bool((logprobs.grad[mask] != 0).all())
    expected_kl = (k3_kl(logprobs.detach(), ref) * mask).sum()
    assert float(out.kl_sum) == pytest.approx(float(expected_kl), rel=1e-5)
    with_tools = (k3_kl(logprobs.detach(), ref) * batch.completion_mask).sum()
    assert float(out.kl_sum) < float(with_tools)  # the tool tokens would have added KL


def test_a_sandbox_down_mid_rollout_masks_the_rollout_and_the_run_goes_on(taught):
    from cohort.trainer.scoring import Scores
    from cohort.verifiers.base import RolloutStatus
    from cohort.verifiers.combine import ScoredRollout

    model, tok = taught
    with ServiceProcess(["sandbox"]) as server:
        engine = engine_for(cfg_for(server.endpoint).rollout, model, tok, seed=0)
        server.kill()  # after the handshake: the first turn is generated, its call finds no sandbox
        batch = engine.generate([tok("Q:")["input_ids"]], 2)
        assert batch.tools.failed.tolist() == [True, True]
        judged = [[ScoredRollout(i, 1.0, RolloutStatus.OK, {"arith": 1.0}) for i in range(2)]]
        masked = Scores.of(judged, 0.0, batch.tools.failed.view(1, 2))  # whatever the verifiers said of the text
        assert masked.valid.tolist() == [[False, False]] and masked.rewards.tolist() == [[0.0, 0.0]]
        assert masked.statuses == [["tool_unavailable"] * 2] and masked.masked_by == [["tools/tool_unavailable"] * 2]
        server.start()  # back (a new port): a fresh engine's rollouts call it again
        engine = engine_for(cfg_for(server.endpoint).rollout, model, tok, seed=0)
        assert engine.generate([tok("Q:")["input_ids"]], 1).tools.failed.tolist() == [False]


@pytest.mark.parametrize("staleness", [0, 1], ids=["lock-step", "pipeline"])
def test_training_with_tools_in_the_loop(taught, sandbox_server, tmp_path, staleness):
    """`train()` with a tool, in the lock-step loop and in the asynchronous pipeline (the worker process
    builds its own engine and tool client): every rollout calls the tool once, is scored on its answer, and
    the steps run."""
    import json

    from cohort.trainer.train import train

    model, tok = taught
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "Q:", "answer": "42"}) + "\n" for i in range(4)))
    with ServiceProcess(["arith"]) as arith:
        cfg = load_config(None, [
            "model.tiny=null", f"model.path={tmp_path / 'model'}", "data.arithmetic=null", f"data.path={rows}",
            f'scoring.verifiers=[{{name: arith, weight: 1.0, endpoints: ["{arith.endpoint}"], '
            'options: {format_weight: "0", pick: last}}]',
            f'rollout.tools=[{{endpoints: ["{sandbox_server.endpoint}"]}}]', "rollout.max_turns=2",
            "rollout.tool_format=fenced", "rollout.max_completion_length=80", "rollout.temperature=0.05",
            f"rollout.max_staleness={staleness}", "grpo.prompts_per_step=2", "grpo.num_generations=2",
            "run.max_steps=2", "run.torch_threads=1", "run.progress=false", f"run.output_dir={tmp_path / 'run'}"])
        records = train(cfg, {"arith": [arith.endpoint]})
        if staleness == 0:  # `cohort eval` of the same setup reports the tool columns
            from cohort.trainer.evaluate import evaluate

            summary = evaluate(cfg, {"arith": [arith.endpoint]}, samples=2, k=1).summary()["all"]
            assert summary["tool_calls_per_rollout"] == 1.0 and summary["tool_error_rate"] == 0.0
            assert summary["pass@1"] == 1.0 and summary["statuses"] == {"ok": 8}
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["tools/calls_per_rollout"] == 1.0 and r["tools/failed_frac"] == 0.0
        assert r["reward/mean"] == 1.0 and r["verify/unusable_frac"] == 0.0  # "A42" after reading the tool's 42
