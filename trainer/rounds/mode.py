"""Lock-step or asynchronous, decided here and nowhere else (no torch: ``cohort train`` asks before it imports
the trainer, to start the rollout workers early)."""

from __future__ import annotations

import os
from typing import Any


def pipelined(cfg: Any) -> bool:
    """The asynchronous pipeline (``rollout.max_staleness > 0``), else the lock-step loop."""
    return cfg.rollout.max_staleness > 0


def one_learner(cfg: Any) -> bool:
    """A pipeline with one learner process (no DDP/FSDP2): under torchrun its ranks 1.. are its rollout workers
    and its own ``Comm`` is a single process's (each DDP/FSDP2 learner rank spawns private workers instead)."""
    return pipelined(cfg) and cfg.distributed.parallel == "none"


def torchrun_rank() -> int | None:
    """This process's rank when ``torchrun`` started it (its environment names a rank and a world), else None."""
    return int(os.environ["RANK"]) if "RANK" in os.environ and "WORLD_SIZE" in os.environ else None


def workers_from_torchrun(cfg: Any) -> bool:
    """torchrun started the rollout workers (ranks 1..) of this one learner (rank 0): none to spawn."""
    return one_learner(cfg) and torchrun_rank() is not None


def rollout_worker_rank(cfg: Any) -> int | None:
    """The rank when this process is a torchrun-started rollout worker, else None (a learner)."""
    rank = torchrun_rank()
    return rank if workers_from_torchrun(cfg) and rank else None


def spawns_workers_early(cfg: Any) -> bool:
    """One learner that spawns its own workers (not torchrun), so ``cohort train`` may start them before it
    imports the trainer (unless tool servers still to be started must go into their config)."""
    rollout = cfg.rollout
    return (one_learner(cfg) and "RANK" not in os.environ
            and not (rollout.max_turns > 1 and any(not t.endpoints for t in rollout.tools)))
