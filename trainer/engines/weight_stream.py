"""Weight versions streamed in buckets: ``cohort-gloo``'s protocol and its three transports (no vLLM here).

A weight version is one flat buffer (``trainer.flat_layout``: every pushed tensor in one dtype, end to end). It
goes from a sender (rank 0: the lock-step learner, or a relay worker) to every rank of a server's transfer group
(ranks 1..W, W the server's own world size, read from it: a tensor-parallel server's ranks each take the whole
buffer and load their shards from it, as vLLM's NCCL backend does) in **buckets** of at most
``rollout.vllm.bucket_mib``: a full push is the buffer's consecutive slices; a delta is pairs of slices of
(indices, values) of the elements whose bits changed. So neither end holds more than a few buckets besides the
versions it keeps, and a relay keeps its versions on disk (:class:`Spool`): its resident memory is bounded by the
bucket size, not the model's.

Transports (``rollout.vllm.transfer_backend``), one :class:`Channel` each over the same rendezvous (a TCPStore the
sender hosts) and the same sequence of buckets:

- ``gloo``: each bucket broadcast from host memory over TCP (CPU; other machines).
- ``nccl``: each bucket copied into a staging bucket on the sender's GPU and broadcast by NCCL to the ranks' GPUs
  (then into their host copy); a gloo group alongside carries nothing but the rendezvous.
- ``ipc``: CUDA IPC, same machine and same GPU: the sender allocates one staging bucket on its GPU and hands its
  IPC handle to the ranks once (over gloo, keyed by the GPU's UUID as vLLM's IPC backend does); per bucket it
  copies the slice in, announces its size over gloo, and waits until every rank has copied it out.

The NCCL and IPC channels have not run here (no GPU; tests/vllm/test_transfer_gpu.py runs where there is one).
"""

from __future__ import annotations

import datetime
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from cohort.trainer.flat_layout import FlatLayout, FlatWeights

BACKEND = "cohort-gloo"
"""The vLLM weight-transfer backend's name (its protocol, whatever the transport)."""
TRANSPORTS = ("gloo", "nccl", "ipc")
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# --- the group -----------------------------------------------------------------------------------------------
class Channel:
    """Rank 0 sends buckets, every other rank receives them (``gloo``: broadcast from host memory)."""

    def __init__(self, store: Any, rank: int, world_size: int, timeout: datetime.timedelta,
                 bucket_bytes: int) -> None:
        self.rank, self.world_size, self.bucket_bytes = rank, world_size, bucket_bytes
        self.group = dist.ProcessGroupGloo(dist.PrefixStore(BACKEND, store), rank, world_size, timeout)

    def _pieces(self, tensor: Tensor) -> Iterator[Tensor]:
        flat = tensor.reshape(-1)
        step = max(1, self.bucket_bytes // flat.element_size())
        for start in range(0, flat.numel(), step):
            yield flat[start:start + step]

    def send(self, tensor: Tensor) -> None:
        for piece in self._pieces(tensor):
            self._send(piece)

    def recv(self, out: Tensor) -> None:
        """Fill ``out`` (contiguous, host memory) with what rank 0 sends of the same shape."""
        for piece in self._pieces(out):
            self._recv(piece)

    def _send(self, piece: Tensor) -> None:
        self.group.broadcast(piece.cpu().contiguous(), 0).wait()

    def _recv(self, piece: Tensor) -> None:
        self.group.broadcast(piece, 0).wait()

    def shutdown(self) -> None:
        try:
            self.group.shutdown()
        except RuntimeError:  # a peer is gone already
            pass


class NcclChannel(Channel):
    """Buckets through a staging bucket on each rank's GPU, broadcast by NCCL."""

    def __init__(self, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, bucket_bytes: int,
                 device: torch.device) -> None:
        super().__init__(store, rank, world_size, timeout, bucket_bytes)
        if not hasattr(dist, "ProcessGroupNCCL"):
            raise RuntimeError("rollout.vllm.transfer_backend=nccl needs a CUDA build of torch (this one has no NCCL)")
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        self.device = device
        self.nccl = dist.ProcessGroupNCCL(dist.PrefixStore(f"{BACKEND}/nccl", store), rank, world_size, options)
        self.stage = torch.empty(bucket_bytes, dtype=torch.uint8, device=device)

    def _send(self, piece: Tensor) -> None:
        stage = self.stage[:piece.numel() * piece.element_size()].view(piece.dtype)
        stage.copy_(piece, non_blocking=True)
        self.nccl.broadcast(stage, 0).wait()
        torch.cuda.current_stream(self.device).synchronize()  # the stage is reused by the next piece

    def _recv(self, piece: Tensor) -> None:
        stage = self.stage[:piece.numel() * piece.element_size()].view(piece.dtype)
        self.nccl.broadcast(stage, 0).wait()
        piece.copy_(stage)  # to the host copy (synchronous)

    def shutdown(self) -> None:
        super().shutdown()
        try:
            self.nccl.shutdown()
        except RuntimeError:
            pass


class IpcChannel(Channel):
    """Buckets through one staging bucket on the sender's GPU that every rank maps by CUDA IPC."""

    def __init__(self, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, bucket_bytes: int,
                 device: torch.device) -> None:
        super().__init__(store, rank, world_size, timeout, bucket_bytes)
        from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

        self.device = device
        if rank == 0:
            self.stage = torch.empty(bucket_bytes, dtype=torch.uint8, device=device)
            _, args = reduce_tensor(self.stage)
            payload = pickle.dumps({_uuid(device): args})
            self.group.broadcast(torch.tensor([len(payload)], dtype=torch.int64), 0).wait()
            self.group.broadcast(torch.frombuffer(bytearray(payload), dtype=torch.uint8), 0).wait()
        else:  # the sender's GPU, found among this process's by its UUID (indices differ between processes)
            size = torch.zeros(1, dtype=torch.int64)
            self.group.broadcast(size, 0).wait()
            data = torch.empty(int(size), dtype=torch.uint8)
            self.group.broadcast(data, 0).wait()
            handles = pickle.loads(data.numpy().tobytes())  # from our own sender: a process of the same job
            mine = {_uuid(torch.device("cuda", i)): i for i in range(torch.cuda.device_count())}
            found = [(mine[u], args) for u, args in handles.items() if u in mine]
            if not found:
                raise RuntimeError("rollout.vllm.transfer_backend=ipc: the sender's GPU is not visible to this server "
                                   "(CUDA IPC needs the same GPU; use nccl across GPUs)")
            index, args = found[0]
            args = list(args)
            args[6] = index  # reduce_tensor's device index, as this process numbers it (vLLM's IPC backend does this)
            self.stage = rebuild_cuda_tensor(*args)

    def _send(self, piece: Tensor) -> None:
        n = piece.numel() * piece.element_size()
        self.stage[:n].view(piece.dtype).copy_(piece)
        torch.cuda.synchronize(self.device)
        self.group.broadcast(torch.tensor([n], dtype=torch.int64), 0).wait()  # ready
        self.group.allreduce(torch.zeros(1)).wait()  # every rank copied it out: the stage may be reused

    def _recv(self, piece: Tensor) -> None:
        size = torch.zeros(1, dtype=torch.int64)
        self.group.broadcast(size, 0).wait()
        n = int(size)
        if n != piece.numel() * piece.element_size():
            raise RuntimeError(f"IPC bucket of {n} bytes where {piece.numel() * piece.element_size()} were expected")
        piece.view(torch.uint8).reshape(-1).copy_(self.stage[:n])
        torch.cuda.synchronize(self.stage.device)
        self.group.allreduce(torch.zeros(1)).wait()


def _uuid(device: torch.device) -> str:
    return str(torch.cuda.get_device_properties(device).uuid)


def open_channel(transport: str, address: str, port: int, rank: int, world_size: int, timeout_s: float,
                 bucket_bytes: int, device: torch.device | None = None) -> Channel:
    """One transfer group: rank 0 hosts the rendezvous (a TCPStore on ``address:port``), ranks 1.. join it."""
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown weight transport {transport!r}: one of {', '.join(TRANSPORTS)}")
    if transport != "gloo" and (device is None or device.type != "cuda"):
        raise RuntimeError(f"the {transport} weight transport needs a CUDA device on both ends (this end: "
                           f"{device or 'none'}); use gloo")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(address, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    if transport == "nccl":
        return NcclChannel(store, rank, world_size, timeout, bucket_bytes, device)
    if transport == "ipc":
        return IpcChannel(store, rank, world_size, timeout, bucket_bytes, device)
    return Channel(store, rank, world_size, timeout, bucket_bytes)


# --- versions --------------------------------------------------------------------------------------------
def bucket_numel(layout: FlatLayout, bucket_bytes: int) -> int:
    return max(1, bucket_bytes // layout.dtype.itemsize)


def changed_elements(new: Tensor, old: Tensor) -> Tensor:
    """(k,) int64: the indices of the elements of two flat buffers whose bits differ (``-0.0`` vs ``0.0`` and
    NaN payloads included: the receiver ends with the sender's bits)."""
    bits = _BITS[new.dtype.itemsize]
    return torch.nonzero(new.view(bits) != old.view(bits)).squeeze(1)


class SpooledWeights:
    """A weight version in a file (a relay's: its resident memory stays a few buckets whatever the model's size).
    The file is read with ``readinto`` (not mapped), so its pages are the page cache's, not this process's."""

    def __init__(self, path: Path, layout: FlatLayout) -> None:
        self.path, self.layout = path, layout
        self._file = None

    def write(self, chunk: Tensor) -> None:
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._file.write(memoryview(chunk.contiguous().view(torch.uint8).numpy()))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self, start: int, n: int, out: Tensor) -> Tensor:
        """Elements ``[start, start + n)`` into ``out`` (a bucket buffer of this layout's dtype); its first n."""
        view = out[:n]
        with open(self.path, "rb") as f:
            f.seek(start * self.layout.dtype.itemsize)
            f.readinto(memoryview(view.view(torch.uint8).numpy()))
        return view

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def read(version: FlatWeights | SpooledWeights, start: int, n: int, out: Tensor | None) -> Tensor:
    """Elements ``[start, start + n)`` of a version held in memory (a view) or spooled (read into ``out``)."""
    if isinstance(version, FlatWeights):
        return version.flat[start:start + n]
    return version.read(start, n, out)


class Spool:
    """A relay's folder of spooled versions (removed by :meth:`close`)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="cohort-relay-"))
        self._count = 0

    def new(self, layout: FlatLayout, name: str) -> SpooledWeights:
        self._count += 1
        return SpooledWeights(self.folder / f"{self._count}-{name}.bin", layout)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class Delta:
    """The elements of a version whose bits changed since another: ``count`` of them, kept in memory (lists of
    pieces) or spooled (two files) when a :class:`Spool` is given; ``None`` pieces: not kept (no smaller than a
    full push)."""
    count: int
    numel: int
    index_dtype: torch.dtype
    pieces: list[tuple[Tensor, Tensor]] | None = None
    files: tuple[SpooledWeights, SpooledWeights] | None = None

    @property
    def kept(self) -> bool:
        return self.pieces is not None or self.files is not None

    def pairs(self, n: int, value_dtype: torch.dtype) -> Iterator[tuple[Tensor, Tensor]]:
        """(indices, values) in slices of at most ``n`` elements each (spooled: read into two reused buffers, so
        each pair is valid until the next is drawn)."""
        if self.pieces is not None:
            index = torch.cat([i for i, _ in self.pieces]) if self.pieces else torch.empty(0, dtype=self.index_dtype)
            values = torch.cat([v for _, v in self.pieces]) if self.pieces else torch.empty(0, dtype=value_dtype)
            for start in range(0, self.count, n):
                yield index[start:start + n], values[start:start + n]
            return
        index_buf = torch.empty(min(n, self.count), dtype=self.index_dtype)
        value_buf = torch.empty(min(n, self.count), dtype=value_dtype)
        for start in range(0, self.count, n):
            k = min(n, self.count - start)
            yield self.files[0].read(start, k, index_buf), self.files[1].read(start, k, value_buf)

    def delete(self) -> None:
        for f in self.files or ():
            f.delete()


def delta(new: FlatWeights | SpooledWeights, old: FlatWeights | SpooledWeights, bucket_bytes: int,
          keep: bool, spool: Spool | None = None) -> Delta:
    """The elements of ``new`` that differ from ``old`` (same layout), compared bucket by bucket; kept (in memory,
    or in ``spool``) only when ``keep`` and while smaller than a full push (6 bytes an element in bf16 with int32
    indices, against 2)."""
    layout = new.layout
    numel, n = layout.numel, bucket_numel(layout, bucket_bytes)
    index_dtype = torch.int32 if numel < 2 ** 31 else torch.int64
    per = index_dtype.itemsize + layout.dtype.itemsize
    bufs = (None, None) if isinstance(new, FlatWeights) and isinstance(old, FlatWeights) else \
        (torch.empty(min(n, numel), dtype=layout.dtype), torch.empty(min(n, numel), dtype=layout.dtype))
    out = Delta(0, numel, index_dtype, pieces=[] if keep and spool is None else None)
    if keep and spool is not None:
        out.files = (spool.new(FlatLayout((), (), index_dtype), "index"), spool.new(layout, "values"))
    for start in range(0, numel, n):
        k = min(n, numel - start)
        a, b = read(new, start, k, bufs[0]), read(old, start, k, bufs[1])
        changed = changed_elements(a, b)
        out.count += changed.numel()
        if not out.kept or not changed.numel():
            continue
        if out.count * per >= numel * layout.dtype.itemsize:  # no smaller than in full: stop keeping it
            out.delete()
            out.pieces = out.files = None
            continue
        index, values = (changed + start).to(index_dtype), a[changed]  # a copy (advanced indexing)
        if out.pieces is not None:
            out.pieces.append((index, values))
        else:
            out.files[0].write(index)
            out.files[1].write(values)
    for f in out.files or ():
        f.close()
    return out


# --- the protocol ----------------------------------------------------------------------------------------
def send_version(channel: Channel, version: FlatWeights | SpooledWeights, changes: Delta | None) -> int:
    """One update to the group (full when ``changes`` is None); the bytes sent."""
    layout = version.layout
    n = bucket_numel(layout, channel.bucket_bytes)
    sent = 0
    if changes is None:
        buf = None if isinstance(version, FlatWeights) else torch.empty(min(n, layout.numel), dtype=layout.dtype)
        for start in range(0, layout.numel, n):
            chunk = read(version, start, min(n, layout.numel - start), buf)
            channel.send(chunk)
            sent += chunk.numel() * chunk.element_size()
        return sent
    for index, values in changes.pairs(n, layout.dtype):
        channel.send(index)
        channel.send(values)
        sent += index.numel() * index.element_size() + values.numel() * values.element_size()
    return sent


def update_info(version: FlatWeights | SpooledWeights, number: int, changes: Delta | None, bucket_bytes: int,
                base: int = -1) -> dict[str, Any]:
    """The update's description (a ``/update_weights`` call's ``update_info``)."""
    info = {**version.layout.info(), "version": number, "bucket_numel": bucket_numel(version.layout, bucket_bytes)}
    if changes is None:
        info["kind"] = "full"
    else:
        info.update(kind="delta", base_version=base, count=changes.count,
                    index_dtype=str(changes.index_dtype).removeprefix("torch."))
    return info


class StaleDelta(RuntimeError):
    """A delta against another version than the one held (the sender pushes in full instead)."""


class FlatReceiver:
    """The receiving end of one transfer group: the newest flat buffer (host memory) and its version."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.flat: Tensor | None = None
        self.layout: FlatLayout | None = None
        self.version = -1

    def receive(self, info: dict[str, Any]) -> Iterator[tuple[str, Tensor]]:
        """Take one update (``info``: :func:`update_info`'s) from the group; the updated tensors, views of the
        buffer held."""
        layout = FlatLayout.from_info(info)
        n = int(info.get("bucket_numel") or layout.numel)
        if info.get("kind", "full") == "full":
            flat = torch.empty(layout.numel, dtype=layout.dtype)
            for start in range(0, layout.numel, n):
                self.channel.recv(flat[start:start + n])
            self.flat, self.layout = flat, layout
        else:
            if self.flat is None or self.layout != layout or self.version != int(info["base_version"]):
                raise StaleDelta(f"a delta against version {info['base_version']}; this server holds version "
                                 f"{self.version}: push in full")
            count, index_dtype = int(info["count"]), getattr(torch, info["index_dtype"])
            for start in range(0, count, n):
                k = min(n, count - start)
                index, values = torch.empty(k, dtype=index_dtype), torch.empty(k, dtype=layout.dtype)
                self.channel.recv(index)
                self.channel.recv(values)
                self.flat[index.long()] = values
        self.version = int(info["version"])
        return layout.views(self.flat)

    def forget(self) -> None:
        """Drop the buffer (a delta after this is refused)."""
        self.flat, self.layout, self.version = None, None, -1

