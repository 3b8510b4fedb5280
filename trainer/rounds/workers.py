"""The pipeline's rollout workers as a group: spawn (or take torchrun's), join, watch, stop, start again.

Knows processes and the job's rendezvous, nothing of orders, weights or rounds.

**A spawned worker that dies** is reported as :class:`WorkerDied`; the pipeline may start the group again
(``rollout.worker_restarts``): every worker is stopped and the job formed again (a process group cannot take a
new member). Under ``torchrun`` (its ``--max-restarts`` starts the whole job again) there is nothing to restart.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from cohort.trainer import spawn_workers, wire
from cohort.trainer.config import TrainConfig
from cohort.trainer.rounds import mode
from cohort.trainer.rounds.messages import STOP

EXIT_GRACE_S = 5.0
"""After an exchange with the workers fails, how long to look for the worker that exited, to name it."""
START_TIMEOUT_S = 600.0
"""Workers that have not joined the job by then are an error (they load the model first)."""


class WorkerDied(RuntimeError):
    """A spawned rollout worker exited (``rollout.worker_restarts`` may start the workers again)."""


class WorkerGroup:
    """The ``rollout.workers`` workers (ranks 1..) of learner rank ``learner`` (rank 0 of their job)."""

    def __init__(self, cfg: TrainConfig, learner: int = 0, several_learners: bool = False,
                 early: spawn_workers.Workers | None = None) -> None:
        self.cfg, self.learner, self.n = cfg, learner, cfg.rollout.workers
        self.of = f" of learner rank {learner}" if several_learners else ""  # in the names of the workers
        self._spawned: spawn_workers.Workers | None = None
        self.init = ""
        self.spawn(early)

    @property
    def ranks(self) -> range:
        return range(1, 1 + self.n)

    @property
    def procs(self) -> list[Any]:
        """The spawned processes (rank r at index r - 1); none under torchrun."""
        return self._spawned.procs if self._spawned else []

    def spawn(self, early: spawn_workers.Workers | None = None) -> None:
        """Start the workers on this machine (not under torchrun, which starts them), or take those ``cohort
        train`` started ``early``: before the learner builds its model and verifiers, so that the workers'
        start-up (imports, their own model) overlaps it."""
        world = 1 + self.n
        if mode.workers_from_torchrun(self.cfg):  # torchrun started the workers: ranks 1..
            if int(os.environ["WORLD_SIZE"]) != world:
                raise ValueError(f"torchrun started {os.environ['WORLD_SIZE']} processes; the asynchronous pipeline "
                                 f"needs 1 + rollout.workers = {world} (rank 0 is the learner)")
            self.init = "env://"
            return
        self._spawned = early or spawn_workers.start(self.cfg, self.learner)
        self.init = self._spawned.init

    def join(self) -> wire.Links:
        """Join the job, failing (naming the worker) when a spawned worker dies before it joins."""
        box: dict[str, Any] = {}

        def join() -> None:
            try:
                box["links"] = wire.Links.join(self.init, wire.LEARNER, 1 + self.n)
            except Exception as exc:
                box["error"] = exc

        thread = threading.Thread(target=join, daemon=True, name="pipeline-join")
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while thread.is_alive():
            thread.join(0.2)
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the rollout workers did not join within {START_TIMEOUT_S:.0f}s")
        if "error" in box:
            raise RuntimeError(f"joining the rollout workers failed: {box['error']}")
        return box["links"]

    def send(self, message: Any, rank: int, links: wire.Links) -> None:
        """``message`` to worker ``rank``; a failure names the worker (or the one that exited)."""
        try:
            wire.send(message, rank, links.down)
        except Exception as exc:
            self.check(EXIT_GRACE_S)
            raise RuntimeError(f"sending work to rollout worker {rank}{self.of} failed: {exc}") from None

    def stop(self, links: wire.Links) -> None:
        """Ask every worker to finish the generation in hand and leave."""
        for rank in self.ranks:
            wire.send(STOP, rank, links.down)

    def check(self, grace_s: float = 0.0) -> None:
        """:class:`WorkerDied` naming a spawned worker that has exited. ``grace_s``: after a failed exchange
        with the workers, how long to wait for the dead one to be seen exiting (a peer's closed connection can
        be noticed before the kernel has reaped the process)."""
        deadline = time.monotonic() + grace_s
        while True:
            for rank, p in enumerate(self.procs, start=1):
                if p.exitcode is not None:
                    raise WorkerDied(f"rollout worker {rank}{self.of} (pid {p.pid}) exited with code {p.exitcode}"
                                     + (" (its error is on stderr above)" if p.exitcode == 1 else ""))
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def all_alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def names(self) -> str:
        return ", ".join(f"{r}{self.of} (pid {p.pid})" for r, p in enumerate(self.procs, start=1)) or \
            f"ranks 1..{self.n}"

    def may_restart(self, restarts: int) -> bool:
        """Whether the group may start again after ``restarts`` restarts: spawned workers, within the limit."""
        return bool(self.procs) and restarts < self.cfg.rollout.worker_restarts

    def terminate(self) -> None:
        """Stop every worker now (a worker closes its engine on SIGTERM: vLLM's engine core, its work folder)."""
        for p in self.procs:
            p.terminate()
        self.reap()

    def reap(self) -> None:
        """The spawned workers ended (killed when they do not end by themselves); idempotent."""
        if self._spawned:
            self._spawned.reap()
