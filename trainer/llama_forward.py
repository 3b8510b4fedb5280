"""A lean full-sequence forward for Llama-architecture policies with an explicit attention pattern (the
packed rows of ``trainer/packing.py``): the logits the loss needs, with autograd.

transformers' module forward costs milliseconds of Python per call (output capturing, mask
construction, one module call per projection) whatever the model size; for the small policies and
micro-batches of a CPU run that is a large share of each forward/backward. This computes the same
function as ``LlamaForCausalLM.forward`` (RMSNorm in float32, RoPE from the model's own rotary
module, SDPA attention with GQA, SwiGLU) straight from the module's live parameters, so gradients
flow to them as usual, without the per-call plumbing (one additive mask built once per call,
shared by every layer; no module calls).

Used only for a plain, unwrapped Llama without dropout, on the CPU, in a single process (DDP and FSDP2
need their own module forward; on a GPU, Python overhead matters less than the module's attention
kernels, which a dense mask would rule out); everything else goes through the transformers module.
``tests/trainer/test_packing.py`` checks its packed log-probs and gradients against the module. Without
packing it bought under 10% over the module (``bench/fast_paths.py``), so unpacked rows use the module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cohort.trainer.engines import llama_decode


def supports(model: torch.nn.Module) -> bool:
    """Plain Llama (see ``llama_decode.supports``) with no dropout anywhere, on the CPU."""
    cfg = getattr(model, "config", None)
    return (llama_decode.supports(model) and not getattr(cfg, "attention_dropout", 0.0)
            and type(model).__name__ == "LlamaForCausalLM" and next(model.parameters()).device.type == "cpu")


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """transformers' LlamaRMSNorm: normalise in float32, scale in the input dtype."""
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hidden_with_pattern(
    model: torch.nn.Module,
    input_ids: Int[Tensor, "B L"],
    position_ids: Int[Tensor, "B L"],
    attend: Bool[Tensor, "B L L"],
    checkpoint: bool = False,
    select: Int[Tensor, "B T"] | None = None,
) -> Float[Tensor, "B L D"]:
    """The Llama forward with an explicit attention pattern (``attend[b, i, j]``: query i sees key j):
    the final (normalised) hidden state of every position, or of those in ``select``, for the LM head. A query that sees nothing attends to itself
    (its output stays finite; such positions are padding, never attended to and never scored).
    ``checkpoint``: under autograd, keep only each layer's input and recompute the layer in the backward
    pass (activation memory of one layer instead of all of them, for about one more forward).
    ``select``: flat indices (row * L + position) of the positions to return, (B', T') -> (B', T', D)."""
    cfg, m = model.config, model.model
    n = input_ids.shape[1]
    h = F.embedding(input_ids, m.embed_tokens.weight, m.embed_tokens.padding_idx)  # (B, L, D); pad's row: no grad
    cos, sin = m.rotary_emb(h, position_ids)  # (B, L, d) each
    cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, d) broadcast over heads
    attend = attend | torch.eye(n, dtype=torch.bool, device=input_ids.device)[None]
    mask = torch.zeros(attend.shape, dtype=h.dtype, device=h.device).masked_fill_(~attend, float("-inf"))[:, None]
    for layer in m.layers:
        if checkpoint and torch.is_grad_enabled():  # keep only h; recompute the layer in the backward pass
            h = torch.utils.checkpoint.checkpoint(_layer, layer, h, cos, sin, mask, cfg, use_reentrant=False)
        else:
            h = _layer(layer, h, cos, sin, mask, cfg)
    if select is not None:
        h = h.flatten(0, 1)[select]  # (B', T', D)
    return _rms(h, m.norm.weight, cfg.rms_norm_eps)  # (B, L, D) or (B', T', D)


def _layer(layer: torch.nn.Module, h: Float[Tensor, "B L D"], cos: Tensor, sin: Tensor,
           mask: Float[Tensor, "B 1 L L"], cfg) -> Float[Tensor, "B L D"]:
    """One decoder layer: attention (RoPE, GQA, additive mask) then SwiGLU, each with its residual."""
    attn, mlp = layer.self_attn, layer.mlp
    b, n = h.shape[:2]
    hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq
    x = _rms(h, layer.input_layernorm.weight, cfg.rms_norm_eps)
    q = F.linear(x, attn.q_proj.weight).view(b, n, hq, d).transpose(1, 2)  # (B, Hq, L, d)
    k = F.linear(x, attn.k_proj.weight).view(b, n, hkv, d).transpose(1, 2)  # (B, Hkv, L, d)
    v = F.linear(x, attn.v_proj.weight).view(b, n, hkv, d).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hkv != hq)  # (B, Hq, L, d)
    h = h + F.linear(o.transpose(1, 2).reshape(b, n, hq * d), attn.o_proj.weight)
    x = _rms(h, layer.post_attention_layernorm.weight, cfg.rms_norm_eps)
    return h + F.linear(F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight),
                        mlp.down_proj.weight)  # SwiGLU, (B, L, I) inside
