"""Fair admission on a server's event loop: who of the calls waiting for a scarce place (an RPC thread, a
sandbox slot) goes next.

One :class:`FairGate` holds up to ``capacity`` places in all (0: no overall cap) and gives one key (a
tenant, a session) at most ``per_key`` of them (with ``spill``, only while other keys wait). A call that finds no place waits on the event loop,
holding nothing; when a place frees, the waiter whose key has used the least place-time recently
(:meth:`FairGate.release` charges it) goes first, the oldest among equals. So a key whose calls all run to
their deadline is served after a key that asks for the first time: a hostile tenant or session cannot push
everyone else to the back of the queue. A key with ``per_key + max_waiting`` calls running or waiting is
:meth:`~FairGate.full` (the server refuses more). A waiter gives up when its own ``timeout`` passes
(:meth:`~FairGate.acquire` returns False: the caller answers "busy") or when it is cancelled (its client
gave up): either way it never held a place. Calls with the key ``""`` are not gated.

Event-loop only, by design: every call enters and leaves it on the loop (work on threads gives its place
back through ``loop.call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass

from cachetools import TTLCache

USAGE_TTL_S = 600.0
"""A key's place-time is forgotten this long after its last call ended (its priority is then a newcomer's)."""
USAGE_KEYS = 1 << 16


@dataclass(eq=False)
class _Waiter:
    key: str
    seq: int
    granted: asyncio.Future


class FairGate:
    def __init__(self, per_key: int, max_waiting: int = 1 << 30, capacity: int = 0, spill: bool = False) -> None:
        """``spill``: a key at its cap may still take a free place while no other key waits (no place idles
        while there is work); the cap then holds only against the other keys' waiting calls."""
        if per_key < 1 or max_waiting < 0 or capacity < 0:
            raise ValueError("per_key must be >= 1, max_waiting and capacity >= 0")
        if spill and not capacity:
            raise ValueError("spill needs an overall capacity")
        self.per_key, self.max_waiting, self.capacity, self.spill = per_key, max_waiting, capacity, spill
        self._users: Counter[str] = Counter()  # running + waiting, per key
        self._running: Counter[str] = Counter()
        self._waiters: list[_Waiter] = []
        self._usage: TTLCache = TTLCache(USAGE_KEYS, USAGE_TTL_S)  # key -> place-seconds charged
        self._seq = itertools.count()

    @property
    def running(self) -> int:
        return sum(self._running.values())

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def idle(self) -> bool:
        """Nothing running or waiting (and no per-key state left behind)."""
        return not self._users and not self._running and not self._waiters

    def full(self, key: str) -> bool:
        """Would one more call of ``key`` be refused?"""
        return bool(key) and self._users[key] >= self.per_key + self.max_waiting

    async def acquire(self, key: str, timeout: float | None = None) -> bool:
        """Wait for a place (pair with :meth:`release`); False when ``timeout`` passed first (no place held)."""
        if not key:
            return True
        self._users[key] += 1
        waiter = _Waiter(key, next(self._seq), asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._dispatch()
        try:
            if not waiter.granted.done():
                await asyncio.wait({waiter.granted}, timeout=None if timeout is None else max(0.0, timeout))
        except BaseException:  # cancelled while waiting (the client gave up)
            if waiter.granted.done():
                self.release(key)
            else:
                self._leave(waiter)
            raise
        if waiter.granted.done():
            return True
        self._leave(waiter)
        return False

    def release(self, key: str, held_s: float = 0.0) -> None:
        """Give a place back, charging ``held_s`` seconds of it to ``key``."""
        if not key:
            return
        self._usage[key] = self._usage.get(key, 0.0) + max(0.0, held_s)
        self._running[key] -= 1
        if not self._running[key]:
            del self._running[key]
        self._forget(key)
        self._dispatch()

    def _leave(self, waiter: _Waiter) -> None:
        self._waiters.remove(waiter)
        self._forget(waiter.key)
        self._dispatch()  # a waiter of another key may have been behind it only by order

    def _forget(self, key: str) -> None:
        self._users[key] -= 1
        if not self._users[key]:
            del self._users[key]

    def _dispatch(self) -> None:
        while self._waiters and (not self.capacity or self.running < self.capacity):
            ready = [w for w in self._waiters if self._running[w.key] < self.per_key]
            if not ready and self.spill:
                ready = self._waiters
            if not ready:
                return
            best = min(ready, key=lambda w: (self._usage.get(w.key, 0.0), w.seq))
            self._waiters.remove(best)
            self._running[best.key] += 1
            best.granted.set_result(True)


__all__ = ["FairGate"]
