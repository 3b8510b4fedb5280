"""The loop against real verifier servers on loopback: a short run, exact resume, and masking of
rollouts a verifier could not judge (unreachable server, invalid reference)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer import checkpoint, metrics
from cohort.trainer.config import load_config
from cohort.trainer.learner import Learner, UpdateBatch
from cohort.trainer.models import build_policy
from cohort.trainer.rollout import build_engine, concat_batches
from cohort.trainer.scoring import Scorer, merge_scores
from cohort.trainer.train import loss_rows, round_metrics, train
from cohort.verifiers.records import Task


@pytest.fixture(scope="module")
def arith():
    with ServiceProcess(["arith"]) as proc:
        yield proc


def small_config(tmp_path, endpoint: str, *extra: str):
    overrides = [
        "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
        "data.arithmetic={num_prompts: 40, max_operand: 4}",
        f'scoring.verifiers=[{{name: arith, weight: 1.0, endpoints: ["{endpoint}"], '
        'options: {correct_weight: "0.8", format_weight: "0.2", require_eos: "1"}}]',
        "grpo.prompts_per_step=4", "grpo.num_generations=4", "rollout.max_completion_length=3",
        "run.torch_threads=1", "run.progress=false", f"run.output_dir={tmp_path}", *extra,
    ]
    return load_config(None, overrides)


def test_short_run_writes_metrics_tensorboard_curve_and_model(tmp_path, arith):
    cfg = small_config(tmp_path, arith.endpoint, "run.max_steps=3", "grpo.beta=0.04", "grpo.num_iterations=2")
    records = train(cfg, {"arith": [arith.endpoint]})
    assert [r["step"] for r in records] == [1, 2, 3]
    for key in ("reward/mean", "reward/arith", "reward/arith/correct", "verify/unusable_frac", "group/zero_std_frac",
                "rollout/len_mean", "rollout/truncated_frac", "throughput/tokens_per_s", "verify/idle_frac",
                "verify/latency_s"):
        assert key in records[0], key
    assert records[0]["verify/unusable_frac"] == 0.0
    assert any("policy/kl" in r for r in records)
    assert len(metrics.read(tmp_path / "metrics.jsonl")) == 3
    assert (tmp_path / "reward_curve.png").stat().st_size > 1000
    assert any((tmp_path / "tensorboard").iterdir())
    assert (tmp_path / "final" / "model.safetensors").exists()
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step_000003"  # complete, and the newest


def test_resume_is_exact(tmp_path, arith):
    eps = {"arith": [arith.endpoint]}
    straight = train(small_config(tmp_path / "a", arith.endpoint, "run.max_steps=4", "grpo.beta=0.04"), eps)
    first = train(small_config(tmp_path / "b", arith.endpoint, "run.max_steps=2", "grpo.beta=0.04"), eps)
    resumed = train(small_config(tmp_path / "b", arith.endpoint, "run.max_steps=4", "grpo.beta=0.04"), eps)
    assert [r["step"] for r in resumed] == [3, 4]
    a = [metrics.deterministic(r) for r in straight]
    b = [metrics.deterministic(r) for r in first + resumed]
    assert a == b  # bit-identical metrics (floats compared exactly)
    assert [metrics.deterministic(r) for r in metrics.read(tmp_path / "b" / "metrics.jsonl")] == a
    wa = checkpoint_weights(tmp_path / "a", arith.endpoint, "step_000004")
    wb = checkpoint_weights(tmp_path / "b", arith.endpoint, "step_000004")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_keep_checkpoints_deletes_all_but_the_newest_and_the_run_still_resumes(tmp_path, arith):
    eps = {"arith": [arith.endpoint]}
    keep = ("run.save_every=1", "run.keep_checkpoints=2")
    train(small_config(tmp_path, arith.endpoint, "run.max_steps=4", *keep), eps)
    assert sorted(d.name for d in (tmp_path / "checkpoints").iterdir()) == ["step_000003", "step_000004"]
    resumed = train(small_config(tmp_path, arith.endpoint, "run.max_steps=5", *keep), eps)
    assert [r["step"] for r in resumed] == [5]  # from step 4's checkpoint
    assert sorted(d.name for d in (tmp_path / "checkpoints").iterdir()) == ["step_000004", "step_000005"]


def test_a_torn_last_metrics_line_does_not_stop_the_resume(tmp_path, arith):
    """A run killed (or out of disk) while writing a record leaves a line without its end: resume drops it."""
    eps = {"arith": [arith.endpoint]}
    train(small_config(tmp_path, arith.endpoint, "run.max_steps=4", "run.save_every=2"), eps)
    # killed while writing step 4's record, so before step 4's checkpoint: the record is cut, no checkpoint
    shutil.rmtree(tmp_path / "checkpoints" / "step_000004")
    path = tmp_path / "metrics.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in lines[:3]) + lines[3][:40])
    assert [r["step"] for r in metrics.read(path)] == [1, 2, 3]
    resumed = train(small_config(tmp_path, arith.endpoint, "run.max_steps=4", "run.save_every=2"), eps)
    assert [r["step"] for r in resumed] == [3, 4]
    assert [r["step"] for r in metrics.read(path)] == [1, 2, 3, 4]
    path.write_text(lines[0] + "\n{not json\n" + lines[1] + "\n")  # damage that is not a torn last write
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 is not JSON"):
        metrics.read(path)


def checkpoint_weights(run, endpoint: str, step: str) -> dict[str, torch.Tensor]:
    """The policy weights saved in ``run``'s checkpoint ``step`` (loaded into a fresh tiny policy)."""
    cfg = small_config(run, endpoint)
    policy, _ = build_policy(cfg.model)
    init = {k: v.clone() for k, v in policy.state_dict().items()}
    checkpoint.load(run / "checkpoints" / step, policy, Learner(policy, cfg).optimizer)
    weights = policy.state_dict()
    assert any(not torch.equal(init[k], weights[k]) for k in init)  # the trained weights, not a fresh init
    return weights


def test_unreachable_verifier_masks_its_rollouts_and_the_update_ignores_them(tmp_path):
    """Chunk 1 is scored; then the server dies and chunk 2 comes back DEPENDENCY_UNAVAILABLE.
    The update equals the update on chunk 1 alone, and unusable_frac counts chunk 2."""
    cfg = small_config(tmp_path, "127.0.0.1:1", "grpo.beta=0.04", "scoring.on_outage=mask")
    policy, tok = build_policy(cfg.model)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # a policy that gives varied rewards
    engine = build_engine(cfg.rollout, policy, tok, seed=0)
    examples = [Task.with_answer(f"{a}+{b}=", str(a + b)) for a, b in [(1, 2), (3, 4), (2, 2), (0, 4)]]
    ids = [tok(e.prompt)["input_ids"] for e in examples]
    proc = ServiceProcess(["arith"]).start()
    try:
        scorer = Scorer(cfg.scoring, {"arith": [proc.endpoint]})
        part1 = engine.generate(ids[:2], 4)
        # rewards for chunk 1 from fixed texts (the rows' tokens are what the policy sampled)
        texts1 = ["3", "4", "3", "1", "7", "7", "0", "9"]
        scores1 = scorer.submit(examples[:2], texts1, [False] * 8).result()
        proc.kill()  # the verifier is gone
        part2 = engine.generate(ids[2:], 4)
        scores2 = scorer.submit(examples[2:], part2.texts, part2.truncated.tolist(), 2).result()
        scorer.close()
    finally:
        proc.stop()
    assert scores1.valid.all() and not scores2.valid.any()
    assert scores1.rewards.flatten().tolist() == pytest.approx([1.0, 0.2, 1.0, 0.2, 1.0, 1.0, 0.2, 0.2])
    batch, scores = concat_batches([part1, part2], tok.pad_token_id), merge_scores([scores1, scores2])
    adv, token_adv, rows, _ = loss_rows(batch, scores, cfg)
    assert rows.max() < 8  # no row of chunk 2 enters the loss
    assert round_metrics(batch, scores, adv, len(rows))["verify/unusable_frac"] == 0.5

    def update(b, rows_, advantages):
        model = build_policy(cfg.model)[0]
        model.load_state_dict(policy.state_dict())
        learner = Learner(model, cfg)
        ref = torch.zeros(len(rows_), b.completion_ids.shape[1])  # same reference terms in both
        learner.step(UpdateBatch(b.input_ids[rows_], b.attention_mask[rows_], b.completion_mask[rows_].bool(),
                                 advantages[rows_], None, ref))
        return model.state_dict()

    with_failures = update(batch, rows, token_adv)
    _, token_adv1, rows1, _ = loss_rows(part1, scores1, cfg)  # the round without the failed rollouts
    without = update(concat_batches([part1], tok.pad_token_id), rows1, token_adv1)
    # batch pads completions to the longer chunk; the extra padded positions carry no loss
    for k in without:
        assert torch.allclose(with_failures[k], without[k], atol=1e-6), k


def test_invalid_references_are_masked_not_scored_zero(tmp_path, arith):
    cfg = small_config(tmp_path, arith.endpoint)
    scorer = Scorer(cfg.scoring, {"arith": [arith.endpoint]})
    try:
        examples = [Task.with_answer("1+1=", "2"), Task.with_answer("1+2=", "three")]
        scores = scorer.submit(examples, ["2", "3", "2", "3"], [False] * 4).result()
    finally:
        scorer.close()
    assert scores.valid.tolist() == [[True, True], [False, False]]
    assert scores.rewards[0].tolist() == pytest.approx([1.0, 0.2])  # "3" is wrong but a bare integer


def test_handshake_fails_fast_when_a_verifier_is_missing(tmp_path, arith):
    cfg = small_config(tmp_path, arith.endpoint)
    cfg = cfg.model_copy(update={"scoring": cfg.scoring.model_copy(update={"timeout_s": 2.0})})
    with pytest.raises(Exception, match="no endpoint serves verifier"):
        train(cfg, {"arith": ["127.0.0.1:1"]})


def test_cli_rejects_a_bad_config(tmp_path):
    from typer.testing import CliRunner

    from cohort.cli import _load_commands, app

    _load_commands()
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {tiny: {}}\ndata: {arithmetic: {}}\nscoring: {verifiers: []}\n")
    result = CliRunner().invoke(app, ["train", "--config", str(bad)])
    assert result.exit_code == 2 and "scoring.verifiers" in result.output
    result = CliRunner().invoke(app, ["train", "grpo.loss_type=ppo"])
    assert result.exit_code == 2 and "loss_type" in result.output
    result = CliRunner().invoke(app, ["train", "--print-config", "grpo.beta=0.5"])
    assert result.exit_code == 0 and "beta: 0.5" in result.output
