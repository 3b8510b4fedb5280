"""The optimizer update on a round's rows: micro-batched by the forward back-end chosen at start-up
(``trainer.forward``), clipped, scheduled."""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cohort.trainer.batch import UpdateBatch
from cohort.trainer.config import TrainConfig
from cohort.trainer import forward
from cohort.trainer.is_correction import rollout_correction
from cohort.trainer.distributed import SINGLE, Comm, pad_rows
from cohort.trainer.forward import batched_logprobs, micro_batch, token_logprobs
from cohort.trainer.loss import LossConfig, LossInputs, normaliser, policy_loss
from cohort.trainer.precision import resolve

__all__ = ["Learner", "UpdateBatch", "batched_logprobs", "make_optimizer", "make_scheduler", "token_logprobs"]
# batched_logprobs and token_logprobs (the module forward) live in trainer.forward, UpdateBatch in trainer.batch;
# named here for callers


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; the fused kernel (one pass per tensor, same update up to float rounding) for plain tensors,
    the foreach one for sharded (DTensor) parameters."""
    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    fused = all(type(p.data) is torch.Tensor and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=o.learning_rate, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_epsilon,
                             weight_decay=o.weight_decay, **({"fused": True} if fused else {"foreach": True}))


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup, then constant / linear decay / cosine decay to 0 over the optimizer steps."""
    warmup = cfg.optim.warmup_steps
    total = cfg.run.max_steps * cfg.grpo.num_iterations
    kind = cfg.optim.lr_scheduler_type

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if kind == "linear":
            return 1.0 - progress
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Learner:
    """Owns the policy's optimizer state; one :meth:`step` is one optimizer step on an UpdateBatch."""

    def __init__(self, policy: torch.nn.Module, cfg: TrainConfig, comm: Comm = SINGLE):
        self.policy = policy
        self.cfg = cfg
        self.comm = comm  # torch.distributed: global counts, equal micro-batch counts, summed metrics
        self.loss_cfg = LossConfig(cfg.grpo.epsilon, cfg.grpo.epsilon_upper, cfg.grpo.beta)
        self.optimizer = make_optimizer(policy, cfg)
        self.scheduler = make_scheduler(self.optimizer, cfg)
        # Length-cut micro-batches where the split changes nothing in the maths: not bnpo (normalised per
        # micro-batch) and not across ranks (every rank must run the same number of forward/backward passes).
        fixed = cfg.grpo.loss_type == "bnpo" or comm.distributed
        self.forward_cost = 0 if fixed else cfg.optim.micro_batch_cost_tokens
        self.device = next(policy.parameters()).device
        self.precision = resolve(cfg.model.dtype, self.device)  # bf16 autocast over float32 masters, or one dtype
        self.forward = forward.choose(policy, comm, cfg.optim.gradient_checkpointing, self.precision)  # CPU fast path or module
        self.last_logprobs: Tensor | None = None  # (B, T) log-probs of the last step's rows before its update

    def step(self, batch: UpdateBatch) -> dict[str, float]:
        cfg, policy, comm = self.cfg, self.policy, self.comm
        policy.train()
        batch = batch.to(self.device)
        n_rows = batch.input_ids.shape[0]
        mb = micro_batch(cfg.optim, comm.max_int(batch.input_ids.shape[1]), n_rows)
        n_micro = max(1, comm.max_int(-(-batch.input_ids.shape[0] // mb)))  # the same on every rank; >= 1
        batch = pad_rows(batch, (n_micro - 1) * mb + 1)  # short ranks: zero-loss rows (no-op in one process)
        t = batch.loss_mask.shape[1]
        norm = normaliser(batch.loss_mask, cfg.grpo.loss_type, cfg.rollout.max_completion_length,
                          reduce=comm.sum)  # global rows / tokens
        self.optimizer.zero_grad(set_to_none=True)
        totals = {"loss": 0.0, "policy": 0.0, "kl_sum": 0.0, "clipped": 0.0, "tokens": 0.0, "entropy_sum": 0.0}
        tp = batch.input_ids.shape[1] - t
        buckets, logprobs_of = self.forward.plan(batch.input_ids, batch.attention_mask, t, mb, self.forward_cost)
        n_micro = len(buckets)  # == n_micro above with fixed micro-batches (bnpo, several ranks)
        logprobs_before = torch.zeros(batch.loss_mask.shape, device=batch.loss_mask.device)  # (n, T) before the update
        for k, (sl, w) in enumerate(buckets):
            comm.grad_sync(policy, k == len(buckets) - 1)  # reduce gradients once, in the last micro-batch
            with self.forward.autocast():  # bf16 matmuls over the float32 masters (model.dtype: bfloat16)
                logprobs, entropy = logprobs_of(policy, batch.input_ids[sl, : tp + w],
                                                batch.attention_mask[sl, : tp + w], w, cfg.rollout.temperature,
                                                with_entropy=True)
            logprobs_before[sl, :w] = logprobs.detach().float()
            old = batch.old_logprobs[sl, :w] if batch.pi_old == "given" else logprobs.detach()
            ref = None if batch.ref_logprobs is None else batch.ref_logprobs[sl, :w]
            isw = None if batch.is_weights is None else batch.is_weights[sl, :w]
            if isw is None and batch.pi_old == "decoupled":
                isw, _ = rollout_correction(logprobs.detach().float(), batch.behaviour_logprobs[sl, :w],
                                            batch.loss_mask[sl, :w], cfg.rollout.is_correction, cfg.rollout.is_cap)
            out = policy_loss(LossInputs(logprobs, old, batch.advantages[sl, :w], batch.loss_mask[sl, :w], ref, isw),
                              self.loss_cfg, norm, n_micro)
            out.loss.backward()
            totals["loss"] += float(out.loss.detach())
            totals["policy"] += float(out.policy_loss)
            totals["kl_sum"] += float(out.kl_sum)
            totals["clipped"] += float(out.clipped_tokens)
            totals["tokens"] += float(out.tokens)
            totals["entropy_sum"] += float((entropy * batch.loss_mask[sl, :w]).sum())
        self.last_logprobs = logprobs_before[:n_rows]  # pi_old for later iterations when this was the first
        totals = comm.sum_floats(totals)  # metrics over the global batch
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optim.max_grad_norm)
        self.optimizer.step()
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        tokens = max(totals["tokens"], 1.0)
        return {
            "loss/total": totals["loss"],
            "loss/policy": totals["policy"],
            "policy/kl": totals["kl_sum"] / tokens,
            "policy/clip_frac": totals["clipped"] / tokens,
            "policy/entropy": totals["entropy_sum"] / tokens,
            "policy/grad_norm": float(grad_norm),
            "policy/lr": lr,
        }

    def update(self, batch: UpdateBatch, iterations: int) -> dict[str, float]:
        """One round's ``iterations`` optimizer steps on its rows (the same rows each pass); the last
        step's metrics. Without old log-probs the first pass runs on the sampling policy, so its
        log-probs are pi_old for the later passes (what a no-grad forward would give). No row on any
        rank: no update (:meth:`skip`)."""
        if self.comm.max_int(batch.input_ids.shape[0]) == 0:
            return self.skip(iterations)
        batch = batch.to(self.device)  # once for every pass (the importance weights are computed there too)
        correction: dict[str, float] = {}
        for _ in range(iterations):
            stats = self.step(batch)
            if batch.pi_old != "given":  # this pass's log-probs are pi_old of the next (own or decoupled)
                weights, correction = rollout_correction(self.last_logprobs, batch.behaviour_logprobs, batch.loss_mask,
                                                         self.cfg.rollout.is_correction, self.cfg.rollout.is_cap)
                batch = dataclasses.replace(batch, old_logprobs=self.last_logprobs,
                                            is_weights=batch.is_weights if weights is None else weights)
        self.optimizer.zero_grad(set_to_none=True)  # free the round's gradients: they would live through the next generation
        return stats | correction

    @torch.no_grad()
    def logprobs(self, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                 completion_len: int) -> Float[Tensor, "B T"]:
        """The policy's no-grad log-probs of a batch, with the learner's forward and micro-batches."""
        return batched_logprobs(self.policy, input_ids, attention_mask, completion_len, self.cfg.rollout.temperature,
                                micro_batch(self.cfg.optim, input_ids.shape[1], input_ids.shape[0]), self.forward_cost,
                                self.forward)

    def skip(self, iterations: int = 1) -> dict[str, float]:
        """No row carries signal this round: no optimizer step, but the schedule advances by the round's
        ``iterations`` steps, so the learning rate stays a function of the round (as planned over
        ``max_steps * num_iterations``) however many rounds are skipped. PyTorch warns when a scheduler's
        first step comes before any optimizer step (the old call order, which lost the first value);
        here that is the intent, so that one warning is silenced."""
        lr = self.scheduler.get_last_lr()[0]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
            for _ in range(iterations):
                self.scheduler.step()
        return {"policy/lr": lr}
