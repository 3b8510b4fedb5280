"""The pipeline's order book: which prompts are ordered from which worker, and which arrivals a round may use.
Pure: no threads, no processes, no I/O (tests/trainer/test_order_book.py drives it alone).

**Bounding staleness.** A group generated with weight version v and consumed when the learner holds
version s has staleness s - v. Two mechanisms, one primary and one a guarantee:

1. *Admission* (primary, :meth:`OrderBook.admit`): between rounds the learner keeps k * P groups ordered but
   not yet consumed (plus, while it builds a round, the groups that round still needs), and each order names
   the learner's version when it was sent as the oldest the worker may generate it with. Consumed in order, a
   group is then at most k versions old, so in the steady state nothing is wasted.
2. *Rejection* (the guarantee, :meth:`OrderBook.stale`): a group that arrives more than k versions old anyway
   (a slow verifier held it, dynamic sampling consumed faster than planned) is dropped, counted
   (``async/dropped_stale``), and its prompt goes to the front of the next order: no prompt is silently lost.

Why not rejection alone (TRL, prime-rl): generation would run ahead freely and throw away work whenever
the learner is the slower side; why not a depth bound alone: it bounds the queue, not the age, so one slow
verifier call could let an old group through. Admission wastes nothing and rejection makes the bound hold.

**Several learners** (DDP/FSDP2) each keep a book: every rank draws the same P prompts at a time from the same
sampler and orders only its own share (lock-step's rule), so no two learners train on the same draw.
"""

from __future__ import annotations

import collections
from typing import Any

from cohort.trainer.rounds.messages import Order


class OrderBook:
    """Orders sent and not yet unpacked, prompts to order again first, prompts drawn and not yet ordered.
    ``k``: the staleness bound; ``p``: this learner's groups a round; ``chunk``: groups an order;
    ``rank``/``world``: this learner's share of each draw of ``p * world`` prompts."""

    def __init__(self, k: int, p: int, chunk: int, workers: int, rank: int = 0, world: int = 1) -> None:
        self.k, self.p, self.chunk, self.workers, self.rank, self.world = k, p, chunk, workers, rank, world
        self.orders: dict[int, tuple[int, Order]] = {}  # id -> (worker rank, order): sent, not yet unpacked
        self.requeue: collections.deque[int] = collections.deque()  # prompts to order again, first
        self.mine: collections.deque[int] = collections.deque()  # drawn for this learner, not yet ordered
        self.draws = 0  # draws of p * world prompts from the sampler
        self.next_id = 0
        self.dropped_stale = 0

    def outstanding(self, ready: int) -> int:
        """Groups ordered and not consumed: in orders out (or arrived, not unpacked), and ``ready`` unpacked."""
        return sum(len(order.idx) for _, order in self.orders.values()) + ready

    def admit(self, remaining: int, ready: int, version: int, prompt_ids: list[list[int]],
              sampler: Any) -> list[tuple[int, Order]]:
        """The orders to send now, each to the least loaded worker: until k * P + ``remaining`` (the groups the
        round being built still needs) are ordered and not consumed. Consumed in order, the j-th of them
        (0-based) goes into the round after ``(j - remaining) // P`` more updates, so an order sent at version v
        is consumed at version v + k at the latest."""
        out = []
        while self.outstanding(ready) + self.chunk <= self.k * self.p + remaining:
            n_old = min(self.chunk, len(self.requeue))
            idx = [self.requeue.popleft() for _ in range(n_old)] + self._draw(self.chunk - n_old, sampler)
            order = Order(self.next_id, idx, [prompt_ids[i] for i in idx], version)
            self.next_id += 1
            load = {r: 0 for r in range(1, 1 + self.workers)}
            for r, o in self.orders.values():  # every order out of each worker (not only its last)
                load[r] += len(o.idx)
            worker = min(load, key=lambda r: (load[r], r))
            self.orders[order.id] = (worker, order)
            out.append((worker, order))
        return out

    def unpack(self, order_id: int) -> Order:
        """An order whose rows arrived, out of the book (its groups are counted as ``ready`` from now on)."""
        return self.orders.pop(order_id)[1]

    def stale(self, idx: int, generated: int, version: int) -> bool:
        """Rejection: whether a group of prompt ``idx`` generated with version ``generated`` is more than k
        versions behind ``version``; if it is, it is counted and its prompt ordered again first."""
        if version - generated <= self.k:
            return False
        self.dropped_stale += 1
        self.requeue.append(idx)
        return True

    def lose(self, arrived: set[int]) -> list[Order]:
        """The workers are gone: every order out that had not arrived is taken back and its prompts ordered
        again first, in order (arrivals stay: their scores are on the way); the orders lost."""
        lost = [order for oid, (_, order) in sorted(self.orders.items()) if oid not in arrived]
        for order in lost:
            del self.orders[order.id]
        self.requeue.extendleft(reversed([i for order in lost for i in order.idx]))
        return lost

    def _draw(self, n: int, sampler: Any) -> list[int]:
        """``n`` new prompts for this learner: its share of each draw (all of it with one learner)."""
        while len(self.mine) < n:
            self.draw_to(self.draws + 1, sampler)
        return [self.mine.popleft() for _ in range(n)]

    def draw_to(self, draws: int, sampler: Any) -> None:
        """Draw on until ``draws`` draws were made (the learners agree on one sampler position before a save)."""
        while self.draws < draws:
            drawn = sampler.next(self.p * self.world)
            self.mine.extend(drawn[self.rank * self.p:(self.rank + 1) * self.p])
            self.draws += 1

    def pending(self, ready: list[int]) -> list[int]:
        """Every prompt drawn for this learner and not consumed (``ready``: those unpacked, waiting): ordered
        again first on resume."""
        ordered = [i for _, order in self.orders.values() for i in order.idx]
        return [*self.requeue, *ordered, *ready, *self.mine]

    def load(self, pending: list[int]) -> None:
        self.requeue = collections.deque(pending)
