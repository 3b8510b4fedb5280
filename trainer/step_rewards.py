"""Process supervision on the learner's side: step rewards at character offsets -> the tokens they end at.

A verifier of ``kind: process`` (e.g. ``steps``) returns, per rollout, steps that end at character
offsets of the completion text (``RolloutResult.steps``). The learner needs the index of each step's
last *token* among the completion tokens as they were sampled. Token k's character end is the length
of the text that tokens 0..k decode to; a step ending at offset e ends at the first token whose
character end reaches e (the token that completes the step's last character, which may also hold the
start of the next step: it then belongs to the earlier step).

Character ends come from the tokenizer's offset mapping when re-encoding the text gives back exactly
the sampled tokens (the usual case; tokens holding parts of one character share its span, and only the
last of them completes it), and otherwise from decoding each prefix of the sampled tokens (exact, slower).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cohort.trainer.advantages import Advantages, Reduce, group_advantages, step_advantages, token_advantages

if TYPE_CHECKING:
    from cohort.trainer.advantages import ScaleRewards
    from cohort.trainer.rollout import RolloutBatch
    from cohort.trainer.scoring import Scores


def token_char_ends(tokenizer: Any, ids: Sequence[int], text: str) -> list[int]:
    """For each token of ``ids`` (special tokens allowed), the character end in ``text`` of what tokens
    0..k decode to. ``text`` is ``ids`` decoded with special tokens skipped (what the verifier saw)."""
    special = set(tokenizer.all_special_ids)
    content = [k for k, t in enumerate(ids) if t not in special]
    ends = _offset_ends(tokenizer, [ids[k] for k in content], text)
    if ends is None:
        ends = _prefix_ends(tokenizer, ids, text)
        return _running_max(ends)
    out, it = [0] * len(ids), iter(ends)
    current = 0
    content_set = set(content)
    for k in range(len(ids)):
        if k in content_set:
            current = max(current, next(it))
        out[k] = current  # a special token ends where the text so far ends
    return out


def _offset_ends(tokenizer: Any, ids: list[int], text: str) -> list[int] | None:
    """Character ends from the offset mapping of ``text``, or None when re-encoding gives other tokens."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != list(ids):
        return None
    spans = enc["offset_mapping"]
    ends = []
    for k, (start, end) in enumerate(spans):
        if k + 1 < len(spans) and spans[k + 1][0] < end:  # the next token completes a character of this one
            end = max(start, spans[k + 1][0])
        ends.append(end)
    return _running_max(ends)


def _prefix_ends(tokenizer: Any, ids: Sequence[int], text: str) -> list[int]:
    """Character ends by decoding every prefix: the longest common prefix of each decode with ``text``
    (a character still incomplete decodes to U+FFFD, which does not match)."""
    prefixes = tokenizer.batch_decode([list(ids[: k + 1]) for k in range(len(ids))], skip_special_tokens=True)
    out = []
    for decoded in prefixes:
        n = min(len(decoded), len(text))
        m = 0
        while m < n and decoded[m] == text[m]:
            m += 1
        out.append(m)
    return out


def _running_max(xs: list[int]) -> list[int]:
    out, best = [], 0
    for x in xs:
        best = max(best, x)
        out.append(best)
    return out


def step_token_ends(char_ends: Sequence[int], token_ends: Sequence[int]) -> list[int]:
    """The index of each step's last token: the first token whose character end reaches the step's end."""
    last = max(len(token_ends) - 1, 0)
    return [min(bisect_left(token_ends, e), last) for e in char_ends]


@dataclass(frozen=True)
class StepTensors:
    """A round's steps, S slots per rollout (the most steps of any row); a dataclass so that the shape check
    (tests/conftest.py) holds its three fields to one (P, G, S)."""

    rewards: Float[Tensor, "P G S"]
    ends: Int[Tensor, "P G S"]  # token index of each step's last token (0 in padding slots)
    mask: Bool[Tensor, "P G S"]  # real steps


def step_tensors(steps: Sequence[Sequence[Any]], completion_ids: Int[Tensor, "B T"],
                 completion_mask: Int[Tensor, "B T"], texts: Sequence[str], tokenizer: Any, p: int) -> StepTensors:
    """(P, G, S) tensors of the rows' steps (``StepReward``s at character offsets of ``texts``), with S the
    most steps of any row (at least 1)."""
    b = len(steps)
    s = max([len(x) for x in steps] + [1])
    rewards = torch.zeros(b, s, dtype=torch.float64)
    ends = torch.zeros(b, s, dtype=torch.long)
    mask = torch.zeros(b, s, dtype=torch.bool)
    lengths = completion_mask.sum(dim=1).tolist()  # (B,) tokens up to and including EOS
    for row, row_steps in enumerate(steps):
        if not row_steps:
            continue
        ids = completion_ids[row, : lengths[row]].tolist()
        token_ends = token_char_ends(tokenizer, ids, texts[row])
        k = len(row_steps)
        ends[row, :k] = torch.tensor(step_token_ends([x.end for x in row_steps], token_ends))
        rewards[row, :k] = torch.tensor([x.reward for x in row_steps], dtype=torch.float64)
        mask[row, :k] = True
    g = b // p
    return StepTensors(rewards.view(p, g, s), ends.view(p, g, s), mask.view(p, g, s))


def step_metrics(tensors: StepTensors, valid: Bool[Tensor, "P G"], informative: Bool[Tensor, "P"],
                 reduce: Reduce | None = None) -> dict[str, float]:
    """``steps/per_rollout`` (mean over valid rollouts), ``steps/rewarded_frac`` (share of their steps with a
    positive reward) and ``group/process_informative_frac``; over every rank's rows with ``reduce``."""
    counts = _step_counts(tensors.rewards, tensors.mask, valid, informative)
    n_valid, n_steps, rewarded, n_informative, n_groups = (reduce(counts) if reduce else counts).tolist()
    return {"steps/per_rollout": n_steps / max(n_valid, 1),
            "steps/rewarded_frac": rewarded / n_steps if n_steps else float("nan"),
            "group/process_informative_frac": n_informative / n_groups}


def _step_counts(rewards: Float[Tensor, "P G S"], steps: Bool[Tensor, "P G S"], valid: Bool[Tensor, "P G"],
                 informative: Bool[Tensor, "P"]) -> Float[Tensor, "5"]:
    """Valid rollouts, their steps, the rewarded ones among them, informative groups, groups (the step
    tensors and the validity held to one (P, G) by the shape check)."""
    mask = steps & valid[:, :, None]  # (P, G, S)
    return torch.stack([valid.sum(), mask.sum(), ((rewards > 0) & mask).sum(), informative.sum(),
                        torch.tensor(informative.numel())]).double()


def round_advantages(batch: RolloutBatch, scores: Scores, scale_rewards: ScaleRewards = "group", eps: float = 1e-4,
                     process_weight: float = 0.0, tokenizer: Any = None, reduce: Reduce | None = None
                     ) -> tuple[Advantages, Float[Tensor, "B T"], Bool[Tensor, "B"], dict[str, float]]:
    """A round's outcome advantages (P, G), per-token advantages (B, T), the rows with signal (B,) and the
    step metrics. ``scores.steps`` is set when a verifier has ``kind: process``; ``process_weight`` (its
    ``weight``) scales the process advantage. Without it the per-token advantages are the outcome ones
    broadcast over T. Under torch.distributed, this rank's groups; ``reduce`` (a sum over ranks) makes
    the batch std (``scale_rewards: batch``) and the step metrics the whole round's."""
    adv = group_advantages(scores.rewards, scores.valid, scale_rewards, eps, reduce)
    p, t = scores.rewards.shape[0], batch.completion_ids.shape[1]
    process, stats = None, {}
    if scores.steps is not None:
        if tokenizer is None:
            raise ValueError("process supervision needs the tokenizer (character offsets -> tokens)")
        st = step_tensors(scores.steps, batch.completion_ids, batch.completion_mask, batch.texts, tokenizer, p)
        process = step_advantages(st.rewards, st.ends, st.mask, scores.valid, t, scale_rewards, eps, reduce)
        stats = step_metrics(st, scores.valid, process.informative_groups, reduce)
    tokens = token_advantages(adv, process, scores.valid, t, process_weight)
    return adv, tokens.advantages.reshape(-1, t), tokens.included.flatten(), stats
