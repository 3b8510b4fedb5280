"""A lean KV-cached forward for Llama-architecture models, used only for sampling.

transformers' module forward costs several milliseconds of Python per call (mask building, cache
objects, kwargs plumbing) however small the model, which makes token-by-token sampling of a small
policy overhead-bound. This runs the same maths (RMSNorm, RoPE, SDPA attention with GQA, SwiGLU)
on a per-call snapshot of the policy's weights, rearranged so that each token costs few kernel
calls, with a preallocated cache. It is a sampling fast path only: every log-prob that enters the
loss is recomputed by a full-sequence forward (``trainer.learner.token_logprobs``), and
``tests/trainer/test_engine.py`` checks this decoder's logits against the transformers module.
Models that are not plain Llama (biases, other RoPE types, sliding windows) use the generic path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def supports(model: torch.nn.Module) -> bool:
    """A plain transformers Llama (not one wrapped by peft: its adapters live in the modules this reads around)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama" or hasattr(model, "peft_config"):
        return False
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    return (rope == "default" and not cfg.attention_bias and not cfg.mlp_bias and cfg.hidden_act == "silu"
            and not getattr(cfg, "pretraining_tp", 1) > 1)


def _rotate_rows(w: Tensor, heads: int, head_dim: int) -> Tensor:
    """Rows of a projection whose output is ``rotate_half`` of the original's, per head. Exact (a signed
    permutation of rows), so RoPE becomes ``y * cos + y_rot * sin`` with ``y_rot`` from the same matmul."""
    w = w.view(heads, head_dim, -1)
    half = head_dim // 2
    return torch.cat((-w[:, half:], w[:, :half]), dim=1).reshape(heads * head_dim, -1)


class LlamaDecoder:
    """Prefill then one token at a time; rows can be dropped (``keep``) as they finish."""

    def __init__(self, model: torch.nn.Module, batch: int, max_len: int):
        cfg = model.config
        self.n_layers = len(model.model.layers)
        self.eps = cfg.rms_norm_eps
        self.n_heads = hq = cfg.num_attention_heads
        self.n_kv = hkv = cfg.num_key_value_heads
        self.head_dim = d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        p = next(model.parameters())
        positions = torch.arange(max_len, device=p.device)[None]
        cos, sin = model.model.rotary_emb(torch.empty(0, device=p.device, dtype=p.dtype), positions)
        self.cos, self.sin = cos[0], sin[0]  # (max_len, d)
        shape = (batch, hkv, max_len, d)
        self.k = [p.new_zeros(shape) for _ in range(self.n_layers)]
        self.v = [p.new_zeros(shape) for _ in range(self.n_layers)]
        self.key_mask = torch.zeros(batch, max_len, dtype=torch.bool, device=p.device)  # (b, L) attendable
        # Weights are a snapshot (the decoder lives for one generate() call, between updates), laid out
        # for few, cheap kernel calls per token: q/k/v fused into one matmul and gate/up into another;
        # each RMSNorm's weight folded into the matmul after it (x_hat @ (W diag(w))^T); stored
        # transposed (a plain (N, D) @ (D, M) GEMM); and RoPE's rotate_half folded into extra rows of
        # the q/k/v matmul (see _rotate_rows), so the rotation is two multiplies and an add for q and k.
        with torch.no_grad():
            self.w_qkv, self.w_o, self.w_gate_up, self.w_down = [], [], [], []
            for layer in model.model.layers:
                attn, mlp = layer.self_attn, layer.mlp
                q, k = attn.q_proj.weight, attn.k_proj.weight
                qkv = torch.cat([q, k, attn.v_proj.weight, _rotate_rows(q, hq, d), _rotate_rows(k, hkv, d)])
                self.w_qkv.append((qkv * layer.input_layernorm.weight).t().contiguous())  # (D, qk | v | rot qk)
                self.w_o.append(attn.o_proj.weight.t().contiguous())  # (Hq*d, D)
                gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])  # (2I, D)
                self.w_gate_up.append((gate_up * layer.post_attention_layernorm.weight).t().contiguous())  # (D, 2I)
                self.w_down.append(mlp.down_proj.weight.t().contiguous())  # (I, D)
            self.w_head = (model.lm_head.weight * model.model.norm.weight).t().contiguous()  # (D, V)
            self.embed = model.model.embed_tokens.weight.detach()
        self.split = ((hq + hkv) * d, hkv * d, (hq + hkv) * d)
        self.length = 0

    def keep(self, rows: Tensor) -> None:
        """Keep only ``rows`` (indices into the current batch; a repeated index copies that row, e.g. a
        prompt's cache to each of its G generations)."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]
        self.key_mask = self.key_mask.index_select(0, rows)

    def _norm(self, h: Tensor) -> Tensor:
        """RMSNorm without its weight (folded into the next matmul): h / rms(h), per row."""
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True).add_(self.eps))

    def forward(self, ids: Tensor, positions: Tensor, token_mask: Tensor) -> Tensor:
        """ids/positions/token_mask (b, t) appended at the cache end -> last-position logits (b, V)."""
        b, t = ids.shape
        start, end = self.length, self.length + t
        hq, hkv, d = self.n_heads, self.n_kv, self.head_dim
        self.key_mask[:, start:end] = token_mask.bool()
        cos = self.cos[positions].view(b * t, 1, d)  # broadcast over heads
        sin = self.sin[positions].view(b * t, 1, d)
        if t == 1:  # decoding: the new (real) token sees every attendable cached key and itself
            attend = self.key_mask[:, None, None, :end]  # (b, 1, 1, end)
        else:
            query_at = torch.arange(start, end, device=ids.device)[:, None]  # (t, 1)
            key_at = torch.arange(end, device=ids.device)[None, :]  # (1, end)
            attend = (key_at <= query_at)[None] & self.key_mask[:, None, :end]  # (b, t, end) causal, not padding
            attend |= (key_at == query_at)[None]  # a padding query attends to itself (no all-masked rows)
            attend = attend[:, None]  # (b, 1, t, end)
        # additive form, built once for every layer (SDPA would convert a boolean mask in each call)
        mask = torch.zeros(attend.shape, dtype=self.cos.dtype, device=ids.device).masked_fill_(~attend, float("-inf"))
        h = F.embedding(ids.reshape(-1), self.embed)  # (b*t, D): one row per (batch row, position)
        for i in range(self.n_layers):
            qk, v, qk_rot = torch.mm(self._norm(h), self.w_qkv[i]).split(self.split, -1)
            qk = (qk.view(-1, hq + hkv, d) * cos).add_(qk_rot.view(-1, hq + hkv, d) * sin)  # RoPE (b*t, Hq+Hkv, d)
            qk = qk.view(b, t, hq + hkv, d).transpose(1, 2)  # (b, Hq+Hkv, t, d)
            self.k[i][:, :, start:end] = qk[:, hq:]
            self.v[i][:, :, start:end] = v.view(b, t, hkv, d).transpose(1, 2)
            o = F.scaled_dot_product_attention(qk[:, :hq], self.k[i][:, :, :end], self.v[i][:, :, :end],
                                               attn_mask=mask, enable_gqa=hkv != hq)  # (b, Hq, t, d)
            h = torch.addmm(h, o.transpose(1, 2).reshape(b * t, -1), self.w_o[i])  # residual + attention
            gate, up = torch.mm(self._norm(h), self.w_gate_up[i]).chunk(2, dim=-1)  # (b*t, I) each
            h = torch.addmm(h, F.silu(gate).mul_(up), self.w_down[i])  # residual + MLP, (b*t, D)
        self.length = end
        return torch.mm(self._norm(h.view(b, t, -1)[:, -1]), self.w_head)  # (b, V)
