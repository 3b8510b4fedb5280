"""``rollout.engine=vllm-server``: rollouts from vLLM's own OpenAI-compatible server (``vllm serve``), its
weights updated through vLLM's native weight-transfer API.

A team that already runs ``vllm serve`` fleets scales generation with them. Each lock-step learner, or each
rollout worker of the asynchronous pipeline, drives a *pool* of servers (``rollout.vllm.servers`` split between
them: ``trainer.rollout.build_engine``; with fewer servers than drivers, drivers share one).

- **Sampling**: one ``POST /v1/completions`` per generation call and server, the prompts as token ids, ``n`` =
  G, ``logprobs: 0`` and ``return_token_ids``; the behaviour log-probs are the server's, which must be the
  processed ones (after temperature, as the learner computes them): start the server with
  ``--logprobs-mode processed_logprobs``. Sampling seeds are the server's. A call's prompts are spread over the
  pool's servers that hold the newest weights; a server that fails a call (connection, timeout, HTTP 5xx) has
  its prompts given to the others (none is lost), is reported in one line, and is retried with backoff (1 s,
  doubling to 30 s): it rejoins with a new transfer group and a full push of the newest weights. A request the
  server refuses (HTTP 4xx) is an error of the run, not of the server.
- **Weights**: vLLM's weight-transfer endpoints (``/init_weight_transfer_engine``, ``/start_weight_update``,
  ``/update_weights``, ``/finish_weight_update``; the server needs ``VLLM_SERVER_DEV_MODE=1``) with Cohort's
  gloo backend ``cohort-gloo`` (``trainer.engines.vllm_transfer``, registered in vLLM by the
  ``vllm.general_plugins`` entry point): this process opens one rendezvous per server (a TCPStore on
  ``rollout.vllm.transfer_host``, a free port), the server joins it, and every version goes to every server
  (concurrently), as one flat buffer in the compute dtype (``trainer.flat_layout``) while the server's
  ``/update_weights`` call receives and loads it. A push is *full* (the buffer) for a new or rejoined server
  and every ``rollout.vllm.full_push_every`` versions, else a *delta*: the indices and values of the elements
  whose bits changed since the previous version (which every live server holds), unless that is no smaller.
  The learner's weights are pushed at start, so version 0 is the learner's whatever folder the server loaded
  (same architecture and tokenizer). Every call has a deadline (``rollout.weight_sync_timeout_s``).

The engine takes a policy (the lock-step learner's: its trained parameters are flattened into one of two
reused buffers) or, for a rollout worker that only relays (``trainer.rollout_worker``), flat buffers and their
layout as the learner sent them: such a worker holds no model. This side needs no vLLM (``httpx`` and torch);
the server's side needs Cohort installed beside vLLM.

Over 400 lines on purpose: the engine and its pool of servers (orders, retries, rejoining with a
full push) are one state machine; the weight transfer itself is in ``weight_stream.py``.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from cohort.trainer import wire
from cohort.trainer.config import RolloutSection
from cohort.trainer.engines import weight_stream
from cohort.trainer.engines.vllm import PushedWeights, rows_to_batch
from cohort.trainer.engines.weight_stream import Channel, Delta, Spool, SpooledWeights, open_channel
from cohort.trainer.flat_layout import FlatLayout, FlatWeights
from cohort.trainer.precision import FLOAT32, Precision
from cohort.trainer.rollout import RolloutBatch

BACKOFF_S = (1.0, 30.0)
"""A failed server is retried after the first, then twice as long each time, up to the second."""


class ServerFailed(RuntimeError):
    """A server that did not answer, broke a connection, or failed (HTTP 5xx): it leaves the pool for a while."""


@dataclass
class PushRecord:
    """One push to one server: what went over the wire and how long the server took it."""
    url: str
    kind: str  # full | delta
    nbytes: int
    seconds: float
    changed: float  # share of the elements that changed since the version the server held (1.0: none held)


@dataclass
class _Server:
    url: str
    http: Any
    channel: Channel | None = None
    world_size: int = 1  # the server's own ranks (tensor x pipeline x data parallel), read from it
    holds: int = -1  # the push (VLLMServerEngine.pushes) whose weights it holds; -1: none of ours
    retry_at: float = 0.0
    backoff_s: float = BACKOFF_S[0]
    failed: str = ""  # why it left the pool ("" while it is in it)
    lock: threading.Lock = field(default_factory=threading.Lock)


class VLLMServerEngine(PushedWeights):
    def __init__(self, cfg: RolloutSection, policy: torch.nn.Module | None, tokenizer: Any, seed: int,
                 precision: Precision = FLOAT32, generation_config: Any = None):
        """``policy`` None: a relay, which pushes the :class:`FlatWeights` it is given (``generation_config``:
        the model's, for its end-of-sequence ids)."""
        import httpx

        from cohort.trainer.models import stop_token_ids

        if not cfg.vllm.servers:
            raise ValueError("rollout.engine=vllm-server needs rollout.vllm.servers (vllm serve base URLs)")
        self.cfg, self.policy, self.dtype = cfg, policy, precision.compute
        self.pad_id = int(tokenizer.pad_token_id)
        holder = policy if policy is not None else type("Config", (), {"generation_config": generation_config})
        self.stop_ids = stop_token_ids(tokenizer, holder)
        self.rows_drawn = self.updates = 0
        self.report_logprobs = True  # always: the server's sampled-token log-probs come with every completion
        self.pushes = -1  # weight versions pushed by this engine (the transfer's own count; -1: none yet)
        self.pushed: list[PushRecord] = []  # every push to every server, in order (benchmarks, tests)
        self._last: FlatWeights | SpooledWeights | None = None  # the newest version pushed (deltas against it)
        self._spool: Spool | None = None  # a relay's deltas on disk (its versions are spooled by the worker)
        self.bucket_bytes = max(64, int(cfg.vllm.bucket_mib * 2**20))
        self.device = _transfer_device(cfg.vllm.transfer_backend, policy)
        self._buffers: list[torch.Tensor | None] = [None, None]  # a policy's versions alternate between them
        self.servers = [_Server(url.rstrip("/"), httpx.Client(base_url=url.rstrip("/"),
                                                              timeout=cfg.weight_sync_timeout_s))
                        for url in cfg.vllm.servers]
        self.model = ""
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.servers)), thread_name_prefix="vllm-server")
        self._join_all()
        if policy is not None:
            self.push_weights(policy)  # version 0 is the learner's, whatever folder the server loaded

    @property
    def url(self) -> str:
        return ", ".join(s.url for s in self.servers)

    # --- one server ------------------------------------------------------------------------------------
    def _call(self, server: _Server, method: str, path: str, body: dict | None = None,
              timeout: float | None = None) -> Any:
        import httpx

        try:
            response = server.http.request(method, path, json=body,
                                           timeout=timeout or httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise ServerFailed(f"vLLM server {server.url}{path}: {type(exc).__name__}: {exc}") from None
        if response.status_code == 404 and path.startswith("/init_weight_transfer"):
            raise RuntimeError(f"vLLM server {server.url} has no weight-transfer endpoints: start it with "
                               "VLLM_SERVER_DEV_MODE=1")
        if response.status_code >= 500:
            raise ServerFailed(f"vLLM server {server.url}{path}: HTTP {response.status_code}: "
                               f"{response.text[:500]}")
        if response.status_code >= 400:
            raise RuntimeError(f"vLLM server {server.url}{path}: HTTP {response.status_code}: "
                               f"{response.text[:500]}")
        return response.json() if response.content else None

    def _concurrently(self, server: _Server, path: str, body: dict, transfer) -> None:
        """``POST path`` while this process does its side of the transfer (both block until the other joins)."""
        box: dict[str, BaseException] = {}

        def call() -> None:
            try:
                self._call(server, "POST", path, body)
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=call, daemon=True, name="vllm-server-call")
        thread.start()
        try:
            transfer()
        except Exception as exc:
            thread.join(5.0)
            raise ServerFailed(f"weight transfer to vLLM server {server.url} failed: {box.get('error') or exc}") \
                from None
        thread.join(self.cfg.weight_sync_timeout_s)
        if "error" in box:
            raise box["error"]
        if thread.is_alive():
            raise ServerFailed(f"vLLM server {server.url}{path} did not answer within "
                               "rollout.weight_sync_timeout_s")

    def _join(self, server: _Server, wait_s: float, within: str = "") -> None:
        """The server's model name (waiting up to ``wait_s`` for it to answer; ``within``: how to name that
        deadline) and a new transfer group."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                model = self._call(server, "GET", "/v1/models", timeout=5.0)["data"][0]["id"]
                break
            except ServerFailed:
                if time.monotonic() > deadline:
                    raise ServerFailed(f"vLLM server {server.url} did not answer within {within or f'{wait_s:g}s'}") \
                        from None
                time.sleep(0.5)
        self.model = self.model or model
        self._leave(server)
        server.world_size = self._world_size(server)
        with socket.socket() as s:  # a free port for the rendezvous (the TCPStore binds it right after)
            s.bind((self.cfg.vllm.transfer_host, 0))
            port = s.getsockname()[1]
        box: dict[str, Any] = {}
        opts, world = self.cfg.vllm, 1 + server.world_size
        info = {"master_address": opts.transfer_host, "master_port": port, "world_size": world, "rank_offset": 1,
                "timeout_s": self.cfg.weight_sync_timeout_s, "transport": opts.transfer_backend,
                "bucket_bytes": self.bucket_bytes}

        def join() -> None:
            box["channel"] = open_channel(opts.transfer_backend, opts.transfer_host, port, 0, world,
                                          self.cfg.weight_sync_timeout_s, self.bucket_bytes, self.device)

        self._concurrently(server, "/init_weight_transfer_engine", {"init_info": info}, join)
        server.channel, server.holds = box["channel"], -1

    def _world_size(self, server: _Server) -> int:
        """The server's ranks, every one of which joins the transfer group (1 for a server without the
        endpoint)."""
        try:
            return int(self._call(server, "GET", "/get_world_size", timeout=5.0)["world_size"])
        except RuntimeError as exc:
            if "HTTP 404" in str(exc):
                return 1
            raise

    def _leave(self, server: _Server) -> None:
        if server.channel is not None:
            server.channel.shutdown()
            server.channel, server.holds = None, -1

    def _fail(self, server: _Server, error: BaseException, what: str) -> None:
        """The server leaves the pool (one line), to be retried after its backoff."""
        self._leave(server)
        server.failed = str(error)
        server.retry_at = time.monotonic() + server.backoff_s
        print(f"vLLM server {server.url} failed {what} ({error}); {self._what_now(server)}, retrying it in "
              f"{server.backoff_s:g}s", file=sys.stderr, flush=True)
        server.backoff_s = min(server.backoff_s * 2, BACKOFF_S[1])

    def _what_now(self, server: _Server) -> str:
        others = [s.url for s in self.servers if s is not server and not s.failed]
        return f"the others ({', '.join(others)}) go on" if others else "no other server is left"

    def _join_all(self) -> None:
        """Every server of the pool joined at start (those not answering within ``weight_sync_timeout_s`` are
        retried later); an error when none answers."""
        def join(server: _Server) -> BaseException | None:
            try:
                self._join(server, self.cfg.weight_sync_timeout_s,
                           f"rollout.weight_sync_timeout_s={self.cfg.weight_sync_timeout_s:g}s")
            except ServerFailed as exc:
                return exc
            return None

        errors = list(self._pool.map(join, self.servers))
        if all(errors):
            if len(errors) == 1:
                raise RuntimeError(str(errors[0])) from None
            raise RuntimeError(f"none of the vLLM servers {self.url} answered within rollout.weight_sync_timeout_s"
                               f"={self.cfg.weight_sync_timeout_s:g}s")
        for server, error in zip(self.servers, errors, strict=True):
            if error is not None:
                self._fail(server, error, "to join")

    def _revive(self) -> None:
        """Servers whose backoff is over try to rejoin: a new transfer group and a full push of the newest
        version (one line when one is back)."""
        due = [s for s in self.servers if s.failed and time.monotonic() >= s.retry_at]

        def revive(server: _Server) -> None:
            try:
                self._join(server, 0.0)
                error = None if self._last is None else self._push_one(server, self._last, None)
                if error is not None:
                    raise error
            except ServerFailed as exc:
                self._fail(server, exc, "to rejoin")
                return
            server.failed, server.backoff_s = "", BACKOFF_S[0]
            print(f"vLLM server {server.url} rejoined the pool (a full push of version {self.pushes})",
                  file=sys.stderr, flush=True)

        list(self._pool.map(revive, due))

    def _ready(self) -> list[_Server]:
        """The servers that hold the newest version."""
        self._revive()
        return [s for s in self.servers if not s.failed and s.holds == self.pushes]

    # --- sampling --------------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], num_generations: int,
                 max_new_tokens: int | None = None) -> RolloutBatch:
        """G completions per prompt, the prompts spread over the servers that hold the newest weights; a
        server's share is given to the others when it fails."""
        body = {"model": self.model, "n": num_generations,
                "max_tokens": max_new_tokens or self.cfg.max_completion_length, "temperature": self.cfg.temperature,
                "top_p": self.cfg.top_p, "logprobs": 0, "return_token_ids": True, "stop_token_ids": self.stop_ids,
                "stop": list(self.cfg.vllm.stop) or None, "skip_special_tokens": True}
        pending: list[tuple[int, int]] = []  # [start, end) prompt ranges not yet generated
        done: dict[int, list] = {}
        deadline = time.monotonic() + self.cfg.weight_sync_timeout_s
        while pending or not done:
            ready = self._ready()
            if not pending:  # the first round: one share per server
                bounds = [round(i * len(prompts) / len(ready or [None])) for i in range(len(ready or [None]) + 1)]
                pending = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
            if not ready:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no vLLM server of {self.url} answered within rollout.weight_sync_timeout_s"
                                       f"={self.cfg.weight_sync_timeout_s:g}s: "
                                       + "; ".join(s.failed for s in self.servers if s.failed))
                time.sleep(max(0.05, min(s.retry_at for s in self.servers) - time.monotonic()))
                continue
            shares = [(ready[i % len(ready)], rng) for i, rng in enumerate(pending)]
            pending = []
            results = list(self._pool.map(lambda job: self._complete(job[0], prompts, job[1], body, num_generations),
                                          shares))
            for (server, rng), result in zip(shares, results, strict=True):
                if isinstance(result, ServerFailed):
                    if not server.failed:
                        self._fail(server, result, f"a completion call ({rng[1] - rng[0]} prompts)")
                    pending.append(rng)
                elif isinstance(result, BaseException):
                    raise result
                else:
                    done[rng[0]] = result
            if not pending:
                break
        rows = [row for start in sorted(done) for row in done[start]]
        self.rows_drawn += len(rows)
        return rows_to_batch(rows, self.pad_id)

    def _complete(self, server: _Server, prompts: list[list[int]], rng: tuple[int, int], body: dict,
                  g: int) -> list | BaseException:
        """One server's completions of prompts ``rng`` (rows), or the exception it failed with."""
        share = prompts[rng[0]:rng[1]]
        try:
            with server.lock:
                out = self._call(server, "POST", "/v1/completions", {**body, "prompt": [list(p) for p in share]})
            choices = sorted(out["choices"], key=lambda c: c["index"])
            if len(choices) != len(share) * g:
                raise ServerFailed(f"vLLM server {server.url} returned {len(choices)} completions, expected "
                                   f"{len(share) * g}")
            rows = []
            for k, c in enumerate(choices):
                ids = list(c["token_ids"] or [])
                logprobs = [float(x) for x in c["logprobs"]["token_logprobs"]] if ids else []
                if len(logprobs) != len(ids):
                    raise ServerFailed(f"vLLM server {server.url} returned {len(logprobs)} log-probs for "
                                       f"{len(ids)} tokens")
                rows.append((list(share[k // g]), ids, logprobs, c["finish_reason"] == "length", c["text"]))
            return rows
        except BaseException as exc:
            return exc

    # --- weights ---------------------------------------------------------------------------------------
    def sync_weights(self, policy: torch.nn.Module | FlatWeights | SpooledWeights) -> None:
        super().sync_weights(policy)
        if isinstance(policy, SpooledWeights) and policy is not self._last:  # skipped (sync_every > 1)
            policy.delete()

    def push_weights(self, policy: torch.nn.Module | FlatWeights | SpooledWeights) -> None:
        """A new version into every server of the pool now (full or delta), then their prefix caches dropped; a
        server that fails leaves the pool (one line) and rejoins later with a full push. A relay's versions come
        spooled (``weight_stream.SpooledWeights``): read a bucket at a time, its deltas spooled too, the previous
        version's file deleted once the new one is pushed."""
        if isinstance(policy, (FlatWeights, SpooledWeights)):
            new = policy
        else:
            slot = (self.pushes + 1) % 2  # not the buffer of the version the servers hold (deltas against it)
            if self.device is not None:  # nccl/ipc from a policy on a GPU: the buffer stays on it (no host copy)
                params = [p.detach().reshape(-1).to(self.dtype) for p in wire.pushed_parameters(policy)]
                self._buffers[slot] = flat = torch.cat(params)
            else:
                self._buffers[slot] = flat = wire.flat_parameters(policy, self._buffers[slot], self.dtype)
            new = FlatWeights(flat, FlatLayout.of(policy, self.dtype))
        last = self._last
        full = (last is None or last.layout != new.layout or self.cfg.vllm.full_push_every == 1
                or (self.pushes + 1) % self.cfg.vllm.full_push_every == 0)
        changes: Delta | None = None
        changed = 1.0
        if last is not None and last.layout == new.layout:
            if isinstance(new, SpooledWeights) and self._spool is None:
                self._spool = Spool()
            changes = weight_stream.delta(new, last, self.bucket_bytes, keep=not full,
                                          spool=self._spool if isinstance(new, SpooledWeights) else None)
            changed = changes.count / max(1, new.layout.numel)
        self._revive()
        live = [s for s in self.servers if not s.failed]
        self.pushes += 1
        kept = changes if changes is not None and changes.kept else None

        def push(server: _Server) -> BaseException | None:
            held = server.holds == self.pushes - 1  # the previous version: the delta applies to it
            return self._push_one(server, new, kept if held else None, changed=changed if held else 1.0)

        try:
            results = list(self._pool.map(push, live))
        finally:
            if changes is not None:
                changes.delete()
        for server, error in zip(live, results, strict=True):
            if error is not None:
                self._fail(server, error, f"a weight push (version {self.pushes})")
        if isinstance(last, SpooledWeights) and last is not new:
            last.delete()
        self._last = new
        if not any(not s.failed for s in self.servers):
            raise RuntimeError(f"every vLLM server of {self.url} failed the weight push: "
                               + "; ".join(s.failed for s in self.servers))

    def _push_one(self, server: _Server, new: FlatWeights | SpooledWeights, changes: Delta | None,
                  changed: float = 1.0) -> BaseException | None:
        """One server takes version ``self.pushes``, in full or (``changes``) as a delta (a ServerFailed returned,
        not raised: the pool goes on); ``changed``: the share of elements that differ from the version it held
        (recorded)."""
        info = weight_stream.update_info(new, self.pushes, changes, self.bucket_bytes, base=self.pushes - 1)
        sent: list[int] = []

        def send() -> None:
            sent.append(weight_stream.send_version(server.channel, new, changes))

        started = time.perf_counter()
        try:
            with server.lock:
                self._call(server, "POST", "/start_weight_update")
                self._concurrently(server, "/update_weights", {"update_info": info}, send)
                self._call(server, "POST", "/finish_weight_update", {"weight_version": str(self.updates)})
                self._call(server, "POST", "/reset_prefix_cache")
        except ServerFailed as exc:
            return exc
        server.holds = self.pushes
        self.pushed.append(PushRecord(server.url, info["kind"], sent[0], time.perf_counter() - started, changed))
        return None

    def summary(self) -> str:
        """One line about the pushes so far: how many of each kind, their mean bytes and seconds, the mean share
        of elements a delta carried."""
        parts = []
        for kind in ("full", "delta"):
            done = [r for r in self.pushed if r.kind == kind]
            if done:
                share = f", {sum(r.changed for r in done) / len(done):.2%} of the elements" if kind == "delta" else ""
                parts.append(f"{len(done)} {kind} ({sum(r.nbytes for r in done) / len(done) / 1e6:.2f} MB, "
                             f"{sum(r.seconds for r in done) / len(done):.3f}s each{share})")
        return f"vLLM server weight pushes to {self.url}: {'; '.join(parts) or 'none'}"

    def close(self) -> None:
        if self.policy is None and self.pushed:  # a relay's run: what its pushes cost (its log is the learner's)
            print(self.summary(), file=sys.stderr, flush=True)
        for server in self.servers:
            if server.channel is not None:
                try:
                    self._call(server, "POST", "/shutdown_weight_transfer_engine", timeout=10.0)
                except RuntimeError:
                    pass  # the server is gone: nothing to release
            self._leave(server)
            server.http.close()
        self._pool.shutdown(wait=False)
        if isinstance(self._last, SpooledWeights):
            self._last.delete()
        if self._spool is not None:
            self._spool.close()


def _transfer_device(transport: str, policy: torch.nn.Module | None) -> torch.device | None:
    """Where an nccl or ipc transport stages its buckets: the policy's GPU, or a relay's own (the one placement
    left it: ``trainer.placement``); gloo: none."""
    if transport == "gloo":
        return None
    if policy is not None:
        device = next(policy.parameters()).device
        if device.type == "cuda":
            return device
    if not torch.cuda.is_available():
        raise ValueError(f"rollout.vllm.transfer_backend={transport} stages weights on a GPU and this process has "
                         "none: use gloo (through host memory)")
    return torch.device("cuda", torch.cuda.current_device())

