"""``model.dtype``: bf16 compute over float32 masters learns at small learning rates; pure bf16 does not, and
says so at the start (trainer.precision). On the CPU, where bf16 autocast exists; the same gate runs on a GPU in
bench/gpu_accept.sh."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cohort.trainer.config import load_config
from cohort.trainer.learner import Learner, UpdateBatch
from cohort.trainer.models import build_policy
from cohort.trainer.precision import Precision, describe, moved_share, resolve

GEOMETRY = "model.tiny={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4}"


def one_update_moved(dtype: str, lr: float = 1e-6) -> tuple[float, Learner]:
    """The share of the policy's parameters (its masters) that one GRPO update at ``lr`` changes."""
    cfg = load_config(None, [GEOMETRY, f"model.dtype={dtype}", f"optim.learning_rate={lr}", "grpo.beta=0.0",
                             "rollout.max_completion_length=6", "grpo.num_generations=4", "grpo.prompts_per_step=2"])
    torch.manual_seed(0)
    policy, tok = build_policy(cfg.model)
    before = [p.detach().clone() for p in policy.parameters()]
    learner = Learner(policy, cfg)
    b, t, prompt = 8, 6, 5
    ids = torch.randint(4, len(tok), (b, prompt + t))  # every character of the vocabulary but the specials
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 0.25, -0.25])[:, None].expand(b, t)
    batch = UpdateBatch(ids, torch.ones_like(ids), torch.ones(b, t, dtype=torch.bool), adv.contiguous(), None, None)
    learner.update(batch, 1)
    changed = sum(int((p.detach() != q).sum()) for p, q in zip(policy.parameters(), before))
    return changed / sum(q.numel() for q in before), learner


def test_bfloat16_means_float32_masters_and_bf16_compute():
    p = resolve("bfloat16", torch.device("cpu"))
    assert (p.master, p.compute, p.mixed) == (torch.float32, torch.bfloat16, True)
    assert resolve("auto", torch.device("cpu")).name == "float32"  # the CPU keeps float32
    assert resolve("auto", torch.device("cuda", 0)).name == "bfloat16"  # a GPU gets bf16 over float32 masters
    assert resolve("bfloat16-pure", torch.device("cpu")).master == torch.bfloat16
    cfg = load_config(None, [GEOMETRY, "model.dtype=bfloat16"])
    policy, _ = build_policy(cfg.model)
    assert {p.dtype for p in policy.parameters()} == {torch.float32}  # the masters
    engine_copy, _ = build_policy(cfg.model, for_engine=True)
    assert {p.dtype for p in engine_copy.parameters()} == {torch.bfloat16}  # what a rollout worker holds


def test_mixed_precision_update_moves_the_masters_and_pure_bf16_does_not():
    mixed, learner = one_update_moved("bfloat16")
    assert mixed >= 0.99, mixed
    assert learner.precision.mixed
    pure, _ = one_update_moved("bfloat16-pure")
    assert pure < 0.10, pure
    full, _ = one_update_moved("float32")
    assert full >= 0.99, full


def test_moved_share_predicts_what_pure_bf16_moves():
    """The start line's estimate is close to what one update really changes (weights of scale 0.02, lr 1e-6:
    about 2 %; 1e-5: about 16 %)."""
    torch.manual_seed(0)
    w = (torch.randn(512, 512) * 0.02).to(torch.bfloat16)
    for lr, expect in ((1e-6, 0.02), (1e-5, 0.156)):
        share = moved_share([w], lr)
        assert abs(share - expect) < 0.01, (lr, share)
        p = torch.nn.Parameter(w.clone())
        opt = torch.optim.AdamW([p], lr=lr, weight_decay=0.0)
        p.grad = torch.randn_like(p)
        opt.step()
        real = float((p.detach() != w).float().mean())
        assert abs(real - share) < 0.01, (lr, real, share)


def test_the_start_says_what_pure_bf16_moves(tmp_path):
    cfg = load_config(None, [GEOMETRY, "model.dtype=bfloat16-pure"])
    policy, _ = build_policy(cfg.model)
    lines = describe(policy, resolve("bfloat16-pure", torch.device("cpu")), 1e-6)
    assert len(lines) == 2 and lines[1].startswith("model.dtype=bfloat16-pure: one update at lr 1e-06 changes about ")
    assert "bfloat16" in lines[0]
    mixed = describe(policy, Precision("bfloat16", torch.float32, torch.bfloat16, "cpu"), 1e-6)
    assert len(mixed) == 1 and "float32 masters, bfloat16 compute" in mixed[0]


def test_cohort_train_start_line_for_pure_bf16(tmp_path):
    """Through the command as a user runs it: one line at the start names the share, the run goes on."""
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "train", f"run.output_dir={tmp_path}", "run.max_steps=1",
                          "model.dtype=bfloat16-pure", "optim.learning_rate=1e-6", "run.progress=false",
                          "run.tensorboard=false", "run.plot=false"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("model.dtype=bfloat16-pure: one update at lr 1e-06")]
    assert len(line) == 1, out.stdout
    share = float(line[0].split("changes about ")[1].split("%")[0])
    assert 0 < share < 10


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_checkpoints_hold_the_float32_masters(tmp_path, dtype):
    from cohort.trainer import checkpoint

    moved, learner = one_update_moved(dtype)
    checkpoint.save(tmp_path, 1, learner.policy, learner.optimizer, {}, {})
    cfg = load_config(None, [GEOMETRY, f"model.dtype={dtype}"])
    fresh, _ = build_policy(cfg.model)
    checkpoint.load(tmp_path / "checkpoints" / "step_000001", fresh, Learner(fresh, cfg).optimizer)
    for a, b in zip(fresh.parameters(), learner.policy.parameters()):
        assert a.dtype == torch.float32 and torch.equal(a, b)
