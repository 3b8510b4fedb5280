"""Prompt-shared packing: the packed forward gives every completion token the log-prob, entropy and
gradient of its own unpacked row (transformers module as the reference), whatever the row order,
prompt padding and completion lengths; micro-batches keep prompt groups whole."""

from __future__ import annotations

import itertools

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cohort.trainer.forward import (LLAMA_CPU, MODULE, batched_logprobs, cheapest_runs, packed_logprobs, prompt_buckets,
                                    token_logprobs)
from cohort.trainer.packing import pack, prompt_groups


def model(seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=19, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return m


def batch():
    """Two prompts (4 and 2 real tokens, left-padded to 4), three completions each, interleaved rows,
    completion lengths 1..5 of width 5 (one row uses the pad token as a sampled token)."""
    g = torch.Generator().manual_seed(3)
    prompts = {0: [7, 8, 9, 17], 1: [5, 17]}
    rows = [(0, 5), (1, 2), (0, 1), (1, 5), (1, 3), (0, 4)]  # (prompt, completion length)
    ids, mask = [], []
    for p, n in rows:
        prompt = prompts[p]
        comp = torch.randint(4, 19, (n,), generator=g).tolist()
        ids.append([0] * (4 - len(prompt)) + prompt + comp + [0] * (5 - n))
        mask.append([0] * (4 - len(prompt)) + [1] * (len(prompt) + n) + [0] * (5 - n))
    ids[3][6] = 0  # a sampled pad token inside a completion
    return torch.tensor(ids), torch.tensor(mask)


def test_groups_follow_identical_prompts():
    ids, mask = batch()
    assert prompt_groups(ids, mask, 5) == [[0, 2, 5], [1, 3, 4]]
    pk = pack(ids, mask, 5)
    assert pk.input_ids.shape == (2, 4 + 5 + 1 + 4)  # prompt + completions, the longer group sets the width
    assert pk.position_ids[1, :10].tolist() == [0, 1, 2, 3, 2, 3, 4, 5, 6, 2]  # restart after the prompt
    assert pk.valid.sum(1).tolist() == [5, 2, 1, 5, 3, 4]


def test_packed_logprobs_and_gradients_equal_the_unpacked_rows():
    m = model()
    ids, mask = batch()
    valid = mask[:, -5:].bool()
    lp_ref, ent_ref = token_logprobs(m, ids, mask, 5, with_entropy=True)  # transformers, one row each
    weights = torch.randn(6, 5, generator=torch.Generator().manual_seed(0)) * valid
    grads_ref = torch.autograd.grad((lp_ref * weights).sum(), list(m.parameters()))
    lp, ent = packed_logprobs(m, ids, mask, 5, with_entropy=True)
    grads = torch.autograd.grad((lp * weights).sum(), list(m.parameters()))
    assert torch.allclose(lp[valid], lp_ref[valid], atol=1e-5)
    assert torch.allclose(ent[valid], ent_ref[valid], atol=1e-5)
    assert (lp[~valid] == 0).all() and (ent[~valid] == 0).all()
    for (name, _), a, b in zip(m.named_parameters(), grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), name


def test_packed_batched_logprobs_equal_the_module():
    m = model(1)
    ids, mask = batch()
    valid = mask[:, -5:].bool()
    with torch.no_grad():
        want, _ = token_logprobs(m, ids, mask, 5)
    for micro, cost in ((6, 160), (3, 1), (2, 0)):
        got = batched_logprobs(m, ids, mask, 5, 1.0, micro, cost, forward=LLAMA_CPU)
        assert torch.allclose(got[valid], want[valid], atol=1e-5), (micro, cost)


def test_prompt_buckets_keep_groups_whole_and_respect_the_row_cap():
    ids, mask = batch()
    for cap, cost in ((6, 1000), (3, 1000), (3, 1), (1, 1)):
        buckets = prompt_buckets(ids, mask, 5, cap, cost)
        rows = sorted(r for idx, _ in buckets for r in idx.tolist())
        assert rows == list(range(6))
        for idx, width in buckets:
            members = set(idx.tolist())
            assert members in ({0, 2, 5}, {1, 3, 4}, {0, 1, 2, 3, 4, 5})  # whole groups only
            assert len(members) <= max(cap, 3)  # a group larger than the cap goes alone
            assert width == int(mask[idx, -5:].sum(1).max())
    assert len(prompt_buckets(ids, mask, 5, 6, 1000)) == 1  # forwards dear: one micro-batch
    assert len(prompt_buckets(ids, mask, 5, 6, 1)) == 2  # forwards cheap: one per prompt


def test_cheapest_runs_against_brute_force_with_sizes():
    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        n = int(torch.randint(1, 8, (1,), generator=g))
        widths = sorted(torch.randint(1, 40, (n,), generator=g).tolist(), reverse=True)
        sizes = torch.randint(1, 5, (n,), generator=g).tolist()
        cap, cost = int(torch.randint(1, 10, (1,), generator=g)), int(torch.randint(1, 100, (1,), generator=g))
        runs = cheapest_runs(widths, sizes, cap, cost)
        assert [a for a, _ in runs] == [0] + [b for _, b in runs[:-1]] and runs[-1][1] == n

        def ok(a, b):
            return b - a == 1 or sum(sizes[a:b]) <= cap

        def price(bounds):
            return sum(cost + (b - a) * widths[a] for a, b in bounds)

        assert all(ok(a, b) for a, b in runs)
        best = min(price(list(zip((0, *cuts), (*cuts, n)))) for k in range(n)
                   for cuts in itertools.combinations(range(1, n), k)
                   if all(ok(a, b) for a, b in zip((0, *cuts), (*cuts, n))))
        assert price(runs) == best


def test_long_groups_are_not_packed():
    """A group whose packed sequence would pass MAX_PACKED_TOKENS runs row by row (dense tree masks grow
    with the square of the length); shorter ones pack."""
    from cohort.trainer.packing import MAX_PACKED_TOKENS

    rows, width = 24, 30
    ids = torch.randint(4, 19, (rows, 2 + width), generator=torch.Generator().manual_seed(0))
    ids[:, :2] = torch.tensor([5, 17])  # one prompt, 24 completions of 30 tokens: 722 packed tokens
    mask = torch.ones_like(ids)
    assert 2 + rows * width > MAX_PACKED_TOKENS
    buckets, run = LLAMA_CPU.plan(ids, mask, width, 8, 160)
    assert run is not packed_logprobs and all(len(idx) <= 8 for idx, _ in buckets)
    _, run = LLAMA_CPU.plan(ids[:8], mask[:8], width, 8, 160)  # 242 tokens
    assert run is packed_logprobs
    _, run = MODULE.plan(ids[:8], mask[:8], width, 8, 160)  # transformers module: never packed
    assert run is not packed_logprobs
