"""Cohort's backend for vLLM's native weight-transfer API, loaded inside a ``vllm serve`` process.

vLLM 0.32's built-in transfer backends are NCCL and CUDA IPC. This one broadcasts the weights over gloo (so it
runs on CPU, and across machines over TCP), and loads them the way vLLM's NCCL backend does: the layerwise
reload lifecycle (``start_weight_update`` -> ``load_weights`` per tensor -> ``finish_weight_update``), which
repacks weights for backends that transform them after loading (vLLM's CPU backend does).

With Cohort installed beside vLLM, the ``vllm.general_plugins`` entry point ``cohort`` registers it in every
vLLM process, so that a server started with::

    VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config '{"backend": "cohort-gloo"}' \\
        --logprobs-mode processed_logprobs

takes weights from ``rollout.engine=vllm-server`` (``trainer.engines.vllm_server``, the sending side, which
needs no vLLM). One tensor-parallel rank per server (``tensor_parallel_size`` 1).

A weight update is one flat buffer (``trainer.flat_layout``: every tensor in one dtype, end to end), sent whole
(``kind: full``: one broadcast) or as a delta against the version this receiver holds (``kind: delta``: the
indices of the elements that changed, then their new values: two broadcasts). The receiver keeps the buffer
(:class:`FlatReceiver`, a host copy of the weights in the pushed dtype) to apply deltas to, and loads every
tensor from it after each update: a delta saves the transfer, not the load. A delta against another version
than the one held is refused (the sender then pushes in full). :class:`FlatReceiver` needs no vLLM (a
stand-in server uses it in tests/vllm/standin.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from cohort.trainer.engines.vllm_server import BACKEND, join_transfer_group
from cohort.trainer.flat_layout import FlatLayout


class StaleDelta(RuntimeError):
    """A delta against another version than the one held (the sender pushes in full instead)."""


class FlatReceiver:
    """The receiving end of one transfer group: the newest flat buffer and its version."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.flat: torch.Tensor | None = None
        self.layout: FlatLayout | None = None
        self.version = -1

    def receive(self, info: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
        """Take one update (``info``: the layout, ``kind``, ``version``, for a delta ``base_version``, ``count``
        and ``index_dtype``) from the group; the updated tensors, views of the buffer held."""
        layout = FlatLayout.from_info(info)
        if info.get("kind", "full") == "full":
            flat = torch.empty(layout.numel, dtype=layout.dtype)
            self.group.broadcast(flat, 0).wait()
            self.flat, self.layout = flat, layout
        else:
            if self.flat is None or self.layout != layout or self.version != int(info["base_version"]):
                raise StaleDelta(f"a delta against version {info['base_version']}; this server holds version "
                                 f"{self.version}: push in full")
            count = int(info["count"])
            index = torch.empty(count, dtype=getattr(torch, info["index_dtype"]))
            values = torch.empty(count, dtype=layout.dtype)
            self.group.broadcast(index, 0).wait()
            self.group.broadcast(values, 0).wait()
            self.flat[index.long() if index.dtype != torch.int64 else index] = values
        self.version = int(info["version"])
        return layout.views(self.flat)

    def forget(self) -> None:
        """Drop the buffer (a delta after this is refused)."""
        self.flat, self.layout, self.version = None, None, -1


try:
    from vllm.distributed.weight_transfer.base import (
        WeightTransferEngine,
        WeightTransferInitInfo,
        WeightTransferUpdateInfo,
    )
except ImportError:  # a stand-in receiver (tests) imports FlatReceiver without vLLM
    WeightTransferEngine = None

if WeightTransferEngine is not None:
    @dataclass
    class GlooInitInfo(WeightTransferInitInfo):
        master_address: str
        master_port: int
        world_size: int = 2
        rank: int = 1
        timeout_s: float = 120.0

    @dataclass
    class GlooUpdateInfo(WeightTransferUpdateInfo):
        names: list[str]
        dtype_names: list[str]
        shapes: list[list[int]]
        kind: str = "full"
        version: int = 0
        base_version: int = -1
        count: int = 0
        index_dtype: str = "int64"

    class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
        init_info_cls = GlooInitInfo
        update_info_cls = GlooUpdateInfo
        supports_draft_weight_update = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.receiver: FlatReceiver | None = None

        def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
            if self.parallel_config.world_size != 1:
                raise ValueError(f"the {BACKEND} weight transfer serves one rank (tensor/pipeline parallel size 1); "
                                 f"this server has {self.parallel_config.world_size}")
            self.shutdown()
            self.receiver = FlatReceiver(join_transfer_group(init_info.master_address, init_info.master_port,
                                                             init_info.rank, init_info.world_size,
                                                             init_info.timeout_s))

        def start_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)

        def finish_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            finalize_layerwise_reload(self.model, self.model_config)

        def update_weights(self, update_info: dict[str, Any]) -> None:
            self.receive_weights(self.parse_update_info(update_info))
            if torch.accelerator.is_available():  # the base class synchronises unconditionally, which fails on CPU
                torch.accelerator.synchronize()

        def receive_weights(self, update_info: GlooUpdateInfo) -> None:
            if self.receiver is None:
                raise RuntimeError(f"{BACKEND} weight transfer not initialised: call init_weight_transfer_engine "
                                   "first")
            for name, weight in self.receiver.receive(vars(update_info)):
                self.model.load_weights([(name, weight.to(self.device))])

        def shutdown(self) -> None:
            if self.receiver is not None:
                self.receiver.group.shutdown()
                self.receiver = None


def register() -> None:
    """The ``vllm.general_plugins`` entry point (vLLM may call it several times, in several processes)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, "GlooWeightTransferEngine")
