"""The pipeline's receiver: a thread that takes every finished order from the workers, hands it to the
verifiers at once and queues it for the learner. Knows the ``up`` group and the messages, nothing of the
order book, the weights or the processes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from cohort.trainer import wire
from cohort.trainer.rounds.messages import BYE, Generated, Order

Arrival = tuple[Generated, Order, Future]
"""An order's rows, the order, and its scores on the way."""


class Receiver:
    """Arrivals from one job of workers (a restarted job gets a new receiver). ``score(order, rows)`` submits
    the rows for scoring and returns the future; arrivals, and an error that ends the receiving, go to
    ``arrivals`` (shared with the receivers before, so that what they queued is consumed in order)."""

    def __init__(self, up: Any, n_workers: int, score: Callable[[Order, Generated], Future],
                 arrivals: queue.Queue) -> None:
        self.arrivals = arrivals
        self._score, self._n = score, n_workers
        self._expected: dict[int, Order] = {}
        self._lock = threading.Lock()  # guards _expected (the learner adds, this thread takes)
        self._closing = False
        self._thread = threading.Thread(target=self._run, args=(up,), daemon=True, name="pipeline-receiver")
        self._thread.start()

    def expect(self, order: Order) -> None:
        """An order about to be sent (before it is, so that its rows always find it)."""
        with self._lock:
            self._expected[order.id] = order

    def _run(self, up: Any) -> None:
        byes = 0
        try:
            while byes < self._n:
                _, message = wire.receive(up)
                if message == BYE:
                    byes += 1
                    continue
                if self._closing:
                    continue
                with self._lock:
                    order = self._expected.pop(message.order)
                self.arrivals.put((message, order, self._score(order, message)))
        except Exception as exc:
            if not self._closing:
                self.arrivals.put(RuntimeError(f"receiving from the rollout workers failed: {exc}"))

    def mute(self) -> None:
        """Report nothing more: no arrival is scored or queued from now on, and no error."""
        self._closing = True

    def stop(self, timeout_s: float) -> bool:
        """:meth:`mute`, and wait for the thread to end (the workers said goodbye, or their group
        failed); whether it did. gloo's receive from any rank does not always fail when the peers die, and
        cannot be aborted: a thread still blocked stays in its old group, a daemon that touches no newer one."""
        self.mute()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()
