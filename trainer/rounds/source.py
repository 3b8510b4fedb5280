"""The one interface the training loop reads rounds through, and the one place a source is chosen.

A round source gives the loop this rank's next :class:`~cohort.trainer.rounds.round.Round` (rows, scores, every
per-row tensor), follows the policy's updates, reports its own metrics and its share of a checkpoint. The loop
reads source -> advantages -> update -> publish -> log, the same for both.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from cohort.trainer import distributed, spawn_workers
from cohort.trainer.config import TrainConfig
from cohort.trainer.metrics import StepTimer
from cohort.trainer.rounds import mode
from cohort.trainer.rounds.lockstep import LockStep
from cohort.trainer.rounds.pipeline import Pipeline
from cohort.trainer.rounds.round import Round, Sources


class RoundSource(Protocol):
    def start(self, src: Sources, policy: torch.nn.Module, version: int) -> None:
        """Begin producing rounds from ``src`` for ``policy`` (wrapped: DDP/FSDP2) at weight version ``version``
        (the step the run starts from; resumed state already loaded)."""

    def next_round(self, timer: StepTimer) -> Round:
        """This rank's next round (its phases timed on ``timer``)."""

    def publish(self, policy: torch.nn.Module) -> None:
        """The policy's new weights (after an update): rounds from now on come from them."""

    def metrics(self, timer: StepTimer) -> dict[str, float]:
        """The source's own metrics of the step just done (none for lock-step)."""

    def state_dict(self) -> dict[str, Any]:
        """This rank's share of a checkpoint (collective for the pipeline's several learners)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None:
        """Release what the source holds (engine, worker processes); idempotent, never hangs."""


def learner_comm(cfg: TrainConfig) -> distributed.Comm:
    """This learner's ``Comm``: one process's for a one-learner pipeline (torchrun's ranks 1.. are its workers,
    not fellow learners), else the job's (``distributed.init``: DDP/FSDP2 under torchrun, or one process)."""
    return distributed.SINGLE if mode.one_learner(cfg) else distributed.init(cfg)


def open_source(cfg: TrainConfig, comm: distributed.Comm, early: spawn_workers.Workers | None = None) -> RoundSource:
    """The round source the config asks for: :class:`Pipeline` (its workers start now, or ``early``: those
    ``cohort train`` started) when ``rollout.max_staleness > 0``, else :class:`LockStep`."""
    return Pipeline(cfg, comm, early) if mode.pipelined(cfg) else LockStep(cfg, comm)
