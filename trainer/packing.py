"""Prompt-shared packing for the log-prob forwards: one row per prompt, its completions side by side.

A GRPO batch holds G completions of each prompt. Forwarded as B rows of [prompt | completion | pad],
every row recomputes its prompt and pays for padding up to the micro-batch's longest completion.
Packed, the rows of one prompt become a single sequence

    [prompt | completion_1 | completion_2 | ... ]

with a tree-shaped attention pattern: each completion token sees the prompt and the earlier tokens of
its own completion, nothing else; positions restart after the prompt for every completion. Each
completion token therefore sees exactly the keys, values and positions it has in its own row: the
same log-probs, the same gradients (the shared prompt collects the sum of its rows' gradients), with
the prompt computed once per group and no padding except at the end of a packed row.
Rows are grouped by identical prompts (tokens and left padding), so any subset of a batch packs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Int
from torch import Tensor


@dataclass
class Packed:
    input_ids: Int[Tensor, "R N"]  # one packed sequence per distinct prompt, right-padded
    position_ids: Int[Tensor, "R N"]
    attend: Bool[Tensor, "R N N"]  # query i sees key j
    source: Int[Tensor, "B T"]  # flat index (r * N + n) of the position whose logits predict token t of row b
    targets: Int[Tensor, "B T"]  # the completion tokens (pad where not valid)
    valid: Bool[Tensor, "B T"]  # t < completion length of row b


def prompt_groups(input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                  completion_len: int) -> list[list[int]]:
    """Rows sharing the same prompt (tokens under the mask, and the same padding), in order of first appearance."""
    tp = input_ids.shape[1] - completion_len
    keys = (input_ids[:, :tp] * attention_mask[:, :tp] - (1 - attention_mask[:, :tp])).tolist()  # pad -> -1
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(tuple(key), []).append(i)
    return list(groups.values())


MAX_PACKED_TOKENS = 512
"""Pack only while every packed sequence stays this short: the tree mask is dense, so attention work and
mask memory grow with the square of a packed sequence's length; longer groups run row by row."""


def packed_lengths(input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"],
                   completion_len: int) -> tuple[list[list[int]], list[int]]:
    """The prompt groups and each one's packed length (its prompt once plus all its completions)."""
    tp = input_ids.shape[1] - completion_len
    groups = prompt_groups(input_ids, attention_mask, completion_len)
    prompt_real = attention_mask[:, :tp].sum(1).tolist()
    comp = attention_mask[:, tp:].sum(1).tolist()
    return groups, [prompt_real[g[0]] + sum(comp[i] for i in g) for g in groups]


def pack(input_ids: Int[Tensor, "B L"], attention_mask: Int[Tensor, "B L"], completion_len: int,
         pad_id: int = 0) -> Packed:
    """Pack rows [left-padded prompt | right-padded completion] by prompt (see the module docstring)."""
    b = input_ids.shape[0]
    tp, t = input_ids.shape[1] - completion_len, completion_len
    ids = input_ids.tolist()
    prompt_real = attention_mask[:, :tp].sum(1).tolist()
    comp_len = attention_mask[:, tp:].sum(1).tolist()
    rows_tokens, rows_pos, rows_seg = [], [], []
    source = [[0] * t for _ in range(b)]
    for r, group in enumerate(prompt_groups(input_ids, attention_mask, completion_len)):
        p = prompt_real[group[0]]
        tokens, pos, seg = ids[group[0]][tp - p : tp], list(range(p)), [0] * p
        for k, i in enumerate(group):
            n = comp_len[i]
            start = len(tokens)
            for j in range(n):  # token j is predicted at the previous position: the prompt's last, or j-1's
                source[i][j] = (r, p - 1 if j == 0 else start + j - 1)
            tokens += ids[i][tp : tp + n]
            pos += range(p, p + n)
            seg += [k + 1] * n
        rows_tokens.append(tokens)
        rows_pos.append(pos)
        rows_seg.append(seg)
    width = max(map(len, rows_tokens))
    packed_ids = torch.tensor([x + [pad_id] * (width - len(x)) for x in rows_tokens])
    positions = torch.tensor([x + [0] * (width - len(x)) for x in rows_pos])
    seg = torch.tensor([x + [-1] * (width - len(x)) for x in rows_seg])  # (R, N) 0 prompt, k completion, -1 pad
    at = torch.arange(width)
    causal = at[None, :] <= at[:, None]  # (N, N) [query, key]
    key_seg, query_seg = seg[:, None, :], seg[:, :, None]
    attend = causal[None] & (key_seg >= 0) & ((key_seg == 0) | (key_seg == query_seg))  # (R, N, N)
    valid = torch.arange(t)[None, :] < torch.tensor(comp_len)[:, None]  # (B, T)
    flat = torch.tensor([[0 if s == 0 else s[0] * width + s[1] for s in row] for row in source])  # (B, T)
    targets = input_ids[:, tp:].masked_fill(~valid, pad_id)
    return Packed(packed_ids.to(input_ids.device), positions.to(input_ids.device), attend.to(input_ids.device),
                  flat.to(input_ids.device), targets, valid.to(input_ids.device))
