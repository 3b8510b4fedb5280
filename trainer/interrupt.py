"""SIGINT (Ctrl-C) and SIGTERM (Kubernetes, systemd, ``kill``) during ``cohort train``: stop at a step's end.

The first signal is noted, answered with one line on stderr, and the training loop goes on to the end of
the step in flight; there it saves a checkpoint and stops (:meth:`Interrupts.requested`), and the run
ends with one line naming the checkpoint and how to resume, exit status 128 + the signal (130 for
SIGINT, 143 for SIGTERM). A second signal stops at once: :class:`Interrupted` is raised wherever the
run is, so the ``finally`` blocks still stop what it started (rollout workers, local verifier services)
but the step in flight is not saved. Outside the loop (start-up, the final save) every signal stops at
once.

Finishing the step rather than abandoning it keeps resume exact: a checkpoint holds the state between
two steps, and the run's state inside a step (a half-applied update, RNGs part-way) is not one.

Under ``torchrun`` the ranks agree (a signal any rank saw stops all of them after the same step), since
the checkpoint is collective. Rollout workers and local services run in process groups of their own, so
a terminal's Ctrl-C reaches only the learner, which stops them itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(SystemExit):
    """The run was stopped by a signal: exit status 128 + the signal's number, no traceback."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _stderr(line: str) -> None:
    """One line from a signal handler: straight to the descriptor (``print`` could re-enter a write in progress)."""
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode())
    except (OSError, ValueError):
        pass


class Interrupts:
    """The run's SIGINT/SIGTERM handlers (a context manager): ``with interrupts.deferred():`` around the
    training loop defers the first signal to the end of the step; anywhere else a signal stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal, when it was deferred
        self._deferring = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[Interrupts]:
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._deferring and self.signum is None:
            self.signum = signum
            _stderr(f"{name}: finishing the step in flight, then saving a checkpoint and stopping "
                    f"({name} again stops at once, without saving that step)")
            return
        if self._deferring:
            _stderr(f"{name} again: stopping now; the step in flight is not saved")
        else:
            _stderr(f"{name}: stopping now" + (" (again)" if self.signum is not None else ""))
        raise Interrupted(signum)

    def requested(self, comm) -> bool:
        """Whether a deferred signal asks the loop to stop after this step (on any rank: collective)."""
        return bool(comm.max_int(int(self.signum is not None)))

    def stopped(self, when: str, checkpoint, comm) -> Interrupted:
        """The exception that ends the run after a deferred signal, once one line (rank 0) has said where the run
        is saved and how to resume it. A rank that saw no signal (a peer did) exits with SIGTERM's status."""
        signum = self.signum or signal.SIGTERM
        comm.say(f"stopped by {signal.Signals(signum).name} {when}, saved in {checkpoint}: run the same command "
                 "again to resume from there")
        return Interrupted(signum)
