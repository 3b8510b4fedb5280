"""``model.device``: where the policy trains. Rollouts, scores and advantages stay on the CPU; the learner moves
each update's rows to the policy's device and returns log-probs to the CPU.

On a machine without a GPU (this project's CI) the GPU tests skip and the config errors are checked; on a
machine with one (``bench/gpu_check.sh --tests``) the GPU tests run: the same update on both devices, and the
loop, lock-step and pipelined, against a real verifier on loopback."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from cohort.cli import _load_commands, app
from cohort.rpc.launch import ServiceProcess
from cohort.trainer.config import load_config
from cohort.trainer.forward import batched_logprobs
from cohort.trainer.learner import Learner, UpdateBatch
from cohort.trainer.models import build_policy
from cohort.trainer.train import train

_load_commands()
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU that torch sees")


def config(*extra: str):
    return load_config(None, [
        "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
        "data.arithmetic={num_prompts: 40, max_operand: 4}", "grpo.prompts_per_step=4", "grpo.num_generations=4",
        "rollout.max_completion_length=3", "run.torch_threads=1", "run.progress=false", "run.tensorboard=false",
        "run.plot=false", *extra])


def a_batch(vocab: int, rows: int = 8, prompt: int = 4, completion: int = 3) -> UpdateBatch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (rows, prompt + completion), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # one left-padded prompt
    loss_mask = torch.ones(rows, completion, dtype=torch.bool)
    loss_mask[1, 2:] = False  # one shorter completion
    adv = torch.randn(rows, 1, generator=g).expand(rows, completion).contiguous()
    return UpdateBatch(ids, mask, loss_mask, adv, old_logprobs=None, ref_logprobs=None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_a_gpu_asked_for_where_torch_sees_none_is_a_config_error(tmp_path, device):
    result = CliRunner().invoke(app, ["train", f"model.device={device}", f"run.output_dir={tmp_path}"])
    assert result.exit_code == 2, result.output
    assert "torch sees no GPU" in result.output and "model.device=cpu or auto" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing started


def test_a_device_that_is_no_device_name_is_a_config_error():
    with pytest.raises(ValueError, match="model.device"):
        config("model.device=gpu")
    with pytest.raises(ValueError, match="cpu:gloo,cuda:nccl"):  # NCCL alone cannot sum the CPU-side counts
        config("distributed.backend=nccl")
    with pytest.raises(ValueError, match="puts every rank on one GPU"):  # DDP/FSDP2 ranks need a GPU each
        config("model.device=cuda:0", "distributed.parallel=ddp", "grpo.loss_type=dapo")
    assert config("model.device=cuda:1").model.device == "cuda:1"  # one process: that GPU


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has a GPU for each of 2 processes")
def test_auto_is_the_cpu_for_every_process_when_not_each_has_a_gpu(monkeypatch):
    """DDP and FSDP2 need one kind of device on every rank: with fewer GPUs than torchrun's processes on this
    machine, auto is the CPU for all of them (rank 1 of 2 on a 1-GPU machine used to ask for a GPU it lacks)."""
    from cohort.trainer.distributed import local_device

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("LOCAL_RANK", rank)
        assert local_device("auto") == torch.device("cpu")


def test_an_update_batch_moves_every_tensor_and_keeps_what_is_absent():
    batch = a_batch(16)
    batch = UpdateBatch(**{**batch.__dict__, "behaviour_logprobs": torch.zeros(8, 3)})
    moved = batch.to(torch.device("meta"))
    assert all(getattr(moved, k).device.type == "meta" for k in ("input_ids", "attention_mask", "loss_mask",
                                                                 "advantages", "behaviour_logprobs"))
    assert moved.old_logprobs is None and moved.ref_logprobs is None and moved.is_weights is None
    assert batch.to(torch.device("cpu")).input_ids is batch.input_ids  # already there: no copy


@gpu
def test_the_same_update_on_the_gpu_as_on_the_cpu():
    cfg_cpu, cfg_gpu = config("model.device=cpu", "grpo.beta=0.04"), config("model.device=cuda", "grpo.beta=0.04")
    cpu, tok = build_policy(cfg_cpu.model)
    gpu_policy, _ = build_policy(cfg_gpu.model)
    assert next(gpu_policy.parameters()).is_cuda and not next(cpu.parameters()).is_cuda
    batch = a_batch(len(tok))
    t = batch.loss_mask.shape[1]
    ref_cpu = batched_logprobs(cpu, batch.input_ids, batch.attention_mask, t, 1.0, 4)
    ref_gpu = batched_logprobs(gpu_policy, batch.input_ids, batch.attention_mask, t, 1.0, 4)
    assert ref_gpu.device.type == "cpu"  # log-probs come back where the rows are
    torch.testing.assert_close(ref_gpu, ref_cpu, atol=1e-4, rtol=1e-4)
    batch = UpdateBatch(**{**batch.__dict__, "ref_logprobs": ref_cpu})
    before = {k: v.clone() for k, v in cpu.state_dict().items()}
    stats_cpu = Learner(cpu, cfg_cpu).update(batch, 2)
    stats_gpu = Learner(gpu_policy, cfg_gpu).update(batch, 2)
    assert stats_gpu["loss/total"] == pytest.approx(stats_cpu["loss/total"], abs=1e-4)
    assert stats_gpu["policy/grad_norm"] == pytest.approx(stats_cpu["policy/grad_norm"], rel=1e-3)
    assert stats_gpu["policy/kl"] == pytest.approx(stats_cpu["policy/kl"], abs=1e-5)
    # AdamW's step is about lr * sign(gradient) wherever a gradient is tiny, so compare the whole update's
    # direction (a few float-rounding sign flips cannot turn it), not each element
    delta_cpu = torch.cat([(v - before[k]).flatten() for k, v in cpu.state_dict().items()])
    delta_gpu = torch.cat([(v.cpu() - before[k]).flatten() for k, v in gpu_policy.state_dict().items()])
    assert delta_gpu.abs().sum() > 0
    assert torch.nn.functional.cosine_similarity(delta_gpu, delta_cpu, dim=0) > 0.99


@gpu
@pytest.mark.parametrize("staleness", [0, 1])
def test_the_loop_trains_on_the_gpu(tmp_path, staleness):
    with ServiceProcess(["arith"]) as arith:
        cfg = config("model.device=cuda", "grpo.beta=0.04", "run.max_steps=3", f"run.output_dir={tmp_path}",
                     f'scoring.verifiers=[{{name: arith, endpoints: ["{arith.endpoint}"]}}]',
                     f"rollout.max_staleness={staleness}", "rollout.workers=1")
        records = train(cfg, {"arith": [arith.endpoint]})
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["verify/unusable_frac"] == 0.0 for r in records)
    assert records[-1]["policy/grad_norm"] > 0 and records[-1]["policy/kl"] >= 0
    assert (tmp_path / "final" / "model.safetensors").exists()
