"""A stand-in for ``vllm serve`` that speaks what ``rollout.engine=vllm-server`` uses of it, for tests and
measurements on machines without vLLM: the OpenAI model list and completions, and the weight-transfer
endpoints with Cohort's ``cohort-gloo`` protocol, received by the very receiver the real server runs
(``trainer.engines.vllm_transfer.FlatReceiver``).

What it does not do: run a model. Its completions are random token ids (seeded by ``--seed`` and the call's
count) with the uniform log-prob ``-log(vocab)``, text empty, finish reason ``length``. It "loads" each
update by copying every tensor out of the receiver's buffer (as vLLM's ``load_weights`` copies into its
own), and ``GET /weights`` reports the version held and a SHA-256 of the loaded tensors' bytes in layout
order. ``--delay-s``: each completion call takes at least this long.

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from cohort.trainer.engines.vllm_server import join_transfer_group
from cohort.trainer.engines.vllm_transfer import FlatReceiver


class StandIn:
    def __init__(self, vocab: int, seed: int, delay_s: float) -> None:
        self.vocab, self.seed, self.delay_s = vocab, seed, delay_s
        self.receiver: FlatReceiver | None = None
        self.loaded: dict[str, torch.Tensor] = {}
        self.weight_version = ""
        self.calls = 0
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, body: dict) -> dict | None:
        if method == "GET" and path == "/v1/models":
            return {"object": "list", "data": [{"id": "standin", "object": "model"}]}
        if method == "GET" and path == "/health":
            return {}
        if method == "GET" and path == "/weights":
            digest = hashlib.sha256()
            for tensor in self.loaded.values():
                digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
            return {"version": None if self.receiver is None else self.receiver.version,
                    "weight_version": self.weight_version, "sha256": digest.hexdigest(), "tensors": len(self.loaded)}
        if path == "/init_weight_transfer_engine":
            info = body["init_info"]
            if self.receiver is not None:
                self.receiver.group.shutdown()
            self.receiver = FlatReceiver(join_transfer_group(info["master_address"], info["master_port"],
                                                             info["rank"], info["world_size"], info["timeout_s"]))
            return {}
        if path == "/update_weights":
            if self.receiver is None:
                raise RuntimeError("weight transfer not initialised")
            for name, weight in self.receiver.receive(body["update_info"]):
                self.loaded[name] = weight.clone()
            return {}
        if path == "/finish_weight_update":
            self.weight_version = str(body.get("weight_version", ""))
            return {}
        if path in ("/start_weight_update", "/reset_prefix_cache"):
            return {}
        if path == "/shutdown_weight_transfer_engine":
            if self.receiver is not None:
                self.receiver.group.shutdown()
                self.receiver = None
            return {}
        if path == "/v1/completions":
            return self.complete(body)
        return None

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


def serve(port: int, vocab: int, seed: int = 0, delay_s: float = 0.0, host: str = "127.0.0.1") -> None:
    standin = StandIn(vocab, seed, delay_s)

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
    a = parser.parse_args()
    serve(a.port, a.vocab, a.seed, a.delay_s)
