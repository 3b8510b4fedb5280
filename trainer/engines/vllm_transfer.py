"""Cohort's backend for vLLM's native weight-transfer API, loaded inside a ``vllm serve`` process.

vLLM 0.32's built-in transfer backends are NCCL and CUDA IPC, each with its own trainer side in vLLM. This one,
``cohort-gloo``, takes Cohort's protocol (``trainer.engines.weight_stream``: a flat buffer in buckets, full or as
a delta) over one of three transports chosen by the sender at init (``transport``: gloo through host memory,
so CPU servers and other machines; nccl; CUDA ipc), and loads the weights the way vLLM's NCCL backend does: the
layerwise reload lifecycle (``start_weight_update`` -> ``load_weights`` per tensor -> ``finish_weight_update``),
which repacks weights for backends that transform them after loading (vLLM's CPU backend does).

With Cohort installed beside vLLM, the ``vllm.general_plugins`` entry point ``cohort`` registers it in every
vLLM process, so that a server started with::

    VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config '{"backend": "cohort-gloo"}' \\
        --logprobs-mode processed_logprobs

takes weights from ``rollout.engine=vllm-server`` (``trainer.engines.vllm_server``, the sending side, which
needs no vLLM). Every rank of the server joins the group (the sender reads its world size from
``GET /get_world_size``; each rank's place is ``rank_offset`` + its data-parallel index times the tensor x
pipeline size + its rank, as vLLM's NCCL backend counts): a tensor-parallel rank receives the whole buffer and
loads its shard from it. Each rank keeps the buffer (:class:`~cohort.trainer.engines.weight_stream.FlatReceiver`,
a host copy of the weights in the pushed dtype) to apply deltas to, and loads every tensor from it after each
update: a delta saves the transfer, not the load. A delta against another version than the one held is refused
(the sender then pushes in full).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cohort.trainer.engines.weight_stream import BACKEND, FlatReceiver, open_channel

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
        world_size: int = 2  # 1 (the sender) + this server's ranks (GET /get_world_size)
        rank_offset: int = 1  # this server's first rank in the group
        timeout_s: float = 120.0
        transport: str = "gloo"  # gloo | nccl | ipc (trainer.engines.weight_stream)
        bucket_bytes: int = 16 * 2**20

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
        bucket_numel: int = 0

    class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
        init_info_cls = GlooInitInfo
        update_info_cls = GlooUpdateInfo
        supports_draft_weight_update = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.receiver: FlatReceiver | None = None

        def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
            # every rank of the server (tensor, pipeline and data parallel) joins, as vLLM's NCCL backend counts them
            pc = self.parallel_config
            rank = init_info.rank_offset + getattr(pc, "data_parallel_index", 0) * pc.world_size + pc.rank
            self.shutdown()
            device = self.device if init_info.transport != "gloo" else None
            self.receiver = FlatReceiver(open_channel(init_info.transport, init_info.master_address,
                                                      init_info.master_port, rank, init_info.world_size,
                                                      init_info.timeout_s, init_info.bucket_bytes, device))

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
                self.receiver.channel.shutdown()
                self.receiver = None


def register() -> None:
    """The ``vllm.general_plugins`` entry point (vLLM may call it several times, in several processes)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, "GlooWeightTransferEngine")
