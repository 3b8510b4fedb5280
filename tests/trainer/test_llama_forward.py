"""The lean Llama forward (packed rows, ``trainer.packing``) divides by the temperature as the module does,
and serves only plain Llama without dropout. Its log-probs, entropies and gradients against the module:
``tests/trainer/test_packing.py``."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cohort.trainer import llama_forward
from cohort.trainer.forward import packed_logprobs, token_logprobs


def model(kv_heads: int, seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=19, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, max_position_embeddings=64, tie_word_embeddings=False,
                      pad_token_id=0)  # the embedding's padding_idx: its row gets no gradient
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for p in m.parameters():  # a non-trivial function (random init is nearly uniform)
            p.add_(torch.randn_like(p) * 0.2)
    return m


def batch():
    """Left-padded prompts of 3-5 tokens, right-padded completions of 1-4 tokens (width 4); pad id 0."""
    g = torch.Generator().manual_seed(1)
    prompts, comps = [5, 3, 4, 5], [4, 1, 2, 3]
    ids = torch.randint(4, 19, (4, 9), generator=g)
    mask = torch.zeros(4, 9, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        mask[i, 5 - p : 5 + c] = 1
    ids = ids.masked_fill(mask == 0, 0)
    ids[0, 6] = 0  # a sampled pad token inside a completion: attended, but its embedding row gets no gradient
    return ids, mask


def test_temperature_divides_the_logits_in_both_paths():
    m = model(4)
    ids, mask = batch()
    real = mask[:, -4:].bool()
    with torch.no_grad():
        hot, _ = packed_logprobs(m, ids, mask, 4, temperature=0.7)
        hf, _ = token_logprobs(m, ids, mask, 4, temperature=0.7)
        plain, _ = packed_logprobs(m, ids, mask, 4)
    assert torch.allclose(hot[real], hf[real], atol=1e-5)
    assert not torch.allclose(hot[real], plain[real], atol=1e-3)


def test_only_plain_llama_without_dropout_is_supported():
    m = model(4)
    m.config.attention_dropout = 0.1
    assert not llama_forward.supports(m)
    wrapped = torch.nn.Sequential(model(4))
    assert not llama_forward.supports(wrapped)
