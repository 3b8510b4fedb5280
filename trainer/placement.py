"""Which device each process of a run takes: the learner, and each rollout worker with its engine.

Pure functions of the config and a GPU count (given as an argument, so the logic is tested on a machine without
GPUs), and two thin helpers that read this machine (:func:`gpu_count`) or build a spawned worker's environment
(:func:`worker_env`). Nothing here imports torch.

- **The learner**: ``model.device`` (``auto``: GPU ``$LOCAL_RANK``, else 0, when there is one; ``cuda:k``: GPU k).
  Under ``distributed.parallel`` every learner rank l of a node holds GPU l.
- **A rollout worker** (the asynchronous pipeline, spawned by its learner: ``trainer.spawn_workers``):
  ``rollout.worker_devices`` (entry r - 1 for worker r; one entry for every worker; ``auto``, ``cpu`` or
  ``cuda:k``, indices as the learner sees them). ``auto``, the default on an N-GPU node: the GPUs no learner holds,
  one per worker in order (learner 0's workers first); with a CPU learner, the CPU. A worker with no free GPU left
  takes its learner's (the check below then refuses the run unless ``rollout.colocate``). The worker sees only its
  own GPU (``CUDA_VISIBLE_DEVICES``), so its engine, the in-process vLLM engine core included, lands on it.
- **A relay** (``rollout.engine=vllm-server``) holds no model: with ``rollout.vllm.transfer_backend: gloo`` it
  touches no device (``none``; it sees no GPU); with ``nccl`` or ``ipc`` it stages buckets of weights on a GPU
  (``auto``: its learner's; for ``ipc`` it must be the server's), a claim that shares (a bucket, not a model).
- **The check** (:func:`check`, at ``cohort train``'s start: exit 2 and one line): two processes never claim one
  GPU unless ``rollout.colocate`` (each would size its memory as if it were alone), and every GPU named exists.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from typing import Any

NONE = "none"
"""A process that touches no device (a gloo relay)."""


class PlacementError(ValueError):
    """A placement that cannot run as configured (one line naming the fix)."""


@dataclass(frozen=True)
class Claim:
    role: str  # "the learner", "learner rank 1", "rollout worker 2", "rollout worker 1 of learner rank 1"
    device: str  # cpu | cuda:k | none
    shares: bool = False  # a relay's staging bucket: it never excludes another process

    @property
    def gpu(self) -> int | None:
        return int(self.device.split(":")[1]) if self.device.startswith("cuda:") else None


def _gpu_index(device: str, what: str, gpus: int) -> int:
    if not device.startswith("cuda:") or not device[5:].isdigit():
        raise PlacementError(f"{what}={device}: a device is auto, cpu or cuda:INDEX")
    index = int(device[5:])
    if index >= gpus:
        raise PlacementError(f"{what}={device} names GPU {index} but this machine has {gpus} GPU(s) "
                             f"(indices 0-{gpus - 1})" if gpus else
                             f"{what}={device} names a GPU but this machine has none: use cpu or auto")
    return index


def learner_device(device: str, gpus: int, local_rank: int = 0, learners: int = 1) -> str:
    """``model.device`` of learner ``local_rank`` (its index among the node's ``learners``) as ``cpu`` or
    ``cuda:k``; ``auto`` is the CPU for all of them unless each has a GPU (``trainer.distributed.local_device``)."""
    if device == "cpu" or (device == "auto" and gpus < learners):
        return "cpu"
    if device in ("auto", "cuda"):
        if local_rank >= gpus:
            raise PlacementError(f"model.device={device}: learner {local_rank} of this node has no GPU "
                                 f"({gpus} seen)")
        return f"cuda:{local_rank}"
    return f"cuda:{_gpu_index(device, 'model.device', gpus)}"


def plan(gpus: int, *, learner: str = "auto", workers: int = 1, engine: str = "transformers",
         worker_devices: tuple[str, ...] | list[str] = (), transfer_backend: str = "gloo",
         learners: int = 1) -> list[Claim]:
    """Every claim of the processes of one node: its ``learners`` learners (ranks 0..L-1: GPU l each when they
    have GPUs) and each one's ``workers`` rollout workers, for a node with ``gpus`` GPUs."""
    claims: list[Claim] = []
    for rank in range(learners):
        claims.append(Claim("the learner" if learners == 1 else f"learner rank {rank}",
                            learner_device(learner, gpus, rank, learners)))
    held = {c.gpu for c in claims if c.gpu is not None}
    free = [g for g in range(gpus) if g not in held]
    if worker_devices and len(worker_devices) not in (1, workers):
        raise PlacementError(f"rollout.worker_devices has {len(worker_devices)} entries for rollout.workers="
                             f"{workers}: give one per worker, or one for all")
    relay = engine == "vllm-server"
    for rank in range(learners):
        own = claims[rank]
        of = "" if learners == 1 else f" of learner rank {rank}"
        for w in range(workers):
            asked = worker_devices[0 if len(worker_devices) == 1 else w] if worker_devices else "auto"
            what = f"rollout.worker_devices[{w}]"
            if asked not in ("auto", "cpu"):
                asked = f"cuda:{_gpu_index(asked, what, gpus)}"
            if relay and transfer_backend == "gloo":
                device = NONE  # its servers hold the model; weights go through host memory
            elif relay:  # a staging bucket on a GPU (nccl: any; ipc: the server's, which only the user knows)
                device = own.device if asked == "auto" else asked
                if device == "cpu":
                    raise PlacementError(f"rollout.vllm.transfer_backend={transfer_backend} stages weights on a GPU: "
                                         f"rollout worker {w + 1}{of} has none (use gloo, or give it a cuda device "
                                         "in rollout.worker_devices)")
            elif asked != "auto":
                device = asked
            elif own.gpu is None:
                device = "cpu"
            else:
                k = rank * workers + w
                device = f"cuda:{free[k]}" if k < len(free) else own.device
            claims.append(Claim(f"rollout worker {w + 1}{of}", device, shares=relay))
    return claims


def check(claims: list[Claim], colocate: bool = False) -> None:
    """Refuse two processes claiming one GPU (unless ``colocate``): one line naming them and the fix."""
    if colocate:
        return
    owner: dict[int, Claim] = {}
    for claim in claims:
        if claim.gpu is None or claim.shares:
            continue
        if claim.gpu in owner:
            first = owner[claim.gpu]
            raise PlacementError(
                f"{claim.role} and {first.role} both claim cuda:{claim.gpu}: give each process its own GPU "
                "(rollout.worker_devices=[cuda:K, ...], fewer rollout.workers, or more GPUs), or set "
                "rollout.colocate=true to share it")
        owner[claim.gpu] = claim


def plan_config(cfg: Any, gpus: int) -> list[Claim]:
    """:func:`plan` for a ``TrainConfig`` (its learners on this node: ``$LOCAL_WORLD_SIZE`` under torchrun)."""
    r = cfg.rollout
    learners = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if cfg.distributed.parallel != "none" else 1
    if not r.max_staleness:  # lock-step: one process per learner, its engine inside it
        return plan(gpus, learner=cfg.model.device, workers=0, learners=learners)
    return plan(gpus, learner=cfg.model.device, workers=r.workers, engine=r.engine,
                worker_devices=list(r.worker_devices), transfer_backend=r.vllm.transfer_backend, learners=learners)


def check_config(cfg: Any, gpus: int | None = None) -> list[Claim]:
    """:func:`plan_config` checked (``gpus``: default this machine's); the claims."""
    claims = plan_config(cfg, gpu_count() if gpus is None else gpus)
    check(claims, cfg.rollout.colocate)
    return claims


def gpu_count() -> int:
    """This machine's GPUs as this process may use them, without importing torch when it is not loaded yet
    (``trainer.spawn_workers`` starts the workers before torch is imported): ``CUDA_VISIBLE_DEVICES`` when
    set, else the NVIDIA device files."""
    if "torch" in sys.modules:
        return sys.modules["torch"].cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e for e in visible.split(",") if e.strip()]
        return len(entries[:entries.index("-1")] if "-1" in entries else entries)
    return len(glob.glob("/dev/nvidia[0-9]*"))


def worker_env(device: str, visible: str | None, gpus: int) -> tuple[dict[str, str], str | None]:
    """A spawned worker's ``CUDA_VISIBLE_DEVICES`` (its one GPU, as the parent's ``visible`` names it) and its
    ``model.device`` override; nothing on a machine without GPUs (the worker runs as before)."""
    if gpus == 0:
        return {}, None
    if device in (NONE, "cpu"):
        return {"CUDA_VISIBLE_DEVICES": ""}, "cpu"
    index = int(device.split(":")[1])
    entries = [e.strip() for e in visible.split(",")] if visible else [str(i) for i in range(gpus)]
    return {"CUDA_VISIBLE_DEVICES": entries[index]}, "cuda"


def spawn_plan(cfg: Any, learner: int = 0) -> list[tuple[dict[str, str], str | None]]:
    """For ``trainer.spawn_workers``: each of learner rank ``learner``'s workers' environment and ``model.device``
    (unchecked: ``cohort train`` checked the claims at start; a direct ``train()`` call may colocate)."""
    gpus, w = gpu_count(), cfg.rollout.workers
    claims = plan_config(cfg, gpus)
    learners = len(claims) // (1 + w)
    local = int(os.environ.get("LOCAL_RANK", learner)) % learners  # this learner's index on its node
    mine = claims[learners + local * w:learners + (local + 1) * w]
    return [worker_env(c.device, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus) for c in mine]
