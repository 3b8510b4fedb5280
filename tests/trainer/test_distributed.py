"""Data parallelism on torch.distributed, checked on CPU + gloo with real ``torchrun`` launches.

One launch per mode (``dist_worker.py``, 2 ranks) measures everything; the tests assert on its
numbers. Weights are compared (not the loss: the on-policy GRPO loss value does not depend on
the weights). The fast tests at the bottom need no launcher.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer import checkpoint
from cohort.trainer.config import load_config
from cohort.trainer.distributed import SINGLE, pad_rows, setup
from cohort.trainer.learner import Learner, UpdateBatch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ADAMW_TOL = 2e-5  # AdamW divides by sqrt(v): float rounding of near-zero gradients is amplified
SGD_TOL = 1e-6


def _worker():
    spec = importlib.util.spec_from_file_location("dist_worker", HERE / "dist_worker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torchrun(*args: str, timeout: float = 500) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module", params=["ddp", "fsdp2"])
def launch(request, tmp_path_factory) -> tuple[str, Path, dict]:
    parallel = request.param
    out = tmp_path_factory.mktemp(parallel)
    torchrun(str(HERE / "dist_worker.py"), parallel, str(out))
    return parallel, out, json.loads((out / f"result_{parallel}.json").read_text())


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("optim,tol", [("adamw", ADAMW_TOL), ("sgd", SGD_TOL)])
def test_weights_after_3_steps_equal_single_process(launch, optim, tol):
    _, _, r = launch
    assert r["world_size"] == 2
    assert r[f"{optim}/max_diff"] < tol, r
    assert r[f"{optim}/grad_norm_diff"] < 1e-5 and r[f"{optim}/metric_diff"] < 1e-5, r  # global metrics


@pytest.mark.distributed
@pytest.mark.slow
def test_per_rank_token_mean_would_fail(launch):
    """The same run with the common bug (per-rank token mean, averaged) misses the single-process
    weights by far more than float rounding: the equality test above would catch it."""
    _, _, r = launch
    assert r["adamw/per_rank_mean_max_diff"] > 100 * ADAMW_TOL, r
    assert r["adamw/per_rank_mean_max_diff"] > 100 * r["adamw/max_diff"], r


@pytest.mark.distributed
@pytest.mark.slow
def test_each_rank_on_its_own_rows_gets_the_rounds_statistics(launch):
    """Each rank holds whole groups and computes on its own rows; with the sums over ranks, the batch-scaled
    advantages (outcome and process), the rows in the loss, every round metric (reward/mean, reward/std,
    fractions, components, flags, latency, dropped), the masked counts and the tool metrics equal one
    process's on the whole round."""
    _, _, r = launch
    assert r["row_space/adv_max_diff"] < 1e-6 and r["row_space/rows_equal"], r
    assert r["row_space/process_max_diff"] < 1e-6 and r["row_space/steps_max_diff"] < 1e-12, r
    assert r["row_space/metrics"].keys() == r["row_space/expected"].keys(), r
    assert r["row_space/metrics_max_diff"] < 1e-12, r
    assert r["row_space/reward_mean_diff"] < 1e-12 and r["row_space/reward_std_diff"] < 1e-12, r
    assert r["row_space/masks_equal"] and r["row_space/tools_max_diff"] < 1e-12, r
    assert r["row_space/metrics"]["verify/latency_s"] == 2.0 and "verify/dropped/code" in r["row_space/metrics"], r


@pytest.mark.distributed
@pytest.mark.slow
def test_per_rank_statistics_would_fail(launch):
    """The negative control: the same ranks without the sums over ranks (each rank's std, mean, counts
    alone) miss the whole round's values by far more than rounding, so the test above would catch it."""
    _, _, r = launch
    assert r["per_rank/adv_max_diff"] > 0.1 and r["per_rank/process_max_diff"] > 0.1, r
    assert r["per_rank/reward_std_diff"] > 0.05 and r["per_rank/reward_mean_diff"] > 0.05, r
    assert r["per_rank/metrics_max_diff"] > 0.05 and r["per_rank/tools_max_diff"] > 0.05, r
    assert not r["per_rank/masks_equal"] and r["per_rank/steps_max_diff"] > 0.01, r


@pytest.mark.distributed
@pytest.mark.slow
def test_generation_while_sharded_matches_unsharded(launch):
    _, _, r = launch
    assert r["generate/equal_all_ranks"], r


@pytest.mark.distributed
@pytest.mark.slow
def test_resume_from_distributed_checkpoint_is_bit_identical(launch):
    _, _, r = launch
    assert r["resume/weights_moved"] > 1e-4, r  # steps 2-3 did change the weights
    assert r["resume/bit_identical"] and r["resume/max_diff"] == 0.0, r
    assert r["resume/metrics_equal"], r


@pytest.mark.distributed
@pytest.mark.slow
def test_two_rank_checkpoint_loads_into_one_process(launch):
    parallel, out, r = launch
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    from cohort.trainer.models import build_policy

    worker = _worker()
    cfg = worker.config()
    policy, _ = build_policy(cfg.model)
    learner = Learner(policy, cfg)
    shared, per_rank = checkpoint.load(r["checkpoint"], policy, learner.optimizer)
    expected = torch.load(out / parallel / "step1_full.pt", weights_only=False)
    assert shared["world_size"] == 2 and shared["step"] == 1 and per_rank is None
    assert shared["sampler_position"] == expected["sampler_position"]
    state = policy.state_dict()
    assert all(torch.equal(state[k], expected["model"][k]) for k in expected["model"])
    optim = get_optimizer_state_dict(policy, learner.optimizer)
    assert optim["state"].keys() == expected["optim"]["state"].keys()
    for name, slots in expected["optim"]["state"].items():
        for slot in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optim["state"][name][slot], slots[slot]), (name, slot)
    # and it trains on from there
    batch, included = worker.global_batch(cfg)
    learner.step(worker.take(batch, included.nonzero().squeeze(-1)))
    assert any(not torch.equal(policy.state_dict()[k], expected["model"][k]) for k in expected["model"])


# --- no launcher needed ----------------------------------------------------------------------------


def _tiny_learner(micro: int):
    from cohort.trainer.models import build_policy

    # fixed micro-batches of `micro` rows, as every rank of a distributed run uses (micro_batch_cost_tokens=0)
    cfg = load_config(None, ["model.tiny={hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, "
                             "num_attention_heads: 2}", "grpo.prompts_per_step=2", "grpo.num_generations=2",
                             f"optim.micro_batch_size={micro}", "grpo.loss_type=dapo", "grpo.beta=0",
                             "optim.micro_batch_cost_tokens=0"])
    policy, _ = build_policy(cfg.model)
    return policy, Learner(policy, cfg)


def _batch(rows: int) -> UpdateBatch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 19, (rows, 7), generator=g)
    mask = torch.ones(rows, 3, dtype=torch.bool)
    mask[0, 2] = False
    return UpdateBatch(ids, torch.ones_like(ids), mask, torch.tensor([1.0, -0.5])[:rows, None].expand(-1, 3), None, None)


def test_zero_loss_padding_changes_no_weight():
    """Padding micro-batches (what a short rank runs) add exactly nothing to the update."""
    policy_a, learner_a = _tiny_learner(micro=2)
    policy_b, learner_b = _tiny_learner(micro=2)
    learner_a.step(_batch(2))
    learner_b.step(pad_rows(_batch(2), 5))  # 3 micro-batches, the last two all padding
    a, b = policy_a.state_dict(), policy_b.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_padding_an_empty_rank_gives_a_zero_gradient():
    policy, learner = _tiny_learner(micro=2)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    empty = UpdateBatch(torch.zeros(0, 7, dtype=torch.long), torch.zeros(0, 7, dtype=torch.long),
                        torch.zeros(0, 3, dtype=torch.bool), torch.zeros(0, 3), None, None)
    stats = learner.step(empty)  # padded to one all-attending row with no loss token
    assert stats["policy/grad_norm"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())


def test_bnpo_is_refused_with_parallel():
    with pytest.raises(ValueError, match="bnpo"):
        load_config(None, ["distributed.parallel=fsdp2", "grpo.loss_type=bnpo"])


def test_parallel_without_launcher_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        setup("ddp")
    assert setup("none") is SINGLE


@pytest.mark.distributed
@pytest.mark.slow
def test_cohort_train_under_torchrun_resumes_exactly(tmp_path):
    """The real loop (verifier services, sharded generation, each rank scoring its own rows, DCP checkpoints) under
    ``torchrun``: 3 steps straight, and 3 steps resumed from the step-1 checkpoint, end equal."""
    import shutil

    from safetensors.torch import load_file

    from cohort.trainer.metrics import deterministic

    cohort = str(Path(sys.executable).parent / "cohort")
    common = ["distributed.parallel=fsdp2", "grpo.prompts_per_step=4", "grpo.num_generations=4", "run.max_steps=3",
              "run.save_every=1", "run.progress=false", "run.tensorboard=false", "run.plot=false",
              "run.torch_threads=1"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    torchrun("--no-python", cohort, "train", *common, f"run.output_dir={straight}")
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(straight / "checkpoints" / "step_000001", resumed / "checkpoints" / "step_000001")
    first = (straight / "metrics.jsonl").read_text().splitlines()[0]
    (resumed / "metrics.jsonl").write_text(first + "\n")
    torchrun("--no-python", cohort, "train", *common, f"run.output_dir={resumed}")

    def metrics(run: Path) -> list[dict]:
        return [deterministic(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines()]

    assert [m["step"] for m in metrics(resumed)] == [1, 2, 3]
    assert metrics(resumed) == metrics(straight)
    a, b = load_file(straight / "final" / "model.safetensors"), load_file(resumed / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (straight / "rank_1" / "metrics.jsonl").exists()  # rank 1 logs aside, never over rank 0's file


@pytest.mark.distributed
@pytest.mark.slow
def test_any_world_size_resumes_the_others_checkpoint(tmp_path):
    """One output_dir, trained on alternately without and with a launcher: step 1 by a plain ``cohort train``,
    step 2 by 2 ranks (DDP), step 3 by a plain run again. Each run resumes the previous one's checkpoint and
    appends to its metrics; none restarts at step 0 (the defect: a plain run found no ``state.pt`` in a 2-rank
    checkpoint, started over, truncated metrics.jsonl and wrote ``state.pt`` into the 2-rank folders)."""
    cohort = str(Path(sys.executable).parent / "cohort")
    with ServiceProcess(["arith"]) as arith:
        common = [f'scoring.verifiers=[{{name: arith, endpoints: ["{arith.endpoint}"]}}]', "grpo.prompts_per_step=4",
                  "grpo.num_generations=4", "run.progress=false", "run.tensorboard=false", "run.plot=false",
                  "run.torch_threads=1", f"run.output_dir={tmp_path}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

        def plain(steps: int) -> str:
            proc = subprocess.run([cohort, "train", *common, f"run.max_steps={steps}"], capture_output=True, text=True,
                                  timeout=300, env=env, cwd=ROOT)
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
            return proc.stdout

        plain(1)
        after_1 = (tmp_path / "metrics.jsonl").read_text().splitlines()
        two = torchrun("--no-python", cohort, "train", "distributed.parallel=ddp", *common, "run.max_steps=2").stdout
        after_2 = (tmp_path / "metrics.jsonl").read_text().splitlines()
        third = plain(3)
    assert f"resuming run {tmp_path} from step 1 of 2" in two
    assert third.splitlines()[0].startswith(f"resuming run {tmp_path} from step 2 of 3")
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
    assert lines[:1] == after_1 and lines[:2] == after_2  # appended to, never truncated
    folders = sorted((tmp_path / "checkpoints").iterdir())
    assert [f.name for f in folders] == ["step_000001", "step_000002", "step_000003"]
    assert [torch.load(f / "meta.pt", weights_only=False)["world_size"] for f in folders] == [1, 2, 1]
    assert all((f / "COMPLETE").exists() for f in folders) and not list(tmp_path.rglob("state.pt"))

