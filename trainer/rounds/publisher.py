"""The pipeline's weight publisher: each new version flattened into host memory and broadcast to the
workers while the learner goes on. Knows the policy and the weights group, nothing of workers or orders.

The versions alternate between two buffers (page-locked for a policy on a GPU): version v is written into
``v % 2`` while v - 1 may still be on the wire; v - 2's broadcast was done before v - 1's began.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch

from cohort.trainer import distributed, wire
from cohort.trainer.flat_layout import FlatLayout


class SyncTimedOut(RuntimeError):
    """A broadcast did not finish within its time (the message is torch's)."""


class WeightPublisher:
    """Flat snapshots of the policy in ``dtype`` (the compute dtype: bf16 under mixed precision), and their
    broadcasts on a weights group."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._buffers: list[torch.Tensor | None] = [None, None]
        self.flat: torch.Tensor | None = None  # the current version's weights (alive until its broadcast is done)
        self._works: list = []

    def snapshot(self, policy: torch.nn.Module, version: int) -> None:
        """The policy's full weights, flat, as version ``version`` (FSDP2: gathered from every learner's shards,
        so collective), into the buffer the previous version's broadcast is not using."""
        slot = version % 2
        with distributed.gathered(policy):
            self._buffers[slot] = wire.flat_parameters(distributed.unwrap(policy), self._buffers[slot], self.dtype)
        self.flat = self._buffers[slot]

    def layout(self, policy: torch.nn.Module) -> FlatLayout:
        """What the buffers hold (names, shapes, dtype): a relay worker's first message."""
        return FlatLayout.of(distributed.unwrap(policy), self.dtype)

    def broadcast(self, version: int, group: Any, timeout_s: float) -> None:
        """The current snapshot as ``version`` to the group (the previous broadcast done first, within
        ``timeout_s``); returns while it is on the wire."""
        self.wait(timeout_s)
        self._works = wire.broadcast_weights(version, self.flat, group)

    def wait(self, timeout_s: float) -> None:
        """The broadcast in flight done, within ``timeout_s``; else :class:`SyncTimedOut` (what is not done stays
        in flight: :meth:`release`)."""
        while self._works:
            try:
                self._works[0].wait(timeout=datetime.timedelta(seconds=timeout_s))
            except RuntimeError as exc:
                raise SyncTimedOut(str(exc)) from None
            self._works.pop(0)

    def end(self, group: Any, timeout_s: float) -> None:
        """The last broadcast done, then the end of the workers' weight threads."""
        self.wait(timeout_s)
        self._works = wire.end_weights(group)
        self.wait(timeout_s)

    def release(self) -> list:
        """The broadcast in flight, no longer waited for here (its group is being left: the workers were stopped);
        the works, for :meth:`wire.Links.retire`."""
        works, self._works = self._works, []
        return works
