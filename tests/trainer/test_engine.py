"""The transformers rollout engine: the lean Llama sampler agrees with the transformers forward,
completions are cut after the first EOS, truncation is reported, sampling is seeded."""

from __future__ import annotations

import torch

from cohort.trainer.config import RolloutSection, TinyModel
from cohort.trainer.engines import llama_decode
from cohort.trainer.engines.hf import TransformersEngine
from cohort.trainer.learner import token_logprobs
from cohort.trainer.models import char_tokenizer, tiny_llama
from cohort.trainer.rollout import build_engine


def tiny(seed=0):
    tok = char_tokenizer()
    model = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 init_seed=seed), tok)
    return model.eval(), tok


def test_lean_decoder_matches_transformers_forward():
    model, tok = tiny()
    with torch.no_grad():
        for p in model.parameters():  # a non-trivial function (random init is nearly uniform)
            p.add_(torch.randn_like(p) * 0.2)
    prompts = [tok("12+3=")["input_ids"], tok("4+4=")["input_ids"]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    cont = torch.tensor([[5, 9, 6], [7, 1, 8]])
    assert llama_decode.supports(model)
    with torch.no_grad():
        dec = llama_decode.LlamaDecoder(model, 2, width + 3)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        lean = [dec.forward(ids, positions, mask)]
        pos = positions[:, -1:] + 1
        for j in range(2):
            lean.append(dec.forward(cont[:, j : j + 1], pos, torch.ones_like(pos)))
            pos = pos + 1
        full_ids = torch.cat([ids, cont], 1)
        full_mask = torch.cat([mask, torch.ones_like(cont)], 1)
        hf = model(input_ids=full_ids, attention_mask=full_mask,
                   position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0)).logits
    for j, logits in enumerate(lean):
        assert torch.allclose(logits, hf[:, width - 1 + j], atol=1e-5), j


def test_prompt_prefilled_once_then_copied_to_its_rows_equals_prefilling_every_row():
    """generate() prefills each prompt once and copies its cache to its G rows (``keep`` with repeated
    indices): the decode logits must equal those of a decoder that prefilled every row itself."""
    model, tok = tiny()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    prompts = [tok("12+3=")["input_ids"], tok("4+4=")["input_ids"]]
    width, g = max(map(len, prompts)), 3
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # (P, Tp) left padding
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cont = torch.randint(4, len(tok), (2 * g, 3), generator=torch.Generator().manual_seed(0))  # (B, 3)
    cont[1, 0] = 4 if cont[0, 0] != 4 else 5  # rows 0 and 1 (one prompt) take different first tokens
    with torch.no_grad():
        shared = llama_decode.LlamaDecoder(model, 2, width + 3)
        first_shared = shared.forward(ids, positions, mask).repeat_interleave(g, 0)
        shared.keep(torch.arange(2).repeat_interleave(g))
        every = llama_decode.LlamaDecoder(model, 2 * g, width + 3)
        first_every = every.forward(ids.repeat_interleave(g, 0), positions.repeat_interleave(g, 0),
                                    mask.repeat_interleave(g, 0))
        assert torch.allclose(first_shared, first_every, atol=1e-6)
        pos = positions[:, -1:].repeat_interleave(g, 0) + 1
        for j in range(3):
            a = shared.forward(cont[:, j : j + 1], pos, torch.ones_like(pos))
            b = every.forward(cont[:, j : j + 1], pos, torch.ones_like(pos))
            assert torch.allclose(a, b, atol=1e-6), j
            assert not torch.allclose(a[0], a[1], atol=1e-3)  # rows of one prompt diverge once their tokens do
            pos = pos + 1


def test_generate_cuts_after_eos_and_reports_truncation():
    model, tok = tiny()
    engine = build_engine(RolloutSection(max_completion_length=6), model, tok, seed=3)
    batch = engine.generate([tok("1+2=")["input_ids"], tok("33+4=")["input_ids"]], 8)
    assert batch.completion_ids.shape == (16, 6)
    assert batch.prompt_ids.shape == (16, 5)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    for i in range(16):
        row, m = batch.completion_ids[i].tolist(), batch.completion_mask[i].tolist()
        n = sum(m)
        assert m == [1] * n + [0] * (6 - n)
        if eos in row[:n]:
            assert row.index(eos) == n - 1 and not batch.truncated[i]
            assert all(t == pad for t in row[n:])
        else:
            assert n == 6 and batch.truncated[i]
        assert batch.texts[i] == tok.decode(row[:n], skip_special_tokens=True)
    assert batch.prompt_mask[8:].all() and batch.prompt_mask[:8, 0].sum() == 0  # left padding


def test_sampling_is_seeded_and_state_restores():
    model, tok = tiny()
    prompts = [tok("1+2=")["input_ids"]]
    a = TransformersEngine(RolloutSection(max_completion_length=5), model, tok, seed=7)
    b = TransformersEngine(RolloutSection(max_completion_length=5), model, tok, seed=7)
    assert a.generate(prompts, 4).texts == b.generate(prompts, 4).texts
    state = a.state_dict()
    first = a.generate(prompts, 4).texts
    a.load_state_dict(state)
    assert a.generate(prompts, 4).texts == first
    a.load_state_dict({"generator": state["generator"]})  # a checkpoint from before the device was saved: a CPU one
    assert a.generate(prompts, 4).texts == first


def test_a_sampling_state_from_another_device_reseeds_from_it(caplog):
    """A GPU run resumed on the CPU: the CUDA generator's state (16 bytes) cannot enter a CPU generator (it
    raised RuntimeError in set_state); the engine reseeds from it, deterministically, with one warning."""
    model, tok = tiny()
    prompts = [tok("1+2=")["input_ids"]]
    engine = TransformersEngine(RolloutSection(max_completion_length=5), model, tok, seed=7)
    gpu_state = {"generator": torch.arange(16, dtype=torch.uint8), "device": "cuda"}
    engine.load_state_dict(gpu_state)
    assert "a cuda generator's; this run samples on cpu: reseeded" in caplog.text
    first = engine.generate(prompts, 8).texts
    engine.load_state_dict(gpu_state)
    assert engine.generate(prompts, 8).texts == first  # the same checkpoint, the same samples
    engine.load_state_dict({"generator": torch.ones(16, dtype=torch.uint8), "device": "cuda"})
    assert engine.generate(prompts, 8).texts != first  # another checkpoint, another stream


def test_sampled_frequencies_follow_the_policy():
    """One-token completions: empirical frequencies match softmax of the transformers logits."""
    model, tok = tiny(seed=1)
    with torch.no_grad():
        model.lm_head.weight.mul_(60.0)  # a peaked distribution over the vocabulary
    prompt = tok("2+2=")["input_ids"]
    engine = TransformersEngine(RolloutSection(max_completion_length=1), model, tok, seed=0)
    batch = engine.generate([prompt], 4000)
    counts = torch.bincount(batch.completion_ids[:, 0], minlength=len(tok)).double() / 4000
    ids = torch.tensor([prompt])
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits[0, -1].double(), -1)
    assert (counts - probs).abs().max() < 0.03


def test_learner_logprobs_score_the_sampled_tokens():
    model, tok = tiny()
    engine = TransformersEngine(RolloutSection(max_completion_length=4), model, tok, seed=0)
    batch = engine.generate([tok("1+1=")["input_ids"], tok("12+1=")["input_ids"]], 3)
    lp, ent = token_logprobs(model, batch.input_ids, batch.attention_mask, 4, with_entropy=True)
    assert lp.shape == (6, 4) and (lp <= 0).all() and (ent >= 0).all()
    # the sampled rows' log-probs equal a per-row recompute without padding
    for i in range(6):
        n_prompt = int(batch.prompt_mask[i].sum())
        ids = torch.cat([batch.prompt_ids[i, -n_prompt:], batch.completion_ids[i]])[None]
        single, _ = token_logprobs(model, ids, torch.ones_like(ids), 4)
        m = batch.completion_mask[i].bool()
        assert torch.allclose(single[0][m], lp[i][m], atol=1e-5)
