"""Log-probabilities of completions and the optimizer update (micro-batched, clipped, scheduled)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cohort.trainer.config import TrainConfig
from cohort.trainer.distributed import SINGLE, Comm, pad_rows
from cohort.trainer import llama_forward
from cohort.trainer.llama_forward import llama_logits, logits_with_pattern
from cohort.trainer.loss import LossConfig, LossInputs, loss_denominator, policy_loss
from cohort.trainer.packing import MAX_PACKED_TOKENS, pack, packed_lengths


def token_logprobs(
    model: torch.nn.Module,
    input_ids: Int[Tensor, "B L"],
    attention_mask: Int[Tensor, "B L"],
    completion_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    lean: bool = False,
    packed: bool = False,
) -> tuple[Float[Tensor, "B T"], Float[Tensor, "B T"] | None]:
    """log pi(token) for the last ``completion_len`` positions, and optionally the per-token entropy.

    Position ids follow the attention mask (left padding), as in the rollout engine. Log-probs (and
    entropies) are exactly 0 past each completion's end, so no term of the loss there can overflow.
    ``lean``: the same function through ``llama_forward`` instead of the transformers module (a plain
    Llama in one process); ``packed`` (with ``lean``): rows sharing a prompt forwarded as one sequence
    (``trainer.packing``).
    """
    if packed:
        return _packed_logprobs(model, input_ids, attention_mask, completion_len, temperature, with_entropy)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    if lean:
        logits = llama_logits(model, input_ids, attention_mask, positions, completion_len + 1)  # (B, T+1, V)
    else:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                       logits_to_keep=completion_len + 1, use_cache=False).logits  # (B, T+1, V)
    logits = logits[:, :-1].float()  # (B, T, V) predicts the completion tokens
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, -completion_len:]  # (B, T)
    valid = attention_mask[:, -completion_len:].bool()  # (B, T) completions are right-padded
    logz = torch.logsumexp(logits, dim=-1)  # (B, T)
    logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - logz  # (B, T)
    logprobs = torch.where(valid, logprobs, torch.zeros_like(logprobs))
    entropy = None
    if with_entropy:
        with torch.no_grad():
            p = torch.softmax(logits, dim=-1)
            entropy = torch.where(valid, logz - (p * logits).sum(-1), torch.zeros_like(logz))  # (B, T)
    return logprobs, entropy


def _packed_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_len: int,
                     temperature: float, with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    pk = pack(input_ids, attention_mask, completion_len)
    logits = logits_with_pattern(model, pk.input_ids, pk.position_ids, pk.attend)  # (R, N, V)
    logits = logits.flatten(0, 1)[pk.source].float()  # (B, T, V) the logits that predict each completion token
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # (B, T)
    logprobs = logits.gather(-1, pk.targets[..., None]).squeeze(-1) - logz  # (B, T)
    logprobs = torch.where(pk.valid, logprobs, torch.zeros_like(logprobs))
    entropy = None
    if with_entropy:
        with torch.no_grad():
            p = torch.softmax(logits, dim=-1)
            entropy = torch.where(pk.valid, logz - (p * logits).sum(-1), torch.zeros_like(logz))  # (B, T)
    return logprobs, entropy


def completion_lengths(attention_mask: Int[Tensor, "B L"], completion_len: int) -> Int[Tensor, "B"]:
    return attention_mask[:, -completion_len:].sum(dim=1)  # completions are right-padded


def cheapest_runs(widths: list[int], sizes: list[int], cap: int, cost: int) -> list[tuple[int, int]]:
    """Split items sorted by non-increasing width into consecutive runs [start, end), each holding at most
    ``cap`` in ``sizes`` (or one item), minimising sum over runs of ``cost + items * widths[start]`` (padded
    tokens plus a fixed price per forward, in tokens). An exact dynamic programme, O(n * run length)."""
    n = len(widths)
    best = [0] * (n + 1)  # best[i]: cheapest cost of the first i items
    cut = [0] * (n + 1)  # the run that ends at item i starts at cut[i]
    for i in range(1, n + 1):
        best[i], cut[i] = best[i - 1] + cost + widths[i - 1], i - 1
        held = sizes[i - 1]
        for j in range(i - 2, -1, -1):
            held += sizes[j]
            if held > cap:
                break
            c = best[j] + cost + (i - j) * widths[j]
            if c <= best[i]:  # ties: the longer run (fewer forwards)
                best[i], cut[i] = c, j
    runs, i = [], n
    while i:
        runs.append((cut[i], i))
        i = cut[i]
    return runs[::-1]


def length_buckets(lengths: Int[Tensor, "B"], micro_batch: int, prompt_width: int = 0,
                   forward_cost: int = 0) -> list[tuple[Tensor, int]]:
    """Micro-batches of rows with similar completion lengths: (row indices, completion width to keep).

    Rows are taken longest first, and each micro-batch is cut to its own longest completion, so
    short completions do not pay for the longest one's padding. Trailing columns that every row of a
    micro-batch has as padding change nothing (causal attention, right padding): the same maths.

    ``forward_cost == 0``: consecutive runs of ``micro_batch`` rows (a fixed count, whatever the lengths).
    ``forward_cost > 0``: runs of at most ``micro_batch`` rows, cut where they minimise the padded tokens
    forwarded, ``rows * (prompt_width + width)`` summed over micro-batches, plus ``forward_cost`` tokens
    per micro-batch (the fixed price of one more forward/backward, in tokens): see ``cheapest_runs``.
    One long completion then gets a short micro-batch of its own instead of padding 31 short ones.
    """
    order = torch.argsort(lengths, descending=True, stable=True)
    if forward_cost <= 0:
        return [(idx, max(int(lengths[idx].max()), 1)) for idx in order.split(micro_batch)]
    widths = [prompt_width + max(int(x), 1) for x in lengths[order].tolist()]  # non-increasing
    return [(order[j:i], widths[j] - prompt_width) for j, i in cheapest_runs(widths, [1] * len(widths),
                                                                               micro_batch, forward_cost)]


def prompt_buckets(input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"], completion_len: int,
                   micro_batch: int, forward_cost: int) -> list[tuple[Tensor, int]]:
    """Micro-batches of whole prompt groups for the packed forward (``trainer.packing``): (row indices,
    completion width to keep). Groups are sorted by packed length (prompt + their completions) and cut
    by ``cheapest_runs`` with at most ``micro_batch`` rows per micro-batch (or one group)."""
    groups, packed = packed_lengths(input_ids, attention_mask, completion_len)
    comp = completion_lengths(attention_mask, completion_len).tolist()
    order = sorted(range(len(groups)), key=lambda k: -packed[k])
    runs = cheapest_runs([packed[k] for k in order], [len(groups[k]) for k in order], micro_batch, forward_cost)
    buckets = []
    for j, i in runs:
        rows = torch.tensor([r for k in order[j:i] for r in groups[k]])
        buckets.append((rows, max(max(comp[r] for r in rows.tolist()), 1)))
    return buckets


def micro_batches(input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"], completion_len: int,
                  micro_batch: int, forward_cost: int, lean: bool) -> tuple[list[tuple[Tensor, int]], bool]:
    """(row indices, completion width) per micro-batch, and whether to forward them packed by prompt.

    Packed (``lean`` and every packed sequence within ``packing.MAX_PACKED_TOKENS``): whole prompt groups
    per micro-batch when the split is free (forward_cost > 0). Otherwise rows by completion length
    (see length_buckets)."""
    packed = lean and max(packed_lengths(input_ids, attention_mask, completion_len)[1], default=0) <= MAX_PACKED_TOKENS
    if packed and forward_cost > 0:
        return prompt_buckets(input_ids, attention_mask, completion_len, micro_batch, forward_cost), True
    tp = input_ids.shape[1] - completion_len
    return length_buckets(completion_lengths(attention_mask, completion_len), micro_batch, tp, forward_cost), packed


@torch.no_grad()
def batched_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_len: int,
                     temperature: float, micro_batch: int, forward_cost: int = 0,
                     lean: bool = False) -> Float[Tensor, "B T"]:
    """No-grad log-probs (B, T) in micro-batches (see micro_batches; packed by prompt when ``lean``),
    0 past each completion's end."""
    tp = input_ids.shape[1] - completion_len
    out = torch.zeros(input_ids.shape[0], completion_len)
    buckets, packed = micro_batches(input_ids, attention_mask, completion_len, micro_batch, forward_cost, lean)
    for idx, width in buckets:
        lp, _ = token_logprobs(model, input_ids[idx, : tp + width], attention_mask[idx, : tp + width], width,
                               temperature, lean=lean, packed=packed)
        out[idx, :width] = lp.float()
    return out


@dataclass
class UpdateBatch:
    """The rows that enter the loss (included rows only)."""

    input_ids: Int[Tensor, "B L"]
    attention_mask: Int[Tensor, "B L"]
    loss_mask: Bool[Tensor, "B T"]
    advantages: Float[Tensor, "B T"]  # per token (outcome advantages broadcast over T)
    old_logprobs: Float[Tensor, "B T"] | None  # None: on-policy single iteration (ratio = 1)
    ref_logprobs: Float[Tensor, "B T"] | None
    is_weights: Float[Tensor, "B T"] | None = None


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
        self.loss_cfg = LossConfig(cfg.grpo.loss_type, cfg.grpo.epsilon, cfg.grpo.epsilon_upper, cfg.grpo.beta,
                                   cfg.rollout.max_completion_length)
        self.optimizer = make_optimizer(policy, cfg)
        self.scheduler = make_scheduler(self.optimizer, cfg)
        # Length-cut micro-batches where the split changes nothing in the maths: not bnpo (normalised per
        # micro-batch) and not across ranks (every rank must run the same number of forward/backward passes).
        fixed = cfg.grpo.loss_type == "bnpo" or comm.distributed
        self.forward_cost = 0 if fixed else cfg.optim.micro_batch_cost_tokens
        self.lean = not comm.distributed and llama_forward.supports(policy)  # DDP/FSDP2 need the module forward
        self.last_logprobs: Tensor | None = None  # (B, T) log-probs of the last step's rows before its update

    def step(self, batch: UpdateBatch) -> dict[str, float]:
        cfg, policy, comm = self.cfg, self.policy, self.comm
        policy.train()
        n_rows = batch.input_ids.shape[0]
        mb = cfg.optim.micro_batch_size or max(n_rows, 1)
        n_micro = max(1, comm.max_int(-(-batch.input_ids.shape[0] // mb)))  # the same on every rank; >= 1
        batch = pad_rows(batch, (n_micro - 1) * mb + 1)  # short ranks: zero-loss rows (no-op in one process)
        t = batch.loss_mask.shape[1]
        denominator = loss_denominator(batch.loss_mask, cfg.grpo.loss_type, cfg.rollout.max_completion_length,
                                       reduce=comm.sum)  # global rows / tokens
        self.optimizer.zero_grad(set_to_none=True)
        totals = {"loss": 0.0, "policy": 0.0, "kl_sum": 0.0, "clipped": 0.0, "tokens": 0.0, "entropy_sum": 0.0}
        tp = batch.input_ids.shape[1] - t
        buckets, packed = micro_batches(batch.input_ids, batch.attention_mask, t, mb, self.forward_cost, self.lean)
        n_micro = len(buckets)  # == n_micro above with fixed micro-batches (bnpo, several ranks)
        logprobs_before = torch.zeros(batch.loss_mask.shape, device=batch.loss_mask.device)  # (n, T) before the update
        for k, (sl, w) in enumerate(buckets):
            comm.grad_sync(policy, k == len(buckets) - 1)  # reduce gradients once, in the last micro-batch
            logprobs, entropy = token_logprobs(policy, batch.input_ids[sl, : tp + w],
                                               batch.attention_mask[sl, : tp + w], w, cfg.rollout.temperature,
                                               with_entropy=True, lean=self.lean, packed=packed)
            logprobs_before[sl, :w] = logprobs.detach().float()
            old = logprobs.detach() if batch.old_logprobs is None else batch.old_logprobs[sl, :w]
            ref = None if batch.ref_logprobs is None else batch.ref_logprobs[sl, :w]
            isw = None if batch.is_weights is None else batch.is_weights[sl, :w]
            out = policy_loss(LossInputs(logprobs, old, batch.advantages[sl, :w], batch.loss_mask[sl, :w], ref, isw),
                              self.loss_cfg, denominator, n_micro)
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
        for _ in range(iterations):
            stats = self.step(batch)
            if batch.old_logprobs is None:
                batch = dataclasses.replace(batch, old_logprobs=self.last_logprobs)
        return stats

    @torch.no_grad()
    def logprobs(self, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                 completion_len: int) -> Float[Tensor, "B T"]:
        """The policy's no-grad log-probs of a batch, with the learner's forward and micro-batches."""
        return batched_logprobs(self.policy, input_ids, attention_mask, completion_len, self.cfg.rollout.temperature,
                                self.cfg.optim.micro_batch_size or self.cfg.batch_size, self.forward_cost, self.lean)

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
