"""A learner's rollout workers, started on this machine (the asynchronous pipeline; ``trainer.rounds.workers``).

Light on purpose: this module imports neither torch nor transformers, and neither does the workers' entry point
until it runs in the worker. So ``cohort train`` starts the workers right after reading its config
(:func:`start_early`), and their start-up (a fresh interpreter importing torch and transformers, then building its
model: about 3 s on 2 cores) overlaps the learner's own instead of following it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cohort.trainer.rounds import mode  # no torch either


@dataclass
class Workers:
    procs: list[Any]  # multiprocessing.Process, rank r at index r - 1
    init: str  # the job's rendezvous
    folder: str  # the rendezvous's folder

    def reap(self) -> None:
        """The workers ended (killed when they do not end by themselves), the rendezvous removed; idempotent."""
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
            try:  # what the worker started and left behind (a killed vLLM worker's engine core): its own group
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


def start(cfg: Any, learner: int = 0) -> Workers:
    """Spawn ``rollout.workers`` workers of learner rank ``learner`` (ranks 1.. of a job of their own)."""
    world = 1 + cfg.rollout.workers
    folder = tempfile.mkdtemp(prefix="cohort-pipeline-")
    init = f"file://{folder}/rendezvous"
    ctx = mp.get_context("spawn")  # never fork: the learner has gRPC threads
    data = cfg.model_dump()
    from cohort.trainer.placement import spawn_plan  # no torch either

    places = spawn_plan(cfg, learner)  # each worker's CUDA_VISIBLE_DEVICES and model.device (trainer.placement)
    # a vLLM worker starts vLLM's engine core as its own child, which a daemonic process may not have; it is
    # reaped all the same, with its process group (the engine core does not notice its parent die)
    daemon = cfg.rollout.engine != "vllm"
    procs = [ctx.Process(target=_entry, args=(data, r, world, init, learner, places[r - 1]), daemon=daemon,
                         name=f"cohort-rollout-{r}") for r in range(1, world)]
    for p in procs:
        p.start()
    return Workers(procs, init, folder)


def start_early(cfg: Any) -> Workers | None:
    """:func:`start` for ``cohort train`` before it imports the trainer, when one learner spawns its workers
    with this very config (None otherwise: lock-step, torchrun, or tool servers still to be started, whose
    endpoints the workers' config must carry)."""
    return start(cfg) if mode.spawns_workers_early(cfg) else None


def _entry(cfg_data: dict, rank: int, world: int, init: str, learner: int,
           place: tuple[dict[str, str], str | None] = ({}, None)) -> None:
    # a process group of its own before anything slow (importing torch): a terminal's Ctrl-C reaches only the
    # learner, which finishes its step and stops the workers itself (trainer.interrupt)
    os.setpgrp()
    env, device = place  # its own GPU only (before torch is imported), so its engine lands there
    os.environ.update(env)
    if device is not None:
        cfg_data = {**cfg_data, "model": {**cfg_data["model"], "device": device}}
    try:  # ps, top and the tests tell the rollout workers from the verifiers' spawned scoring processes
        Path("/proc/self/comm").write_text(f"cohort-rollout{rank}"[:15])
    except OSError:  # not Linux
        pass
    from cohort.trainer.rollout_worker import spawned

    spawned(cfg_data, rank, world, init, learner)
