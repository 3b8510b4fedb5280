"""The learner and its rollout workers over torch.distributed (gloo): messages and weights.

Three gloo process groups of their own over the same ranks (rank 0 the learner, ranks 1..N its rollout
workers), each used by one thread per process, so no two threads ever share a communicator. They are never the
default process group: a DDP/FSDP2 learner's default group is its fellow learners', and each learner rank leads
a job of its own with its private workers.

- ``weights``: the learner broadcasts every new weight version (a header ``[version, numel]``, then the
  parameters flattened to one tensor); a version of -1 ends the workers' weight thread.
- ``down``: the learner's work orders to one worker (point to point).
- ``up``: a worker's generated groups to the learner (point to point, received from any worker).

A message is a pickled object sent as its length, then its bytes. Pickle is safe here: both ends are
processes of the same job started by the same user (as torch.distributed's own ``send_object_list``);
nothing received from outside the job is ever unpickled. Why torch.distributed rather than a queue: the
same code runs with the workers on this machine (spawned, a file rendezvous) and on other machines
(``torchrun``, env:// rendezvous). The groups are gloo, so weights on a GPU go through host memory, page-locked
at both ends (``flat_parameters`` into the learner's buffers, ``receive_weights(pin=True)``) so that the copies run
at the bus's speed; an NCCL weights group, device to device, is not built.
"""

from __future__ import annotations

import datetime
import pickle
import threading
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

LEARNER = 0
PG_TIMEOUT = datetime.timedelta(days=1)
"""Blocking receives wait this long: a worker may idle for a whole long update. Hung weight syncs are caught
by the learner's own deadline (``rollout.weight_sync_timeout_s``), a dead peer by its closed connection or,
when gloo misses it, by the pipeline's watch of the processes; the groups of a job left behind are let go by
:meth:`Links.retire`, never on the learner's thread."""


@dataclass(frozen=True)
class Links:
    weights: Any
    down: Any
    up: Any

    @staticmethod
    def join(init_method: str, rank: int, world_size: int) -> Links:
        """Join the job (every rank calls this, in the same order) and make the three groups: the rendezvous's
        store, one prefix per group (the groups' ops are called on the group objects: they are not registered
        in torch.distributed's world)."""
        store, rank, world_size = next(dist.rendezvous(init_method, rank, world_size, timeout=PG_TIMEOUT))
        return Links(*(dist.ProcessGroupGloo(dist.PrefixStore(f"cohort-pipeline/{name}", store), rank, world_size,
                                             PG_TIMEOUT) for name in ("weights", "down", "up")))

    def leave(self) -> None:
        for group in (self.weights, self.down, self.up):
            try:
                group.shutdown()
            except RuntimeError:  # a peer is gone already
                pass

    def retire(self, in_flight: list, leave: bool = True) -> None:
        """Leave the job (the learner, when its workers were stopped or died; unless not ``leave``: a thread of the
        caller's is still blocked in one of the groups). With operations still ``in_flight`` (the last weight
        broadcast's works), in the background: a daemon thread waits for them, leaves, and only then lets the
        groups go. Why: gloo does not always fail an operation whose peer died (a broadcast to a SIGKILLed worker
        stayed blocked in gloo's ``waitSend``), and a group's destructor joins the thread running it, so the
        learner dropping its last reference to the old groups hung there, in C++, where no signal reaches Python.
        The thread holds the groups until their operations end; a group whose operation never ends is never
        destroyed. With nothing in flight, at once (a daemon thread still destroying groups when the interpreter
        exits aborts the process)."""

        def retire() -> None:
            for work in in_flight:
                try:
                    work.wait()
                except RuntimeError:  # its peer is gone: the operation ended with an error
                    pass
            if leave:
                self.leave()

        if not in_flight:
            retire()
            return
        threading.Thread(target=retire, daemon=True, name="pipeline-retire").start()


def send(obj: Any, dst: int, group) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    group.send([torch.tensor([len(data)], dtype=torch.int64)], dst, 0).wait()
    group.send([torch.frombuffer(bytearray(data), dtype=torch.uint8)], dst, 0).wait()


def receive(group, src: int | None = None) -> tuple[int, Any]:
    """(sender rank, object): from ``src``, or from any rank of ``group`` when None."""
    size = torch.zeros(1, dtype=torch.int64)
    if src is None:
        work = group.recv_anysource([size], 0)
        work.wait()
        src = work._source_rank()
    else:
        group.recv([size], src, 0).wait()
    data = torch.empty(int(size), dtype=torch.uint8)
    group.recv([data], src, 0).wait()
    return src, pickle.loads(data.numpy().tobytes())


def pushed_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What a weight push carries, in ``parameters()`` order: the trained parameters (every one, or a LoRA policy's
    adapters: the workers build the same frozen base themselves)."""
    return [p for p in model.parameters() if p.requires_grad]


def flat_parameters(model: torch.nn.Module, out: Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
    """The pushed parameters (:func:`pushed_parameters`) in ``dtype`` (the engines' compute dtype; default the
    parameters' own), in ``parameters()`` order, as one 1-D tensor in host memory (a snapshot: the model may move
    on), written into ``out`` when it fits (the caller's buffer, reused from version to version; else a new one,
    page-locked for a model on a GPU). On the CPU one concatenation straight into it, no copy of the copy (a
    second one cost 0.21 s a step for SmolLM2's 135 M parameters, on the learner's critical path); on a GPU one
    concatenation there and one copy to the host (gloo sends from host memory): for a 0.63 B model on an H200 the
    learner's share of a hand-off was 0.03 s into page-locked memory, against 0.68-0.97 s into pageable memory
    (``bench/gpu_check.sh --overlap``, docs/async.md)."""
    params = [p.detach().reshape(-1) for p in pushed_parameters(model)]
    numel, gpu, dtype = sum(p.numel() for p in params), params[0].is_cuda, dtype or params[0].dtype
    if out is None or out.numel() != numel or out.dtype != dtype:
        out = torch.empty(numel, dtype=dtype, pin_memory=gpu)
    if gpu:
        return out.copy_(torch.cat([p.to(dtype) for p in params]))  # cast on the GPU, one copy to the host
    if dtype != params[0].dtype:
        return torch.cat([p.to(dtype) for p in params], out=out)
    return torch.cat(params, out=out)


def load_flat(model: torch.nn.Module, flat: Tensor) -> None:
    """The parameters become views of ``flat`` (no copy), moved first to the model's device: weights arrive
    on the CPU, and a view of a CPU tensor would move a GPU model's parameters to the CPU."""
    params = pushed_parameters(model)
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(flat.to(params[0].device), params)


CHUNK_BYTES = 16 * 2**20
"""A weight version is broadcast in slices of at most this size, so that a worker that only forwards it (a relay)
never holds more than one slice of it in memory."""


def broadcast_weights(version: int, flat: Tensor, group, chunk_bytes: int = CHUNK_BYTES) -> list:
    """Start the broadcast of one weight version (the learner): a header ``[version, numel, chunk]``, then the
    buffer in slices of ``chunk`` elements; the works to wait on."""
    chunk = max(1, chunk_bytes // flat.element_size())
    header = torch.tensor([version, flat.numel(), chunk], dtype=torch.int64)
    return [group.broadcast(header, LEARNER)] + [group.broadcast(flat[start:start + chunk], LEARNER)
                                                 for start in range(0, flat.numel(), chunk)]


def end_weights(group) -> list:
    return [group.broadcast(torch.tensor([-1, 0, 1], dtype=torch.int64), LEARNER)]


def receive_weights(group, dtype: torch.dtype, pin: bool = False) -> tuple[int, Tensor | None]:
    """The next weight version (a worker); (-1, None) when the learner ends the run. ``pin``: into page-locked
    memory, for a model on a GPU (the copy to the device then runs at the bus's speed; from pageable memory an
    H200 machine copied 1.26 GB in 0.7-1.0 s)."""
    box: dict[str, Tensor] = {}

    def into(numel: int) -> Tensor:
        box["flat"] = torch.empty(numel, dtype=dtype, pin_memory=pin)
        return box["flat"]

    version = receive_weights_to(group, dtype, into)
    return (-1, None) if version < 0 else (version, box["flat"])


def receive_weights_to(group, dtype: torch.dtype, into, sink=None) -> int:
    """The next weight version's number (-1: the learner ends the run), its slices received into ``into(numel)``
    (a buffer), or, with ``sink`` (``sink(version, numel)``: an object with ``write(slice)`` and ``close()``), each
    slice received into one reused buffer and handed to the sink (a relay's spool: memory of one slice)."""
    header = torch.zeros(3, dtype=torch.int64)
    group.broadcast(header, LEARNER).wait()
    version, numel, chunk = (int(x) for x in header)
    if version < 0:
        return -1
    if sink is None:
        flat = into(numel)
        for start in range(0, numel, chunk):
            group.broadcast(flat[start:start + chunk], LEARNER).wait()
        return version
    out, buf = sink(version, numel), torch.empty(min(chunk, numel), dtype=dtype)
    try:
        for start in range(0, numel, chunk):
            piece = buf[:min(chunk, numel - start)]
            group.broadcast(piece, LEARNER).wait()
            out.write(piece)
    finally:
        out.close()
    return version
