"""The LM head in chunks (trainer.forward.head_logprobs): the same log-probs, entropies and gradients as the full
(B, T, V) logits, to 1e-6 in float32, through every path that uses it (the module's forward with the head
answering log-probs, the packed CPU forward)."""

from __future__ import annotations

import pytest
import torch

from cohort.trainer import forward
from cohort.trainer.config import TinyModel
from cohort.trainer.forward import head_logprobs, packed_logprobs, token_logprobs
from cohort.trainer.models import char_tokenizer, tiny_llama


def full_logprobs(model, ids, mask, t, temperature=1.0):
    """Today's reference: every (B, T, V) logit in float32, log-softmax, gather."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -t - 1:-1].float()
    logits = logits / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, ids[:, -t:, None]).squeeze(-1)
    ent = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    valid = mask[:, -t:].bool()
    return torch.where(valid, lp, 0.0), torch.where(valid, ent, 0.0)


def batch(tok, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, len(tok), (6, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # right-padded completions
    mask[4, -5:] = 0
    mask[2, :2] = 0  # a left-padded prompt
    return ids, mask


@pytest.fixture()
def small_chunks(monkeypatch):
    monkeypatch.setattr(forward, "HEAD_CHUNK_ELEMENTS", 19 * 5)  # 5 tokens a chunk: many chunks, one ragged


def grads(model, lp):
    model.zero_grad()
    (lp * torch.linspace(-1, 1, lp.numel()).view_as(lp)).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_head_chunks_equal_full_logits(small_chunks, temperature):
    torch.manual_seed(0)
    h = torch.randn(23, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(19, 16, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 19, (23,))
    lp, ent = head_logprobs(h, w, y, temperature, with_entropy=True)
    logits = h @ w.T / temperature
    want = torch.log_softmax(logits, -1).gather(-1, y[:, None]).squeeze(-1)
    torch.testing.assert_close(lp, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(ent, -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1).detach(),
                               rtol=0, atol=1e-12)
    gh, gw = torch.autograd.grad((lp * torch.arange(23.0, dtype=torch.float64)).sum(), (h, w))
    eh, ew = torch.autograd.grad((want * torch.arange(23.0, dtype=torch.float64)).sum(), (h, w))
    torch.testing.assert_close(gh, eh, rtol=0, atol=1e-12)
    torch.testing.assert_close(gw, ew, rtol=0, atol=1e-12)


@pytest.mark.parametrize("path", ["module", "packed"])
def test_model_log_probs_and_gradients_equal_the_full_logits_path(small_chunks, path):
    tok = char_tokenizer()
    model = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2), tok)
    ids, mask = batch(tok)
    if path == "packed":
        ids[:, :4] = ids[0, :4]  # rows sharing a prompt are packed into one sequence
        mask[:, :4] = 1
    want, want_ent = full_logprobs(model, ids, mask, 6)
    want_grads = grads(model, want)
    fn = token_logprobs if path == "module" else packed_logprobs
    lp, ent = fn(model, ids, mask, 6, with_entropy=True)
    torch.testing.assert_close(lp, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(ent, want_ent.detach(), rtol=0, atol=1e-5)
    for got, exp in zip(grads(model, lp), want_grads):
        torch.testing.assert_close(got, exp, rtol=0, atol=1e-6)


def test_the_head_still_answers_logits_outside_a_request():
    """Generation and any other caller get the head's logits: the chunked answer is only for token_logprobs."""
    tok = char_tokenizer()
    model = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2), tok)
    ids, mask = batch(tok)
    before = model(input_ids=ids).logits
    token_logprobs(model, ids, mask, 6)  # installs the chunked head
    torch.testing.assert_close(model(input_ids=ids).logits, before, rtol=0, atol=0)
    import copy

    twin = copy.deepcopy(model)  # a frozen reference: its own head, its own weights
    with torch.no_grad():
        twin.lm_head.weight.add_(torch.randn_like(twin.lm_head.weight))
    a, _ = token_logprobs(model, ids, mask, 6)
    b, _ = token_logprobs(twin, ids, mask, 6)
    assert not torch.allclose(a, b)
    torch.testing.assert_close(b, full_logprobs(twin, ids, mask, 6)[0], rtol=1e-6, atol=1e-6)


def test_the_forward_shapes_are_checked_at_run_time():
    """tests/conftest.py's jaxtyping hook covers the forward too (as collect, the learner and the reference):
    hidden states (N, D) against a head weight (V, D') are refused before any matmul."""
    with pytest.raises(TypeError, match="weight"):
        head_logprobs(torch.zeros(4, 8), torch.zeros(16, 9), torch.zeros(4, dtype=torch.long), 1.0, False)
