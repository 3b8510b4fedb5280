"""What a flat weight buffer holds: the names, shapes and dtype of the tensors laid end to end in it.

A weight push (``trainer.wire.flat_parameters``) is one 1-D tensor: the pushed parameters in ``parameters()``
order, in one dtype (the engines' compute dtype). A process that only forwards it (a ``vllm-server`` rollout
worker: ``trainer.rollout_worker``) needs no model to know what it holds: the learner sends this layout once,
and the buffer's tensors are views of it (:meth:`FlatLayout.views`, no copy).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class FlatLayout:
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype

    @staticmethod
    def of(model: torch.nn.Module, dtype: torch.dtype | None = None) -> FlatLayout:
        """The layout of ``wire.flat_parameters(model, dtype=dtype)``: the trained parameters (tied ones once, as
        ``parameters()`` yields them) under their ``named_parameters`` names."""
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("the model has no trained parameters to push")
        return FlatLayout(tuple(n for n, _ in named), tuple(tuple(p.shape) for _, p in named),
                          dtype or named[0][1].dtype)

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def views(self, flat: Tensor) -> Iterator[tuple[str, Tensor]]:
        """(name, tensor) for each tensor of ``flat``: views, no copy."""
        if flat.dim() != 1 or flat.numel() != self.numel or flat.dtype != self.dtype:
            raise ValueError(f"a flat buffer of {flat.numel()} {flat.dtype} does not hold this layout "
                             f"({self.numel} {self.dtype})")
        offset = 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            n = math.prod(shape)
            yield name, flat[offset:offset + n].view(shape)
            offset += n

    def info(self) -> dict[str, Any]:
        """The layout as JSON (a ``vllm serve`` weight update's ``update_info``)."""
        dtype = str(self.dtype).removeprefix("torch.")
        return {"names": list(self.names), "dtype_names": [dtype] * len(self.names),
                "shapes": [list(s) for s in self.shapes]}

    @staticmethod
    def from_info(info: dict[str, Any]) -> FlatLayout:
        """:meth:`info` read back (one dtype for the whole buffer)."""
        dtypes = set(info["dtype_names"])
        if len(dtypes) != 1:
            raise ValueError(f"a flat buffer holds one dtype, not {sorted(dtypes)}")
        return FlatLayout(tuple(info["names"]), tuple(tuple(int(d) for d in s) for s in info["shapes"]),
                          getattr(torch, dtypes.pop()))


@dataclass(frozen=True)
class FlatWeights:
    """A weight version as a relay receives it: one flat buffer and what it holds."""
    flat: Tensor
    layout: FlatLayout
