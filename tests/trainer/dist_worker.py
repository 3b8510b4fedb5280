"""Worker for the torchrun tests: ``torchrun --standalone --nproc_per_node 2 dist_worker.py PARALLEL OUT_DIR``.

Runs every scenario of one parallel mode (ddp | fsdp2) in one launch and writes the measurements
(max abs weight differences, equality flags) to ``OUT_DIR/result_<parallel>.json`` from rank 0;
``test_distributed.py`` asserts on them. Each rank also computes the single-process reference
itself (plain module, no collectives): same init, the whole global batch, the same optimizer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from cohort.trainer import checkpoint
from cohort.trainer.advantages import group_advantages
from cohort.trainer.config import load_config
from cohort.trainer.data import PromptSampler, arithmetic_task
from cohort.trainer.distributed import SINGLE, TorchComm, for_generation, full_state_dict, setup, unwrap, wrap
from cohort.trainer.engines.hf import TransformersEngine
from cohort.trainer.learner import Learner, UpdateBatch, batched_logprobs, make_scheduler
from cohort.trainer.models import build_policy

OVERRIDES = [
    "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 2, init_seed: 3}",
    "grpo.prompts_per_step=2", "grpo.num_generations=4", "grpo.loss_type=dapo", "optim.micro_batch_size=2",
    "optim.learning_rate=0.01", "run.max_steps=3", "rollout.max_completion_length=6", "rollout.temperature=1.0",
    "grpo.beta=0",  # these checks compare policy updates; no reference model
]
STEPS = 3


def config(*extra: str):
    return load_config(None, OVERRIDES + list(extra))


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a)[:3], sorted(b)[:3])
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


# --- learner equivalence ------------------------------------------------------------------------------


def global_batch(cfg) -> tuple[UpdateBatch, torch.Tensor]:
    """B = 8 rows, prompt 5 tokens + completion 6; very unequal token counts on the two halves
    (rows 0-3 long, rows 4-7 short) and unequal included rows (3 vs 1), so a per-rank mean or a
    missing zero-loss padding batch shows up in the weights."""
    policy, _ = build_policy(cfg.model)
    g = torch.Generator().manual_seed(7)
    b, tp, t = 8, 5, 6
    ids = torch.randint(4, 19, (b, tp + t), generator=g)
    attention = torch.ones(b, tp + t, dtype=torch.long)
    attention[1, :2] = 0  # left padding
    lengths = torch.tensor([6, 5, 6, 4, 1, 2, 1, 1])
    loss_mask = torch.arange(t)[None, :] < lengths[:, None]  # (B, T)
    attention[:, tp:] = loss_mask.long()
    advantages = torch.randn(b, generator=g)[:, None].expand(b, t)  # (B, T)
    old = batched_logprobs(policy, ids, attention, t, 1.0, 8) + 0.05 * torch.randn(b, t, generator=g)
    included = torch.tensor([True, True, False, True, True, False, False, False])
    return UpdateBatch(ids, attention, loss_mask, advantages, old, None), included


def take(batch: UpdateBatch, rows: torch.Tensor) -> UpdateBatch:
    return UpdateBatch(batch.input_ids[rows], batch.attention_mask[rows], batch.loss_mask[rows],
                       batch.advantages[rows], batch.old_logprobs[rows], None)


def train_steps(cfg, comm, batch: UpdateBatch, optim: str) -> tuple[dict, list[dict]]:
    policy, _ = build_policy(cfg.model)
    policy = wrap(policy, comm)
    learner = Learner(policy, cfg, comm)
    if optim == "sgd":
        learner.optimizer = torch.optim.SGD(policy.parameters(), lr=0.5, momentum=0.9)
        learner.scheduler = make_scheduler(learner.optimizer, cfg)
    metrics = [learner.step(batch) for _ in range(STEPS)]
    return full_state_dict(policy, comm), metrics


class PerRankMeanComm(TorchComm):
    """The common bug, on purpose: each rank divides by its own token count and the ranks' gradients
    are averaged (local count * world as the denominator, summed = the mean of per-rank means)."""

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.world_size


def equivalence(comm, parallel: str) -> dict:
    out = {}
    for optim in ("adamw", "sgd"):
        cfg = config(f"distributed.parallel={parallel}")
        batch, included = global_batch(cfg)
        reference, ref_metrics = train_steps(cfg, SINGLE, take(batch, included.nonzero().squeeze(-1)), optim)
        mine = torch.tensor(comm.shard(list(range(8))))
        local = take(batch, mine[included[mine]])
        weights, metrics = train_steps(cfg, comm, local, optim)
        if comm.is_main:
            out[f"{optim}/max_diff"] = max_diff(weights, reference)
            out[f"{optim}/max_abs_weight"] = max(float(v.abs().max()) for v in reference.values())
            out[f"{optim}/metric_diff"] = max(abs(m[k] - r[k]) for m, r in zip(metrics, ref_metrics)
                                              for k in ("loss/total", "policy/clip_frac", "policy/entropy"))
            out[f"{optim}/grad_norm_diff"] = max(abs(m["policy/grad_norm"] - r["policy/grad_norm"])
                                                 for m, r in zip(metrics, ref_metrics))
        if optim == "adamw":
            buggy_comm = PerRankMeanComm(parallel)
            buggy, _ = train_steps(cfg, buggy_comm, local, optim)
            if comm.is_main:
                out["adamw/per_rank_mean_max_diff"] = max_diff(buggy, reference)
    return out


# --- one row space per rank: whole groups, global statistics from summed counts ----------------------------


def global_round():
    """P = 4 groups of G = 4 (rank 0 holds groups 0-1, rank 1 groups 2-3), built so that the per-rank
    statistics differ from the round's: rank 0's rewards spread little and rank 1's much, a flat group
    and fewer masked rollouts on rank 0, a component, a flag, a mask status, tool errors and a dropped
    verifier on one rank only, and unequal lengths."""
    from cohort.trainer.rollout import RolloutBatch, ToolTrace
    from cohort.trainer.scoring import Scores

    p, gsize, t = 4, 4, 5
    rewards = torch.tensor([[0.4, 0.5, 0.5, 0.6], [0.5, 0.5, 0.45, 0.5], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.2, 0.0]],
                           dtype=torch.float64)
    valid = torch.ones(p, gsize, dtype=torch.bool)
    valid[1, 2] = valid[2, 3] = valid[3, 0] = False  # group 1 is then flat (zero std)
    rewards = rewards.masked_fill(~valid, 0.0)
    nan = float("nan")
    code = torch.full((p, gsize), nan, dtype=torch.float64)
    code[2:] = rewards[2:]
    code[3, 0] = nan
    masked_by = [["", "", "", ""], ["", "", "math/verifier_error", ""], ["", "", "", "code/sandbox_error"],
                 ["code/sandbox_error", "", "", ""]]
    flags = [[(), ("code/oom",), (), ()], [()] * 4, [(), (), ("code/hack",), ("code/hack",)], [()] * 4]
    lengths = torch.tensor([5, 1, 2, 3, 4, 5, 5, 1, 1, 1, 2, 1, 3, 5, 4, 2])
    completion_mask = (torch.arange(t)[None, :] < lengths[:, None]).long()  # (B, T)
    g = torch.Generator().manual_seed(5)
    tools = ToolTrace(torch.zeros(p * gsize, t, dtype=torch.bool), torch.zeros(p * gsize, dtype=torch.bool),
                      torch.randint(0, 3, (p * gsize,), generator=g), torch.randint(1, 4, (p * gsize,), generator=g),
                      torch.zeros(p * gsize, dtype=torch.bool), torch.rand(p * gsize, generator=g).double(),
                      [("timeout",) if i == 13 else () for i in range(p * gsize)])
    batch = RolloutBatch(torch.ones(p * gsize, 2, dtype=torch.long), torch.ones(p * gsize, 2, dtype=torch.long),
                         torch.randint(4, 19, (p * gsize, t), generator=g) * completion_mask, completion_mask,
                         lengths == t, [f"text {i}" for i in range(p * gsize)], tools=tools)
    scores = Scores(rewards, valid, {"code": code}, 0.0, statuses=[["ok"] * gsize] * p, masked_by=masked_by,
                    flags=flags)
    return batch, scores, gsize


def row_space(comm) -> dict:
    """This rank's rows only, with ``comm``: the batch-scaled advantages, the rows in the loss, the round's
    metrics, the masked counts and the tool metrics equal one process's on the whole round; the same
    computation without the sums over ranks (this rank's statistics alone) does not."""
    import dataclasses

    from cohort.trainer import tool_rollouts
    from cohort.trainer.advantages import step_advantages
    from cohort.trainer.step_rewards import StepTensors, step_metrics
    from cohort.trainer.scoring import MaskCounts
    from cohort.trainer.train import loss_rows, round_metrics

    cfg = config("grpo.scale_rewards=batch")
    batch, scores, gsize = global_round()
    groups = comm.shard(list(range(scores.rewards.shape[0])))
    mine = [k * gsize + j for k in groups for j in range(gsize)]
    local = dataclasses.replace(scores.select(groups), latency_s=1.0 + comm.rank,
                                dropped=frozenset({"code"}) if comm.rank == 1 else frozenset())
    whole = dataclasses.replace(scores, latency_s=float(comm.world_size), dropped=frozenset({"code"}))
    local_batch = batch.select(mine)
    out = {}

    def measure(name: str, reduced) -> None:
        adv, token_adv, rows, _ = loss_rows(local_batch, local, cfg, comm=reduced)
        full_adv, full_token_adv, full_rows, _ = loss_rows(batch, whole, cfg)
        rows_equal = torch.equal(torch.tensor(mine)[rows], full_rows[torch.isin(full_rows, torch.tensor(mine))])
        metrics, expected = round_metrics(local_batch, local, adv, len(rows), reduced), round_metrics(
            batch, whole, full_adv, len(full_rows))
        metric_diff = max(abs(metrics[k] - expected[k]) for k in expected if k in metrics) \
            if metrics.keys() == expected.keys() else float("inf")
        tools, tools_expected = tool_rollouts.metrics(local_batch, reduced), tool_rollouts.metrics(batch)
        tools_diff = max(abs(tools[k] - tools_expected[k]) for k in tools_expected) \
            if tools.keys() == tools_expected.keys() else float("inf")
        # process supervision: two steps per valid rollout, scaled by the std of every step of the round
        steps_r = torch.stack([scores.rewards, 1 - scores.rewards], dim=2)  # (P, G, 2)
        ends = torch.tensor([1, 3]).expand(*scores.rewards.shape, 2)
        steps_m = torch.ones_like(steps_r, dtype=torch.bool)
        proc = step_advantages(steps_r[groups], ends[groups], steps_m[groups], local.valid, 5, "batch",
                                  reduce=reduced.sum)
        proc_full = step_advantages(steps_r, ends, steps_m, scores.valid, 5, "batch")
        stats = step_metrics(StepTensors(steps_r[groups], ends[groups], steps_m[groups]), local.valid,
                             proc.informative_groups, reduced.sum)
        stats_full = step_metrics(StepTensors(steps_r, ends, steps_m), scores.valid, proc_full.informative_groups)
        parts = comm.all_gather({
            "adv": float((token_adv - full_token_adv[mine]).abs().max()), "rows_equal": rows_equal,
            "metrics": metric_diff, "tools": tools_diff,
            "masks_equal": MaskCounts.of(local, reduced) == MaskCounts.of(whole),
            "process": float((proc.advantages - proc_full.advantages[groups]).abs().max()),
            "steps": max(abs(stats[k] - stats_full[k]) for k in stats_full)})
        out[f"{name}/adv_max_diff"] = max(q["adv"] for q in parts)
        out[f"{name}/rows_equal"] = all(q["rows_equal"] for q in parts)
        out[f"{name}/metrics_max_diff"] = max(q["metrics"] for q in parts)
        out[f"{name}/tools_max_diff"] = max(q["tools"] for q in parts)
        out[f"{name}/masks_equal"] = all(q["masks_equal"] for q in parts)
        out[f"{name}/process_max_diff"] = max(q["process"] for q in parts)
        out[f"{name}/steps_max_diff"] = max(q["steps"] for q in parts)
        out[f"{name}/reward_std_diff"] = abs(metrics["reward/std"] - expected["reward/std"])
        out[f"{name}/reward_mean_diff"] = abs(metrics["reward/mean"] - expected["reward/mean"])
        if comm.is_main:
            out[f"{name}/metrics"] = metrics
            out[f"{name}/expected"] = expected

    measure("row_space", comm)
    measure("per_rank", SINGLE)  # the negative control: this rank's statistics alone
    return out


# --- a small loop: sharded generation, DCP checkpoint, exact resume ------------------------------------


def reward_of(text: str) -> float:
    return (sum(map(ord, text)) % 5) / 4  # deterministic, varied: a stand-in for the verifiers


class MiniRun:
    """The loop's distributed parts without verifiers: shard prompts, generate, this rank's groups'
    advantages, update."""

    def __init__(self, cfg, comm):
        self.cfg, self.comm = cfg, comm
        policy, self.tokenizer = build_policy(cfg.model)
        self.policy = wrap(policy, comm)
        self.learner = Learner(self.policy, cfg, comm)
        examples = arithmetic_task(cfg.data.arithmetic)
        self.prompt_ids = [self.tokenizer(e.prompt, add_special_tokens=False)["input_ids"] for e in examples]
        self.sampler = PromptSampler(len(examples), cfg.grpo.prompts_per_step, cfg.data.shuffle_seed)
        engine = TransformersEngine(cfg.rollout, unwrap(self.policy), self.tokenizer, cfg.run.seed + comm.rank)
        self.engine = for_generation(engine, self.policy, comm)
        self.step = 0

    def run(self, until: int) -> list[dict]:
        records, gsize = [], self.cfg.grpo.num_generations
        while self.step < until:
            self.step += 1
            idx = self.comm.shard(self.sampler.next())
            batch = self.engine.generate([self.prompt_ids[i] for i in idx], gsize)
            rewards = torch.tensor([reward_of(t) for t in batch.texts], dtype=torch.float64).view(-1, gsize)  # (p, G)
            adv = group_advantages(rewards, torch.ones_like(rewards, dtype=torch.bool), reduce=self.comm.sum)
            rows = adv.included.flatten().nonzero().squeeze(-1)
            update = UpdateBatch(batch.input_ids[rows], batch.attention_mask[rows], batch.completion_mask[rows].bool(),
                                 adv.advantages.flatten()[rows][:, None].expand(-1, batch.completion_mask.shape[1]),
                                 None, None)
            records.append(self.learner.step(update))
            self.engine.sync_weights(unwrap(self.policy))
        return records

    def save(self, out_dir: Path) -> Path:
        return checkpoint.save(out_dir, self.step, self.policy, self.learner.optimizer,
                                    {"scheduler": self.learner.scheduler.state_dict(),
                                     "sampler_position": self.sampler.position},
                                    {"engine": self.engine.state_dict()}, self.comm)

    def load(self, folder: Path) -> None:
        shared, per_rank = checkpoint.load(folder, self.policy, self.learner.optimizer, self.comm)
        self.learner.scheduler.load_state_dict(shared["scheduler"])
        self.sampler.position = shared["sampler_position"]
        self.engine.load_state_dict(per_rank["engine"])
        self.step = shared["step"]


def generation_and_resume(comm, parallel: str, out_dir: Path) -> dict:
    cfg = config(f"distributed.parallel={parallel}", "data.arithmetic={num_prompts: 16, max_operand: 9}")
    out = {}
    # sharded generation samples exactly what the unsharded model samples with the same generator
    run = MiniRun(cfg, comm)
    plain, tokenizer = build_policy(cfg.model)
    prompts = [run.prompt_ids[0], run.prompt_ids[1]]
    sharded = run.engine.generate(prompts, 4).completion_ids
    expected = TransformersEngine(cfg.rollout, plain, tokenizer, cfg.run.seed + comm.rank).generate(prompts, 4)
    same = torch.equal(sharded, expected.completion_ids)
    out["generate/equal_all_ranks"] = all(comm.all_gather(same))
    # uninterrupted 3 steps
    run = MiniRun(cfg, comm)
    full_records = run.run(STEPS)
    uninterrupted = full_state_dict(run.policy, comm)
    # 1 step, checkpoint, then fresh objects and a scrambled RNG, load, 2 more steps
    run = MiniRun(cfg, comm)
    run.run(1)
    folder = run.save(out_dir / parallel)
    step1 = full_state_dict(run.policy, comm)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    optim1 = get_optimizer_state_dict(run.policy, run.learner.optimizer,
                                      options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    torch.manual_seed(12345)
    resumed = MiniRun(cfg, comm)
    resumed.engine.generate(prompts, 4)  # move the fresh sampler's RNG: the checkpoint must restore it
    resumed.load(folder)
    resumed_records = resumed.run(STEPS)
    final = full_state_dict(resumed.policy, comm)
    if comm.is_main:
        out["resume/bit_identical"] = all(torch.equal(final[k], uninterrupted[k]) for k in final)
        out["resume/max_diff"] = max_diff(final, uninterrupted)
        out["resume/metrics_equal"] = resumed_records == full_records[1:]
        out["resume/weights_moved"] = max_diff(final, step1)
        out["checkpoint"] = str(folder)
        torch.save({"model": step1, "optim": optim1, "sampler_position": run.sampler.position},
                   out_dir / parallel / "step1_full.pt")
    return out


def main() -> None:
    parallel, out_dir = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    comm = setup(parallel)
    result = {"world_size": comm.world_size}
    result |= equivalence(comm, parallel)
    result |= row_space(comm)
    result |= generation_and_resume(comm, parallel, out_dir)
    if comm.is_main:
        (out_dir / f"result_{parallel}.json").write_text(json.dumps(result, indent=1))
    comm.close()
    sys.stdout.flush()
    os._exit(0)  # some FSDP2 workers abort in interpreter teardown after a clean destroy_process_group


if __name__ == "__main__":
    main()
