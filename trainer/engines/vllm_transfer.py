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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from cohort.trainer.engines.vllm_server import BACKEND, join_transfer_group


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


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        if self.parallel_config.world_size != 1:
            raise ValueError(f"the {BACKEND} weight transfer serves one rank (tensor/pipeline parallel size 1); "
                             f"this server has {self.parallel_config.world_size}")
        self.shutdown()
        self.group = join_transfer_group(init_info.master_address, init_info.master_port, init_info.rank,
                                         init_info.world_size, init_info.timeout_s)

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
        if self.group is None:
            raise RuntimeError(f"{BACKEND} weight transfer not initialised: call init_weight_transfer_engine first")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes,
                                           strict=True):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name))
            self.group.broadcast(weight, 0).wait()
            self.model.load_weights([(name, weight.to(self.device))])

    def shutdown(self) -> None:
        if self.group is not None:
            self.group.shutdown()
            self.group = None


def register() -> None:
    """The ``vllm.general_plugins`` entry point (vLLM may call it several times, in several processes)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, GlooWeightTransferEngine.__name__)
