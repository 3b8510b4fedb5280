"""How the learner computes log-probs: one back-end per model, chosen once at start-up (:func:`choose`).

Every back-end computes the same function: log pi(token) of the last T positions and, on request,
the per-token entropy, exactly 0 past each completion's end (so no term of the loss there can
overflow), with position ids that follow the attention mask (left padding), as in the rollout
engine. They differ only in how they get the logits and cut a batch into micro-batches:

- :data:`MODULE`: the transformers module's forward (any architecture; DDP and FSDP2 need it), rows
  cut into micro-batches by completion length (:func:`length_buckets`).
- :data:`LLAMA_CPU`: a plain Llama on the CPU in one process (``llama_forward.supports``): the rows
  of one prompt packed into one sequence (``trainer/packing.py``) through ``trainer/llama_forward.py``
  (a forward that takes the tree attention pattern) and, when forwards have a price
  (``forward_cost > 0``), micro-batches of whole prompt groups (:func:`prompt_buckets`). A batch whose
  packed sequences would pass ``packing.MAX_PACKED_TOKENS`` runs unpacked through the module, as
  :data:`MODULE` does (a lean unpacked forward bought under 10% there: ``bench/fast_paths.py``).

A back-end's :meth:`~Forward.plan` returns the micro-batches and the log-prob function to run on each,
so the learner never branches on which one it has. Equivalence test against the module:
``tests/trainer/test_packing.py`` (packed).
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cohort.trainer import llama_forward
from cohort.trainer.config import OptimSection
from cohort.trainer.distributed import Comm
from cohort.trainer.llama_forward import hidden_with_pattern
from cohort.trainer.packing import MAX_PACKED_TOKENS, pack, packed_lengths
from cohort.trainer.precision import FLOAT32, Precision

LogProbsFn = Callable[..., tuple[Float[Tensor, "B T"], Float[Tensor, "B T"] | None]]
"""(model, input_ids, attention_mask, completion_len, temperature=1.0, with_entropy=False) -> (log-probs, entropy)."""
MicroBatches = list[tuple[Int[Tensor, "b"], int]]
"""(row indices, completion width to keep) per micro-batch."""


HEAD_CHUNK_ELEMENTS = 1 << 26
"""Logits computed at once through the LM head: at most this many (64 Mi: 256 MB in float32), so a micro-batch
never holds (B, T, V) logits; 441 tokens a chunk for a 151,936-token vocabulary."""


def _head_chunk(hidden: Float[Tensor, "n D"], weight: Float[Tensor, "V D"], targets: Int[Tensor, "n"],
                temperature: float, with_entropy: bool) -> tuple[Float[Tensor, "n"], Float[Tensor, "n"]]:
    logits = F.linear(hidden, weight)  # (n, V); a bf16 matmul under autocast
    logits = logits.float() if logits.element_size() < 4 else logits  # the softmax in float32 (or wider)
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # (n,)
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - logz  # (n,)
    if not with_entropy:
        return logprobs, torch.zeros_like(logz.detach())
    with torch.no_grad():
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # (n,): log Z - E_p[logit]
    return logprobs, entropy


def head_logprobs(hidden: Float[Tensor, "N D"], weight: Float[Tensor, "V D"], targets: Int[Tensor, "N"],
                  temperature: float = 1.0, with_entropy: bool = False
                  ) -> tuple[Float[Tensor, "N"], Float[Tensor, "N"] | None]:
    """log pi(target) of each hidden state through the LM head ``weight`` (and the no-grad entropy), in chunks of
    :data:`HEAD_CHUNK_ELEMENTS` logits: under autograd each chunk keeps only its inputs and recomputes its logits
    in the backward pass, so neither the float32 logits nor their gradient ever exist for more than one chunk.
    The same values and gradients as ``log_softmax(hidden @ weight.T)`` (tests/trainer/test_head.py)."""
    chunk = max(1, HEAD_CHUNK_ELEMENTS // weight.shape[0])
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    logprobs, entropies = [], []
    for h, y in zip(hidden.split(chunk), targets.split(chunk)):
        if grad:
            lp, ent = torch.utils.checkpoint.checkpoint(_head_chunk, h, weight, y, temperature, with_entropy,
                                                        use_reentrant=False)
        else:
            lp, ent = _head_chunk(h, weight, y, temperature, with_entropy)
        logprobs.append(lp)
        entropies.append(ent)
    if not logprobs:  # no valid position
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    return torch.cat(logprobs), (torch.cat(entropies) if with_entropy else None)


def _scatter(values: Float[Tensor, "N"] | None, valid: Bool[Tensor, "B T"]) -> Float[Tensor, "B T"] | None:
    """Values of the valid positions back in place, 0 elsewhere (differentiable)."""
    if values is None:
        return None
    return torch.zeros(valid.shape, dtype=values.dtype, device=valid.device).masked_scatter(valid, values)


@dataclass(frozen=True)
class _HeadRequest:
    targets: Int[Tensor, "B T"]
    valid: Bool[Tensor, "B T"]
    temperature: float
    with_entropy: bool


_HEAD_REQUEST: contextvars.ContextVar[_HeadRequest | None] = contextvars.ContextVar("cohort_head_request", default=None)


def _head_forward(head: torch.nn.Module, hidden: Float[Tensor, "B T1 D"]) -> Tensor:
    """The LM head's forward while it is chunked (:func:`_chunked_head`): log-probs and entropies (B, T+1, 2) for a
    pending :class:`_HeadRequest`, else the module's own logits."""
    req = _HEAD_REQUEST.get()
    if req is None:
        return type(head).forward(head, hidden)
    h = hidden[:, :-1]  # (B, T, D): the positions that predict the completion's tokens
    lp, ent = head_logprobs(h[req.valid], head.weight, req.targets[req.valid], req.temperature, req.with_entropy)
    ent = _scatter(ent, req.valid) if ent is not None else torch.zeros(req.valid.shape, device=req.valid.device)
    out = torch.stack([_scatter(lp, req.valid), ent], dim=-1)  # (B, T, 2)
    return F.pad(out, (0, 0, 0, 1))  # (B, T+1, 2): the "logits" of the T+1 positions the model keeps


def _chunked_head(model: torch.nn.Module) -> bool:
    """Make the model's LM head answer log-probs instead of logits while a :class:`_HeadRequest` is set (in this
    thread's context; every other call gets logits as before). The log-probs are computed inside the model's own
    forward, so DDP's and FSDP2's hooks see them as its output. A bound method, so a deep copy of the model (the
    frozen reference) binds to its own head. False for a model whose logits change after the head (soft-capping,
    or a LoRA-adapted head), which keeps the full-logits path."""
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    head = inner.get_output_embeddings()
    if head is None or getattr(getattr(inner, "config", None), "final_logit_softcapping", None):
        return False
    if "forward" in vars(head):
        return getattr(vars(head)["forward"], "__func__", None) is _head_forward
    if type(head).forward is not torch.nn.Linear.forward:  # e.g. peft's LoRA layer, a quantised head
        return False
    head.forward = types.MethodType(_head_forward, head)
    return True


def token_logprobs(model: torch.nn.Module, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                   completion_len: int, temperature: float = 1.0, with_entropy: bool = False
                   ) -> tuple[Float[Tensor, "B T"], Float[Tensor, "B T"] | None]:
    """The transformers module's log-probs of the last ``completion_len`` positions (and entropies), through the
    LM head in chunks (:func:`head_logprobs`)."""
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    targets = input_ids[:, -completion_len:]  # (B, T)
    valid = attention_mask[:, -completion_len:].bool()  # (B, T): completions are right-padded
    if _chunked_head(model):
        token = _HEAD_REQUEST.set(_HeadRequest(targets, valid, temperature, with_entropy))
        try:
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                        logits_to_keep=completion_len + 1, use_cache=False).logits  # (B, T+1, 2)
        finally:
            _HEAD_REQUEST.reset(token)
        return out[:, :-1, 0], (out[:, :-1, 1].detach() if with_entropy else None)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                   logits_to_keep=completion_len + 1, use_cache=False).logits  # (B, T+1, V)
    return _from_logits(logits[:, :-1], targets, valid, temperature, with_entropy)


def _from_logits(logits: Float[Tensor, "B T V"], targets: Int[Tensor, "B T"], valid: Tensor, temperature: float,
                 with_entropy: bool) -> tuple[Float[Tensor, "B T"], Float[Tensor, "B T"] | None]:
    """The full-logits path (a head whose logits change after it: soft-capping, a LoRA-adapted head): float32
    (B, T, V) logits at once."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # (B, T)
    logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - logz  # (B, T)
    logprobs = torch.where(valid, logprobs, torch.zeros_like(logprobs))
    entropy = None
    if with_entropy:
        with torch.no_grad():  # row by row: two (T, V) temporaries instead of two (B, T, V)
            mean_logit = torch.zeros(logz.shape, dtype=logits.dtype, device=logits.device)  # (B, T): E_p[logit]
            for b, row in enumerate(logits.detach()):
                mean_logit[b] = (torch.softmax(row, dim=-1) * row).sum(-1)
            entropy = torch.where(valid, logz.detach() - mean_logit, torch.zeros_like(mean_logit))  # (B, T)
    return logprobs, entropy


def packed_logprobs(model: torch.nn.Module, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                    completion_len: int, temperature: float = 1.0, with_entropy: bool = False, checkpoint: bool = False
                    ) -> tuple[Float[Tensor, "B T"], Float[Tensor, "B T"] | None]:
    """:func:`token_logprobs` with the rows sharing a prompt forwarded as one sequence (``trainer.packing``)
    through ``llama_forward`` (a plain Llama on the CPU)."""
    pk = pack(input_ids, attention_mask, completion_len)
    # (B, T, D): only the hidden states that predict a completion token, not those of prompts or packing
    hidden = hidden_with_pattern(model, pk.input_ids, pk.position_ids, pk.attend, checkpoint, pk.source)
    lp, ent = head_logprobs(hidden[pk.valid], model.lm_head.weight, pk.targets[pk.valid], temperature, with_entropy)
    return _scatter(lp, pk.valid), _scatter(ent, pk.valid)


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


class Forward:
    """The transformers module's forward, rows cut by completion length (any model, any world size), in
    ``precision`` (autocast to bf16 over float32 masters with ``model.dtype: bfloat16``)."""

    name = "module"

    def __init__(self, precision: Precision = FLOAT32):
        self.precision = precision

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context every forward of this back-end runs in (the backward runs outside it)."""
        return self.precision.autocast()

    def plan(self, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"], completion_len: int,
             micro_batch: int, forward_cost: int) -> tuple[MicroBatches, LogProbsFn]:
        """The micro-batches of a batch (at most ``micro_batch`` rows each; see :func:`length_buckets`) and
        the function that computes each one's log-probs."""
        tp = input_ids.shape[1] - completion_len
        lengths = completion_lengths(attention_mask, completion_len)
        return length_buckets(lengths, micro_batch, tp, forward_cost), token_logprobs


class LlamaCPUForward(Forward):
    """A plain Llama on the CPU in one process: rows packed by prompt (module docstring).
    ``checkpoint``: recompute each decoder layer in the backward pass instead of keeping its activations."""

    name = "llama_cpu"

    def __init__(self, checkpoint: bool = False, precision: Precision = FLOAT32):
        super().__init__(precision)
        self.checkpoint = checkpoint

    def plan(self, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"], completion_len: int,
             micro_batch: int, forward_cost: int) -> tuple[MicroBatches, LogProbsFn]:
        by_length, unpacked = super().plan(input_ids, attention_mask, completion_len, micro_batch, forward_cost)
        if max(packed_lengths(input_ids, attention_mask, completion_len)[1], default=0) > MAX_PACKED_TOKENS:
            return by_length, unpacked  # dense tree masks grow with the square of the packed length
        packed = partial(packed_logprobs, checkpoint=True) if self.checkpoint else packed_logprobs
        if forward_cost > 0:
            return prompt_buckets(input_ids, attention_mask, completion_len, micro_batch, forward_cost), packed
        return by_length, packed


MODULE, LLAMA_CPU = Forward(), LlamaCPUForward()


def choose(model: torch.nn.Module, comm: Comm, checkpoint: bool = False, precision: Precision = FLOAT32) -> Forward:
    """The back-end for ``model``: the CPU fast path for a plain Llama in one process, else the module's.
    ``checkpoint`` (activation checkpointing: each decoder layer recomputed in the backward pass): the fast
    path's own for packed rows, and transformers' on the module for everything the module runs."""
    if checkpoint:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x names it so
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not comm.distributed and llama_forward.supports(model):
        return LlamaCPUForward(checkpoint, precision)
    return Forward(precision)


def micro_batch(optim: OptimSection, width: int, rows: int) -> int:
    """Rows per forward/backward: ``optim.micro_batch_size``, or as many rows of ``width`` tokens (prompt plus
    completion) as ``optim.micro_batch_tokens`` holds, at least 1 and at most ``rows``."""
    if optim.micro_batch_size:
        return optim.micro_batch_size
    return max(1, min(max(rows, 1), optim.micro_batch_tokens // max(width, 1)))


@torch.no_grad()
def batched_logprobs(model: torch.nn.Module, input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                     completion_len: int, temperature: float, micro_batch: int, forward_cost: int = 0,
                     forward: Forward = MODULE) -> Float[Tensor, "B T"]:
    """No-grad log-probs (B, T) in ``forward``'s micro-batches, 0 past each completion's end; on the CPU, where
    the rows are, whatever the model's device."""
    tp = input_ids.shape[1] - completion_len
    out = torch.zeros(input_ids.shape[0], completion_len)
    device = next(model.parameters()).device
    buckets, logprobs_of = forward.plan(input_ids, attention_mask, completion_len, micro_batch, forward_cost)
    for idx, width in buckets:
        with forward.autocast():
            lp, _ = logprobs_of(model, input_ids[idx, : tp + width].to(device),
                                attention_mask[idx, : tp + width].to(device), width, temperature)
        out[idx, :width] = lp.float().cpu()
    return out
