"""The transformers rollout engine: KV-cached sampling straight from the policy module (CPU or GPU).

It samples with its own short decode loop instead of ``model.generate``: the same distribution
(temperature, top-p, stop at EOS or the chat end-of-turn token: ``models.stop_token_ids``), without generate()'s per-token processor/stopping machinery,
which dominates the cost of small models. Rows that have finished are dropped from the batch
(and from the KV cache) as they finish, so late tokens cost only the rows still running.
Sampling uses the engine's own seeded ``torch.Generator`` (saved in checkpoints).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache

from cohort.trainer.config import RolloutSection
from cohort.trainer.precision import FLOAT32, Precision
from cohort.trainer.engines import llama_decode
from cohort.trainer.models import stop_token_ids
from cohort.trainer.rollout import RolloutBatch

log = logging.getLogger("cohort.trainer.engines.hf")


def sample_next(logits: Tensor, temperature: float, top_p: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """logits (b, V) -> token ids (b,) sampled from softmax(logits / temperature), nucleus-filtered, and their
    log-probs (b,) under the whole tempered softmax (the policy's, as the learner's forward computes them)."""
    logits = logits.float()
    probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)  # (b, V)
    full = probs
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        drop = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keep the smallest set reaching top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (b,)
    return token, full.gather(-1, token[:, None]).squeeze(-1).clamp_min(1e-30).log()


class TransformersEngine:
    def __init__(self, cfg: RolloutSection, policy: torch.nn.Module, tokenizer: Any, seed: int,
                 precision: Precision = FLOAT32):
        self.cfg = cfg
        self.precision = precision  # sampling in the learner's compute dtype (bf16 autocast over float32 masters)
        self.policy = policy
        self.tokenizer = tokenizer
        self.pad_id = int(tokenizer.pad_token_id)
        self.device = next(policy.parameters()).device
        self.stop_ids = torch.tensor(stop_token_ids(tokenizer, policy), device=self.device)  # (S,)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.report_logprobs = False
        """Also return each sampled token's log-prob (``RolloutBatch.rollout_logprobs``): the asynchronous
        pipeline's workers need the behaviour policy's; the lock-step loop needs none (its first update pass
        is the sampling policy), so it stays off there."""

    def sync_weights(self, policy: torch.nn.Module) -> None:
        self.policy = policy  # same module: nothing to copy

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "device": self.device.type}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The sampler where the checkpoint left it; a checkpoint from another kind of device (a GPU run resumed
        on the CPU, or the reverse: their generators' states differ) reseeds from that state instead, as another
        world size does: the run resumes, its samples are not the ones the first device would have drawn."""
        saved = state.get("device", "cpu")  # checkpoints from before the device was saved: CPU runs
        if saved == self.device.type:
            self.generator.set_state(state["generator"])
            return
        seed = int.from_bytes(hashlib.sha256(state["generator"].numpy().tobytes()).digest()[:8], "little")
        self.generator.manual_seed(seed)
        log.warning("the checkpoint's sampling state is a %s generator's; this run samples on %s: reseeded from it",
                    saved, self.device.type)

    def close(self) -> None:
        """Nothing to release (the policy is the learner's module)."""

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], num_generations: int,
                 max_new_tokens: int | None = None) -> RolloutBatch:
        p, tp = len(prompts), max(len(r) for r in prompts)
        unique_ids = torch.full((p, tp), self.pad_id, dtype=torch.long)  # (P, Tp) left-padded
        unique_mask = torch.zeros((p, tp), dtype=torch.long)
        for i, r in enumerate(prompts):
            unique_ids[i, tp - len(r) :] = torch.tensor(r)
            unique_mask[i, tp - len(r) :] = 1
        unique_ids, unique_mask = unique_ids.to(self.device), unique_mask.to(self.device)
        # (B, Tp) prompt-major: row p*G + g is generation g of prompt p
        prompt_ids = unique_ids.repeat_interleave(num_generations, dim=0)
        prompt_mask = unique_mask.repeat_interleave(num_generations, dim=0)
        max_new = max_new_tokens or self.cfg.max_completion_length
        with self.precision.autocast():
            tokens, logprobs = self._decode(unique_ids, unique_mask, num_generations, max_new)  # (B, T), pad after stop
        is_eos = torch.isin(tokens, self.stop_ids)  # (B, T)
        has_eos = is_eos.any(dim=1)
        first_eos = torch.where(has_eos, is_eos.int().argmax(dim=1), tokens.shape[1])
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        completion_mask = (positions[None, :] <= first_eos[:, None]).long()
        tokens = tokens.masked_fill(completion_mask == 0, self.pad_id)
        texts = self.tokenizer.batch_decode(tokens.tolist(), skip_special_tokens=True)
        logprobs = (logprobs * completion_mask).cpu() if self.report_logprobs else None  # 0 past each completion
        return RolloutBatch(prompt_ids.cpu(), prompt_mask.cpu(), tokens.cpu(), completion_mask.cpu(),
                            (~has_eos).cpu(), texts, logprobs)

    def _decode(self, prompt_ids: Tensor, prompt_mask: Tensor, num_generations: int,
                max_new: int) -> tuple[Tensor, Tensor]:
        """Sample up to ``max_new`` tokens for each of the P prompts (P, Tp) ``num_generations``
        times: tokens (B, T) prompt-major, rows stopping after their stop token, and their log-probs (B, T)."""
        was_training = self.policy.training
        self.policy.eval()
        try:
            if llama_decode.supports(self.policy):
                return self._decode_lean(prompt_ids, prompt_mask, num_generations, max_new)
            g = num_generations
            return self._decode_generic(prompt_ids.repeat_interleave(g, 0), prompt_mask.repeat_interleave(g, 0), max_new)
        finally:
            self.policy.train(was_training)

    def _decode_lean(self, prompt_ids: Tensor, prompt_mask: Tensor, num_generations: int,
                     max_new: int) -> tuple[Tensor, Tensor]:
        """The prompts are prefilled once each, then their cache is copied to their G rows (the same keys
        and values the G-times-repeated prefill computes, at 1/G of its cost)."""
        p, tp = prompt_ids.shape
        b = p * num_generations
        out = torch.full((b, max_new), self.pad_id, dtype=torch.long, device=self.device)
        out_lp = torch.zeros((b, max_new), device=self.device)
        decoder = llama_decode.LlamaDecoder(self.policy, p, tp + max_new)
        rows = torch.arange(b, device=self.device)  # batch row -> index into out
        done = torch.zeros(b, dtype=torch.bool, device=self.device)
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # (P, Tp)
        logits = decoder.forward(prompt_ids, positions, prompt_mask).repeat_interleave(num_generations, 0)  # (B, V)
        decoder.keep(torch.arange(p, device=self.device).repeat_interleave(num_generations))  # (B,) cache rows
        next_pos = positions[:, -1:].repeat_interleave(num_generations, 0) + 1  # (B, 1)
        real = torch.ones_like(next_pos)  # (b, 1) every decoded token is attendable
        for t in range(max_new):
            token, lp = sample_next(logits, self.cfg.temperature, self.cfg.top_p, self.generator)  # (b,), (b,)
            # finished rows still in the batch write tokens past their EOS: generate() pads those
            out[rows, t] = token
            out_lp[rows, t] = lp
            done |= torch.isin(token, self.stop_ids)
            n_done = int(done.sum())
            if t == max_new - 1 or n_done == len(rows):
                break
            if 4 * n_done >= len(rows):  # compact: finished rows leave the batch and the cache
                live = (~done).nonzero().squeeze(-1)
                decoder.keep(live)
                rows, token, next_pos, done, real = rows[live], token[live], next_pos[live], done[live], real[live]
            logits = decoder.forward(token[:, None], next_pos, real)
            next_pos += 1
        return out, out_lp

    def _decode_generic(self, prompt_ids: Tensor, prompt_mask: Tensor, max_new: int) -> tuple[Tensor, Tensor]:
        b = prompt_ids.shape[0]
        out = torch.full((b, max_new), self.pad_id, dtype=torch.long, device=self.device)
        out_lp = torch.zeros((b, max_new), device=self.device)
        alive = torch.arange(b, device=self.device)  # rows still generating, indices into out
        mask = prompt_mask
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self.policy(input_ids=prompt_ids, attention_mask=mask, position_ids=positions,
                             past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        next_pos = positions[:, -1:] + 1
        for t in range(max_new):
            token, lp = sample_next(logits, self.cfg.temperature, self.cfg.top_p, self.generator)  # (b_alive,)
            out[alive, t] = token
            out_lp[alive, t] = lp
            keep = ~torch.isin(token, self.stop_ids)
            if t == max_new - 1 or not bool(keep.any()):
                break
            if not bool(keep.all()):
                idx = keep.nonzero().squeeze(-1)
                alive, token, mask, next_pos = alive[idx], token[idx], mask[idx], next_pos[idx]
                cache.batch_select_indices(idx)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            logits = self.policy(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos,
                                 past_key_values=cache, use_cache=True).logits[:, -1]
            next_pos = next_pos + 1
        return out, out_lp
