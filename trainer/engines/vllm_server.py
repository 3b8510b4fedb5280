"""``rollout.engine=vllm-server``: rollouts from vLLM's own OpenAI-compatible server (``vllm serve``), its
weights updated through vLLM's native weight-transfer API.

A team that already runs ``vllm serve`` fleets scales generation with them: each lock-step learner, or each
rollout worker of the asynchronous pipeline, drives one server (``rollout.vllm.servers``; worker r of learner l
takes entry ``l * rollout.workers + r - 1``, the lock-step learner of rank l entry l, modulo their number).

- **Sampling**: one ``POST /v1/completions`` per generation call, the prompts as token ids, ``n`` = G,
  ``logprobs: 0`` and ``return_token_ids``; the behaviour log-probs are the server's, which must be the
  processed ones (after temperature, as the learner computes them): start the server with
  ``--logprobs-mode processed_logprobs``. Sampling seeds are the server's.
- **Weights**: vLLM's weight-transfer endpoints (``/init_weight_transfer_engine``, ``/start_weight_update``,
  ``/update_weights``, ``/finish_weight_update``; the server needs ``VLLM_SERVER_DEV_MODE=1``) with Cohort's
  gloo backend ``cohort-gloo`` (``trainer.engines.vllm_transfer``, registered in vLLM by the
  ``vllm.general_plugins`` entry point): this process opens the rendezvous (a TCPStore on
  ``rollout.vllm.transfer_host``, a free port), the server joins it, and each tensor is broadcast while the
  server's ``/update_weights`` call receives and loads it. The learner's weights are pushed at start, so
  version 0 is the learner's whatever folder the server loaded (same architecture and tokenizer). Every call
  has a deadline (``rollout.weight_sync_timeout_s``); a failure names the server.

This side needs no vLLM (``httpx`` and torch); the server's side needs Cohort installed beside vLLM.
"""

from __future__ import annotations

import datetime
import socket
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from cohort.trainer.config import RolloutSection
from cohort.trainer.precision import FLOAT32, Precision
from cohort.trainer.engines.vllm import PushedWeights, rows_to_batch
from cohort.trainer.rollout import RolloutBatch

BACKEND = "cohort-gloo"


def join_transfer_group(address: str, port: int, rank: int, world_size: int, timeout_s: float):
    """The gloo group of one weight transfer: rank 0 (Cohort) hosts the TCPStore, the server joins it."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(address, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    return dist.ProcessGroupGloo(dist.PrefixStore(BACKEND, store), rank, world_size, timeout)


class VLLMServerEngine(PushedWeights):
    def __init__(self, cfg: RolloutSection, policy: torch.nn.Module, tokenizer: Any, seed: int,
                 precision: Precision = FLOAT32):
        import httpx

        from cohort.trainer.models import stop_token_ids

        if not cfg.vllm.servers:
            raise ValueError("rollout.engine=vllm-server needs rollout.vllm.servers (vllm serve base URLs)")
        self.cfg, self.policy = cfg, policy
        self.url = cfg.vllm.servers[0].rstrip("/")
        self.pad_id = int(tokenizer.pad_token_id)
        self.stop_ids = stop_token_ids(tokenizer, policy)
        self.rows_drawn = self.updates = 0
        self.report_logprobs = True  # always: the server's sampled-token log-probs come with every completion
        self.http = httpx.Client(base_url=self.url, timeout=cfg.weight_sync_timeout_s)
        self.model = self._served_model()
        self.group = self._init_transfer()
        self.push_weights(policy)  # version 0 is the learner's, whatever folder the server loaded

    # --- the server ------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> Any:
        import httpx

        try:
            response = self.http.request(method, path, json=body, timeout=timeout or httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise RuntimeError(f"vLLM server {self.url}{path}: {type(exc).__name__}: {exc}") from None
        if response.status_code == 404 and path.startswith("/init_weight_transfer"):
            raise RuntimeError(f"vLLM server {self.url} has no weight-transfer endpoints: start it with "
                               "VLLM_SERVER_DEV_MODE=1")
        if response.status_code >= 400:
            raise RuntimeError(f"vLLM server {self.url}{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def _served_model(self) -> str:
        """The served model's name, waiting for the server to be up (``weight_sync_timeout_s``)."""
        deadline = time.monotonic() + self.cfg.weight_sync_timeout_s
        while True:
            try:
                return self._call("GET", "/v1/models", timeout=5.0)["data"][0]["id"]
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"vLLM server {self.url} did not answer within rollout.weight_sync_timeout_s="
                                       f"{self.cfg.weight_sync_timeout_s:g}s") from None
                time.sleep(0.5)

    def _concurrently(self, path: str, body: dict, transfer) -> None:
        """``POST path`` while this process does its side of the transfer (both block until the other joins)."""
        box: dict[str, BaseException] = {}

        def call() -> None:
            try:
                self._call("POST", path, body)
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=call, daemon=True, name="vllm-server-call")
        thread.start()
        try:
            transfer()
        except Exception as exc:
            thread.join(5.0)
            raise RuntimeError(f"weight transfer to vLLM server {self.url} failed: {box.get('error') or exc}") \
                from None
        thread.join(self.cfg.weight_sync_timeout_s)
        if "error" in box:
            raise box["error"]
        if thread.is_alive():
            raise RuntimeError(f"vLLM server {self.url}{path} did not answer within rollout.weight_sync_timeout_s")

    def _init_transfer(self):
        with socket.socket() as s:  # a free port for the rendezvous (the TCPStore binds it right after)
            s.bind((self.cfg.vllm.transfer_host, 0))
            port = s.getsockname()[1]
        box: dict[str, Any] = {}
        info = {"master_address": self.cfg.vllm.transfer_host, "master_port": port, "world_size": 2, "rank": 1,
                "timeout_s": self.cfg.weight_sync_timeout_s}

        def join() -> None:
            box["group"] = join_transfer_group(self.cfg.vllm.transfer_host, port, 0, 2,
                                               self.cfg.weight_sync_timeout_s)

        self._concurrently("/init_weight_transfer_engine", {"init_info": info}, join)
        return box["group"]

    # --- sampling --------------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], num_generations: int,
                 max_new_tokens: int | None = None) -> RolloutBatch:
        g = num_generations
        body = {"model": self.model, "prompt": [list(p) for p in prompts], "n": g,
                "max_tokens": max_new_tokens or self.cfg.max_completion_length, "temperature": self.cfg.temperature,
                "top_p": self.cfg.top_p, "logprobs": 0, "return_token_ids": True, "stop_token_ids": self.stop_ids,
                "stop": list(self.cfg.vllm.stop) or None, "skip_special_tokens": True}
        choices = sorted(self._call("POST", "/v1/completions", body)["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts) * g:
            raise RuntimeError(f"vLLM server {self.url} returned {len(choices)} completions, expected "
                               f"{len(prompts) * g}")
        rows = []
        for k, c in enumerate(choices):
            ids = list(c["token_ids"] or [])
            logprobs = [float(x) for x in c["logprobs"]["token_logprobs"]] if ids else []
            if len(logprobs) != len(ids):
                raise RuntimeError(f"vLLM server {self.url} returned {len(logprobs)} log-probs for {len(ids)} tokens")
            rows.append((list(prompts[k // g]), ids, logprobs, c["finish_reason"] == "length", c["text"]))
        self.rows_drawn += len(rows)
        return rows_to_batch(rows, self.pad_id)

    # --- weights ---------------------------------------------------------------------------------------
    def push_weights(self, policy: torch.nn.Module) -> None:
        """The policy's weights into the server now (one weight-update session), then its prefix cache dropped."""
        state = {name: t.detach().contiguous().cpu() for name, t in policy.state_dict().items()}
        info = {"names": list(state), "dtype_names": [str(t.dtype).removeprefix("torch.") for t in state.values()],
                "shapes": [list(t.shape) for t in state.values()]}

        def send() -> None:
            for tensor in state.values():
                self.group.broadcast(tensor, 0).wait()

        self._call("POST", "/start_weight_update")
        self._concurrently("/update_weights", {"update_info": info}, send)
        self._call("POST", "/finish_weight_update", {"weight_version": str(self.updates)})
        self._call("POST", "/reset_prefix_cache")

    def close(self) -> None:
        try:
            self._call("POST", "/shutdown_weight_transfer_engine", timeout=10.0)
        except RuntimeError:
            pass  # the server is gone: nothing to release
        if self.group is not None:
            self.group.shutdown()
            self.group = None
        self.http.close()
