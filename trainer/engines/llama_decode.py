"""A lean KV-cached forward for Llama-architecture models, used only for sampling.

transformers' module forward costs several milliseconds of Python per call (mask building, cache
objects, kwargs plumbing) however small the model, which makes token-by-token sampling of a small
policy overhead-bound. This runs the same maths (RMSNorm, RoPE, SDPA attention with GQA, SwiGLU)
directly on the policy's own parameter tensors (no copy, so it always sees the current weights)
with a preallocated cache. It is a sampling fast path only: every log-prob that enters the loss is
recomputed by the transformers module, and ``tests/trainer/test_engine.py`` checks the two agree.
Models that are not plain Llama (biases, other RoPE types, sliding windows) use the generic path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def supports(model: torch.nn.Module) -> bool:
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        return False
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    return (rope == "default" and not cfg.attention_bias and not cfg.mlp_bias and cfg.hidden_act == "silu"
            and not getattr(cfg, "pretraining_tp", 1) > 1)


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (b, h, t, d); cos/sin (b, 1, t, d)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaDecoder:
    """Prefill then one token at a time; rows can be dropped (``keep``) as they finish."""

    def __init__(self, model: torch.nn.Module, batch: int, max_len: int):
        cfg = model.config
        self.model = model
        self.layers = model.model.layers
        self.eps = cfg.rms_norm_eps
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        p = next(model.parameters())
        positions = torch.arange(max_len, device=p.device)[None]
        cos, sin = model.model.rotary_emb(torch.empty(0, device=p.device, dtype=p.dtype), positions)
        self.cos, self.sin = cos[0], sin[0]  # (max_len, d)
        shape = (batch, self.n_kv, max_len, self.head_dim)
        self.k = [p.new_zeros(shape) for _ in self.layers]
        self.v = [p.new_zeros(shape) for _ in self.layers]
        self.key_mask = torch.zeros(batch, max_len, dtype=torch.bool, device=p.device)  # (b, L) attendable
        # q/k/v and gate/up projections fused into one matmul each (half the kernel calls per token).
        # A snapshot of the current weights: the decoder lives for one generate() call, between updates.
        with torch.no_grad():
            self.qkv = [torch.cat([l.self_attn.q_proj.weight, l.self_attn.k_proj.weight, l.self_attn.v_proj.weight])
                        for l in self.layers]  # (Hq*d + 2*Hkv*d, D)
            self.gate_up = [torch.cat([l.mlp.gate_proj.weight, l.mlp.up_proj.weight]) for l in self.layers]  # (2I, D)
        self.split = (self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.n_kv * self.head_dim)
        self.length = 0

    def keep(self, rows: Tensor) -> None:
        """Keep only ``rows`` (indices into the current batch)."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]
        self.key_mask = self.key_mask.index_select(0, rows)

    def forward(self, ids: Tensor, positions: Tensor, token_mask: Tensor) -> Tensor:
        """ids/positions/token_mask (b, t) appended at the cache end -> last-position logits (b, V)."""
        b, t = ids.shape
        start, end = self.length, self.length + t
        self.key_mask[:, start:end] = token_mask.bool()
        cos = self.cos[positions][:, None]  # (b, 1, t, d)
        sin = self.sin[positions][:, None]
        query_at = torch.arange(start, end, device=ids.device)[:, None]  # (t, 1)
        key_at = torch.arange(end, device=ids.device)[None, :]  # (1, end)
        mask = (key_at <= query_at)[None] & self.key_mask[:, None, :end]  # (b, t, end) causal and not padding
        mask |= (key_at == query_at)[None]  # a padding query attends to itself (no all-masked rows)
        mask = mask[:, None]  # (b, 1, t, end)
        h = self.model.model.embed_tokens(ids)  # (b, t, D)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = _rms(h, layer.input_layernorm.weight, self.eps)
            q, k, v = F.linear(x, self.qkv[i]).split(self.split, dim=-1)  # (b, t, Hq*d), (b, t, Hkv*d) x2
            q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            k = k.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            v = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            self.k[i][:, :, start:end] = k
            self.v[i][:, :, start:end] = v
            o = F.scaled_dot_product_attention(q, self.k[i][:, :, :end], self.v[i][:, :, :end], attn_mask=mask,
                                               enable_gqa=self.n_kv != self.n_heads)  # (b, h, t, d)
            h = h + F.linear(o.transpose(1, 2).reshape(b, t, -1), attn.o_proj.weight)
            x = _rms(h, layer.post_attention_layernorm.weight, self.eps)
            gate, up = F.linear(x, self.gate_up[i]).chunk(2, dim=-1)  # (b, t, I) each
            h = h + F.linear(F.silu(gate) * up, layer.mlp.down_proj.weight)
        self.length = end
        h = _rms(h[:, -1], self.model.model.norm.weight, self.eps)
        return F.linear(h, self.model.lm_head.weight)  # (b, V)
