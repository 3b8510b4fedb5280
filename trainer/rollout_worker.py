"""A rollout worker of the asynchronous pipeline: its own process, its own engine, the newest weights.

It builds the policy from the same ``model`` config as the learner (then takes the learner's weights), and
loops: take the next work order (prompt token ids and the oldest weight version it may use), apply the
newest weights received, generate G completions per prompt with the behaviour policy's log-probs of the
sampled tokens (the engine reports them from its own sampling: the learner's off-policy correction needs
them), and send the rows back with their weight version. Weights arrive on their own thread, so a broadcast never waits for a generation to end. The
learner scores the groups (see ``trainer.rounds.pipeline``); what the two send each other is
``trainer.rounds.messages``.

A ``rollout.engine=vllm-server`` worker is a *relay*: its servers hold the model, so it builds none (its
tokenizer only) and never touches a GPU. The learner sends it the weight buffer's layout once
(``trainer.flat_layout``: names, shapes, dtype); each version arrives in slices, written to a file as they come
(``trainer.engines.weight_stream.Spool``), and goes to its servers from there a bucket at a time
(``trainer.engines.vllm_server``): its memory is a few buckets, not the model's.

With ``grpo.beta > 0`` and the transformers engine the worker also holds the frozen reference (the model as
the config builds it, which is what the learner's reference is: a resumed run keeps the initial model as its
reference) and sends the reference's log-probs of its rows with them, so the learner's step is the update
alone; as verl and OpenRLHF run the reference on workers of its own. A vLLM worker leaves them to the learner.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time

import torch

from cohort.trainer import wire
from cohort.trainer.config import TrainConfig
from cohort.trainer.engines.weight_stream import Spool, SpooledWeights
from cohort.trainer.flat_layout import FlatLayout
from cohort.trainer.rounds.messages import BYE, STOP, Generated

SEED_STRIDE = 1009
"""Worker rank r of learner rank l samples with seed ``run.seed + SEED_STRIDE * (r + l * (1 + rollout.workers))``
(the lock-step engine uses ``run.seed``)."""


ENDED = "the learner ended the run"


class _Weights:
    """The newest weight version received, applied to the model between generations."""

    def __init__(self, links: wire.Links, model: torch.nn.Module | None, pin: bool | None = None,
                 layout: FlatLayout | None = None) -> None:
        """``pin``: receive into page-locked memory (default: when the model is on a GPU). ``model`` None: a relay,
        whose buffers hold ``layout`` (received into host memory, forwarded as they are)."""
        self.version, self.error = -1, ""
        self.layout = layout
        self._pending: tuple[int, torch.Tensor | SpooledWeights] | None = None
        self.spool = Spool() if model is None else None  # a relay's versions, on disk
        self._cond = threading.Condition()
        if model is None:
            dtype, pin = layout.dtype, False
        else:
            param = wire.pushed_parameters(model)[0]
            dtype, pin = param.dtype, param.is_cuda if pin is None else pin
        self._thread = threading.Thread(target=self._receive, args=(links, dtype, pin), daemon=True,
                                        name="weights")
        self._thread.start()

    def _receive(self, links: wire.Links, dtype: torch.dtype, pin: bool) -> None:
        try:
            while True:
                if self.spool is None:
                    version, flat = wire.receive_weights(links.weights, dtype, pin)
                else:  # slice by slice into a file: a relay never holds a version in memory
                    box: dict = {}

                    def sink(v: int, numel: int) -> SpooledWeights:
                        box["w"] = self.spool.new(self.layout, f"v{v}")
                        return box["w"]

                    version = wire.receive_weights_to(links.weights, dtype, None, sink)
                    flat = box.get("w") if version >= 0 else None
                with self._cond:
                    if flat is None:
                        self.error = self.error or ENDED
                    else:
                        if self._pending is not None and isinstance(self._pending[1], SpooledWeights):
                            self._pending[1].delete()  # never applied: a newer one replaces it
                        self._pending = (version, flat)
                    self._cond.notify_all()
                if flat is None:
                    return
        except Exception as exc:  # the learner is gone
            with self._cond:
                self.error = f"weights: {type(exc).__name__}: {exc}"
                self._cond.notify_all()

    def apply_newest(self, model: torch.nn.Module | None, engine, at_least: int) -> bool:
        """Load the newest version received, waiting until it is ``at_least`` (a relay, ``model`` None: hand it
        to the engine as it is); False when the learner ended the run first, RuntimeError when the learner is
        gone."""
        with self._cond:
            while (self._pending is None or self._pending[0] < at_least) and self.version < at_least and not self.error:
                self._cond.wait()
            pending, self._pending = self._pending, None
            if pending is None and self.version < at_least:
                if self.error == ENDED:
                    return False
                raise RuntimeError(self.error)
        if pending is not None:
            if model is None:
                engine.sync_weights(pending[1])  # spooled
            else:
                wire.load_flat(model, pending[1])
                engine.sync_weights(model)
            self.version = pending[0]
        return True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self.spool is not None and not self._thread.is_alive():
            self.spool.close()


def run(cfg: TrainConfig, rank: int, world_size: int, init_method: str, learner: int = 0) -> None:
    """A worker's whole life: join the job, serve orders until the learner says stop."""
    from cohort.trainer import tool_rollouts
    from cohort.trainer.reference import reference_logprobs
    from cohort.trainer.models import build_policy, build_tokenizer, frozen_reference
    from cohort.trainer.rollout import build_engine

    if cfg.run.torch_threads:
        torch.set_num_threads(cfg.run.torch_threads)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # terminated (torchrun): still close
    if cfg.rollout.engine == "vllm":
        # vLLM in this process would take this job's torch.distributed world as its own (and wait for the learner
        # to form its model-parallel groups): its engine core runs in a process of its own, started by spawn
        # (this process holds gloo's connections and threads), and weights reach it through vLLM's own loader
        cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(
            update={"vllm": cfg.rollout.vllm.model_copy(update={"separate_process": True})})})
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    options = {}
    if cfg.rollout.engine == "vllm-server":
        # a relay: the servers hold the model, this worker forwards the learner's weights to them (views of the
        # buffers as the learner's layout says, sent once) and holds none; it never touches a GPU
        tokenizer, folder = build_tokenizer(cfg.model)
        model, options["generation_config"] = None, _generation_config(folder)
    else:
        model, tokenizer = build_policy(cfg.model, for_engine=True)  # the compute dtype: bf16 under mixed precision
        model.eval()
    learners = int(os.environ.get("WORLD_SIZE", 1)) if cfg.distributed.parallel != "none" else 1
    reference = None  # before any weights arrive: the model as built is the learner's reference
    if cfg.grpo.beta > 0 and cfg.rollout.engine == "transformers":
        reference = reference_logprobs(frozen_reference(model, cfg.model), cfg)
    base = build_engine(cfg.rollout, model, tokenizer,
                        cfg.run.seed + SEED_STRIDE * (rank + learner * (1 + cfg.rollout.workers)),
                        client=learner * cfg.rollout.workers + rank - 1, clients=learners * cfg.rollout.workers,
                        **options)
    try:
        engine = tool_rollouts.wrap(base, cfg.rollout, tokenizer)  # multi-turn with tools when rollout.max_turns > 1
    except BaseException:
        base.close()
        raise
    try:
        _serve(cfg, rank, world_size, init_method, model, engine, reference)
    finally:
        engine.close()  # vLLM's engine core is this process's child: it ends here, not at an exit hook


def _generation_config(folder: str | None):
    """The model folder's generation config (its end-of-sequence ids), None without one."""
    from transformers import GenerationConfig

    try:
        return None if folder is None else GenerationConfig.from_pretrained(folder)
    except OSError:  # no generation_config.json
        return None


def _serve(cfg: TrainConfig, rank: int, world_size: int, init_method: str, model: torch.nn.Module | None, engine,
           reference=None) -> None:
    links = wire.Links.join(init_method, rank, world_size)  # after the engine: vLLM's start must not see the job
    engine.report_logprobs = True  # the behaviour policy's log-probs, from the sampling itself (no extra forward)
    layout = None
    if model is None:  # a relay: what the weight buffers hold, the learner's first message (trainer.rounds.pipeline)
        _, layout = wire.receive(links.down, wire.LEARNER)
        if not isinstance(layout, FlatLayout):
            raise RuntimeError(f"a relay expected the learner's weight layout first, not {type(layout).__name__}")
    weights = _Weights(links, model, layout=layout)
    orders: queue.Queue = queue.Queue()

    def receive_orders() -> None:
        try:
            while True:
                _, order = wire.receive(links.down, wire.LEARNER)
                orders.put(order)
                if order == STOP:
                    return
        except Exception as exc:
            orders.put(RuntimeError(f"orders: {type(exc).__name__}: {exc}"))

    threading.Thread(target=receive_orders, daemon=True, name="orders").start()
    idle_from = time.perf_counter()
    while True:
        order = orders.get()
        if order == STOP:
            break
        if isinstance(order, Exception):
            raise order
        if not weights.apply_newest(model, engine, order.min_version):
            break
        started = time.perf_counter()
        batch = engine.generate(order.prompts, cfg.grpo.num_generations)
        generated = time.perf_counter()
        ref = None if reference is None else reference(batch.input_ids, batch.attention_mask,
                                                       batch.completion_ids.shape[1])
        done = time.perf_counter()
        wire.send(Generated(order.id, rank, weights.version, batch, generated - started, started - idle_from, ref,
                            done - generated), wire.LEARNER, links.up)
        idle_from = done
    wire.send(BYE, wire.LEARNER, links.up)
    weights.join(timeout=30)
    links.leave()


def _end_with_parent(parent: int) -> None:
    """A spawned worker's group ends when the learner is gone (killed before the worker joined, the worker
    would wait in the rendezvous for a day; out of the learner's group, no terminal signal reaches it)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def spawned(cfg_data: dict, rank: int, world_size: int, init_method: str, learner: int = 0) -> None:
    """The entry of a worker the learner spawned on this machine: one line and exit code 1 on failure."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.setpgrp()  # its own process group: the learner's reaping also ends what it started (vLLM's engine core)
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    try:
        run(TrainConfig.model_validate(cfg_data), rank, world_size, init_method, learner)
    except Exception as exc:
        print(f"rollout worker {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
