"""A tiny Llama taught to call the `python` tool (shared by the multi-turn tests of both engines).

A real model, not a script: a few hundred supervised steps on one transcript. Asked ``Q:``, it writes a
fenced ``python`` block (CALL), and after the tool's output block (RESULT, written by the trainer) it
answers ``A42`` and stops.
"""

from __future__ import annotations

import string

import torch

from cohort.tools.base import CallResult
from cohort.tools.calls import render
from cohort.trainer.config import TinyModel
from cohort.trainer.models import char_tokenizer, tiny_llama

CALL = "```python\nprint(6*7)\n```"
RESULT = render(CallResult(True, "42\n"), "fenced")
ANSWER = "A42"


def taught_model(steps: int = 300):
    """(model in eval mode, tokenizer); head_dim 32, which vLLM's CPU attention needs."""
    tok = char_tokenizer("0123456789+-*= " + string.ascii_letters + "`()\n:.,")
    model = tiny_llama(TinyModel(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                 max_position_embeddings=128), tok)
    ids = torch.tensor([tok("Q:")["input_ids"] + tok(CALL + RESULT + ANSWER)["input_ids"] + [tok.eos_token_id]])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05, loss.item()
    return model.eval(), tok

