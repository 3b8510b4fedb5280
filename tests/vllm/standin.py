"""A stand-in for ``vllm serve`` that speaks what ``rollout.engine=vllm-server`` uses of it, for tests and
measurements on machines without vLLM: the OpenAI model list and completions, and the weight-transfer
endpoints with Cohort's ``cohort-gloo`` protocol, received by the very receiver the real server runs
(``trainer.engines.vllm_transfer.FlatReceiver``).

What it does not do: run a model. Its completions are random token ids (seeded by ``--seed`` and the call's
count) with the uniform log-prob ``-log(vocab)``, text empty, finish reason ``length``. It "loads" each
update by copying every tensor out of the receiver's buffer (as vLLM's ``load_weights`` copies into its
own), and ``GET /weights`` reports the version held and a SHA-256 of the loaded tensors' bytes in layout
order. ``--delay-s``: each completion call takes at least this long. ``--world-size W``: it answers ``GET
/get_world_size`` with W and joins each transfer group with W receivers (threads, ranks ``rank_offset`` ..
``rank_offset + W - 1``), as a tensor-parallel server's ranks do; ``GET /weights`` then also reports each
rank's SHA-256 of its buffer.

    python tests/vllm/standin.py --port 8000 --vocab 128
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from cohort.trainer.engines.weight_stream import FlatReceiver, open_channel


class StandIn:
    def __init__(self, vocab: int, seed: int, delay_s: float, world_size: int = 1) -> None:
        self.vocab, self.seed, self.delay_s, self.world_size = vocab, seed, delay_s, world_size
        self.receivers: list[FlatReceiver] = []
        self.ranks = ThreadPoolExecutor(max_workers=world_size)
        self.loaded: dict[str, torch.Tensor] = {}
        self.weight_version = ""
        self.calls = 0
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, body: dict) -> dict | None:
        if method == "GET" and path == "/v1/models":
            return {"object": "list", "data": [{"id": "standin", "object": "model"}]}
        if method == "GET" and path == "/health":
            return {}
        if method == "GET" and path.startswith("/get_world_size"):
            return {"world_size": self.world_size}
        if method == "GET" and path == "/weights":
            digest = hashlib.sha256()
            for tensor in self.loaded.values():
                digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
            ranks = [hashlib.sha256(r.flat.view(torch.uint8).numpy().tobytes()).hexdigest()
                     for r in self.receivers if r.flat is not None]
            return {"version": self.receivers[0].version if self.receivers else None,
                    "weight_version": self.weight_version, "sha256": digest.hexdigest(), "tensors": len(self.loaded),
                    "ranks_sha256": ranks}
        if path == "/init_weight_transfer_engine":
            info = body["init_info"]
            self.shutdown()

            def join(rank: int) -> FlatReceiver:
                return FlatReceiver(open_channel(info.get("transport", "gloo"), info["master_address"],
                                                 info["master_port"], info["rank_offset"] + rank, info["world_size"],
                                                 info["timeout_s"], info["bucket_bytes"]))

            self.receivers = list(self.ranks.map(join, range(self.world_size)))
            return {}
        if path == "/update_weights":
            if not self.receivers:
                raise RuntimeError("weight transfer not initialised")
            views = list(self.ranks.map(lambda r: list(r.receive(body["update_info"])), self.receivers))
            for name, weight in views[0]:
                self.loaded[name] = weight.clone()
            return {}
        if path == "/finish_weight_update":
            self.weight_version = str(body.get("weight_version", ""))
            return {}
        if path in ("/start_weight_update", "/reset_prefix_cache"):
            return {}
        if path == "/shutdown_weight_transfer_engine":
            self.shutdown()
            return {}
        if path == "/v1/completions":
            return self.complete(body)
        return None

    def shutdown(self) -> None:
        for receiver in self.receivers:
            receiver.channel.shutdown()
        self.receivers = []

    def complete(self, body: dict) -> dict:
        started = time.monotonic()
        with self.lock:
            self.calls += 1
            rng = random.Random(self.seed * 1_000_003 + self.calls)
        choices = []
        for k in range(len(body["prompt"]) * int(body.get("n", 1))):
            ids = [rng.randrange(self.vocab) for _ in range(int(body["max_tokens"]))]
            choices.append({"index": k, "text": "", "token_ids": ids, "finish_reason": "length",
                            "logprobs": {"token_logprobs": [-math.log(self.vocab)] * len(ids)}})
        time.sleep(max(0.0, self.delay_s - (time.monotonic() - started)))
        return {"object": "text_completion", "model": "standin", "choices": choices}


def receive_updates(transport: str, address: str, port: int, rank: int, world_size: int, bucket_bytes: int,
                    device_index: int | None, infos, results) -> None:
    """A server worker's side of the transfer alone, in a process of its own (the GPU tests and
    bench/gpu_accept.py's IPC stage: no vLLM there): join the group as ``rank``, then for each update description
    taken from the queue ``infos`` (None: the end) receive it and put the SHA-256 of the buffer held, and the
    seconds the receive took, on ``results`` (an error as a string)."""
    try:
        device = None
        if device_index is not None:
            torch.cuda.set_device(device_index)
            device = torch.device("cuda", device_index)
        receiver = FlatReceiver(open_channel(transport, address, port, rank, world_size, 120.0, bucket_bytes, device))
        while (info := infos.get()) is not None:
            started = time.perf_counter()
            list(receiver.receive(info))
            results.put((hashlib.sha256(receiver.flat.view(torch.uint8).numpy().tobytes()).hexdigest(),
                         time.perf_counter() - started))
        receiver.channel.shutdown()
    except Exception as exc:
        results.put(f"{type(exc).__name__}: {exc}")


def run_transfer(transport: str, versions: list, bucket_bytes: int, sender_device=None,
                 receiver_device_index: int | None = None, timeout_s: float = 300.0) -> list[dict]:
    """``versions`` (``FlatWeights`` of one layout) pushed from this process (rank 0) to a receiving process
    (:func:`receive_updates`, rank 1), the first in full, each next one as a delta against the one before: per
    version its kind, bytes sent, the sender's and the receiver's seconds, and whether the receiver's buffer equals
    the version's bits (SHA-256)."""
    import multiprocessing
    import socket

    from cohort.trainer.engines import weight_stream

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    infos, results = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=receive_updates, args=(transport, "127.0.0.1", port, 1, 2, bucket_bytes,
                                                     receiver_device_index, infos, results), daemon=True)
    proc.start()
    out: list[dict] = []
    channel = None
    try:
        channel = weight_stream.open_channel(transport, "127.0.0.1", port, 0, 2, timeout_s, bucket_bytes,
                                             sender_device)
        previous = None
        for number, version in enumerate(versions):
            changes = None if previous is None else weight_stream.delta(version, previous, bucket_bytes, keep=True)
            if changes is not None and not changes.kept:
                changes = None  # no smaller than in full
            infos.put(weight_stream.update_info(version, number, changes, bucket_bytes, base=number - 1))
            started = time.perf_counter()
            nbytes = weight_stream.send_version(channel, version, changes)
            send_s = time.perf_counter() - started
            got = results.get(timeout=timeout_s)
            if isinstance(got, str):
                raise RuntimeError(f"the receiving process failed: {got}")
            flat = version.flat.cpu()
            out.append({"kind": "full" if changes is None else "delta", "bytes": nbytes, "send_s": send_s,
                        "receive_s": got[1],
                        "equal": got[0] == hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()})
            previous = version
        infos.put(None)
        proc.join(30)
    finally:
        if channel is not None:
            channel.shutdown()
        if proc.is_alive():
            proc.kill()
    return out


def serve(port: int, vocab: int, seed: int = 0, delay_s: float = 0.0, host: str = "127.0.0.1",
          world_size: int = 1) -> None:
    standin = StandIn(vocab, seed, delay_s, world_size)

    class Handler(BaseHTTPRequestHandler):
        def _any(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            try:
                out = standin.handle(method, self.path, body)
                status = 404 if out is None else 200
                payload = json.dumps(out if out is not None else {"error": f"no {method} {self.path}"}).encode()
            except Exception as exc:
                status, payload = 500, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802
            self._any("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._any("POST")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delay-s", type=float, default=0.0)
    parser.add_argument("--world-size", type=int, default=1)
    a = parser.parse_args()
    serve(a.port, a.vocab, a.seed, a.delay_s, world_size=a.world_size)
