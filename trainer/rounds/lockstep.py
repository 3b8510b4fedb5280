"""The lock-step round source (``rollout.max_staleness = 0``): generate with this process's engine, score,
and hand the round over; the update runs before the next round is generated, so every row is on-policy."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from cohort.trainer import distributed, tool_rollouts
from cohort.trainer.collect import collect_round
from cohort.trainer.config import TrainConfig
from cohort.trainer.metrics import StepTimer
from cohort.trainer.precision import resolve
from cohort.trainer.rollout import build_engine
from cohort.trainer.rounds.round import Round, Sources


class LockStep:
    """A :class:`~cohort.trainer.rounds.source.RoundSource` over one engine that follows the policy. The engine
    is built at :meth:`start`, from the policy as it is then (restored, on a resumed run); a checkpoint's
    engine state given before that (:meth:`load_state_dict`) is applied to it there."""

    def __init__(self, cfg: TrainConfig, comm: distributed.Comm = distributed.SINGLE) -> None:
        self.cfg, self.comm = cfg, comm
        self.engine: Any = None
        self._state: dict[str, Any] = {}
        self._src: Sources | None = None

    def start(self, src: Sources, policy: torch.nn.Module, version: int) -> None:
        """Build the engine on ``policy`` (wrapped: DDP/FSDP2) with ``src.tokenizer``: multi-turn with tools when
        rollout.max_turns > 1, sampling from gathered weights under FSDP2."""
        cfg, comm = self.cfg, self.comm
        module = distributed.unwrap(policy)
        engine = build_engine(cfg.rollout, module, src.tokenizer, cfg.run.seed + comm.rank, client=comm.rank,
                              precision=resolve(cfg.model.dtype, next(module.parameters()).device))
        self.engine = distributed.for_generation(tool_rollouts.wrap(engine, cfg.rollout, src.tokenizer), policy, comm)
        if self._state:
            self.engine.load_state_dict(self._state)
        self._src = dataclasses.replace(src, engine=self.engine)

    def next_round(self, timer: StepTimer) -> Round:
        return collect_round(self._src, self.comm, timer)

    def publish(self, policy: torch.nn.Module) -> None:
        """The engine samples from ``policy``'s new weights from the next round on."""
        self.engine.sync_weights(policy)

    def metrics(self, timer: StepTimer) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The engine's sampler state (for an exact resume)."""
        return self.engine.state_dict() if self.engine is not None else dict(self._state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._state = dict(state)
        if self.engine is not None:
            self.engine.load_state_dict(state)

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()
