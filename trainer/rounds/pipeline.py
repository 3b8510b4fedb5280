"""The asynchronous round source (``rollout.max_staleness = k > 0``): generation never waits for an update.

``rollout.workers`` rollout processes (``trainer.rollout_worker``) each hold an engine and the newest
weights they have received, and generate work orders continuously. Every finished order goes to the
verifiers the moment it arrives (the learner's one :class:`~cohort.trainer.scoring.Scorer`, so outage
handling, masking and metrics are the lock-step loop's), and the scored groups wait in a buffer that
:meth:`Pipeline.next_round` consumes P groups at a time. After each update the learner broadcasts the
new weights (``trainer.wire``) and goes straight on to the next round.

:class:`Pipeline` only wires four parts that do not know each other: ``rounds.workers`` (spawn, join, watch,
restart the processes), ``rounds.publisher`` (the double-buffered weight broadcast), ``rounds.order_book``
(admission and rejection, which bound the staleness: its docstring) and ``rounds.receiver`` (the thread that
scores arrivals). Which groups a round keeps is ``rounds.dynamic``'s choice, as in the lock-step loop.

**Off-policy correction.** Workers send the behaviour policy's log-probs of every sampled token (from the
sampling itself). With ``rollout.is_correction`` token or sequence the loss is AReaL's decoupled objective:
the clipped ratio is taken against the learner's current (proximal) policy, whose log-probs are the first
update pass's own (no separate forward), and the policy-gradient term is weighted by the truncated
pi_prox / pi_behaviour (``trainer.is_correction``).
With ``none`` the ratio is taken against the behaviour policy itself (naive off-policy PPO, no extra
forward). docs/async.md compares both at staleness 1 and 4. The frozen reference's log-probs (beta > 0) come
from the workers with the rows when their engine is transformers (``trainer.rollout_worker``), else the
learner computes them for the round.

**Checkpoints** hold the prompts of every group ordered but not consumed (``state_dict``); a resumed run
orders them again first. Generations in flight and the workers' sampling RNGs are not saved: a resumed
asynchronous run draws the same prompts, not the same completions.

**A spawned worker that dies** is started again up to ``rollout.worker_restarts`` times (``rounds.workers``);
past that, or under ``torchrun``, the run ends with an error naming it. Groups already generated stay in the
buffer and the dead workers' orders are ordered again first, so no prompt is lost and none is used twice.

**DDP/FSDP2 learners** (``distributed.parallel``, under ``torchrun``): every learner rank runs a pipeline of its
own with ``rollout.workers`` private workers it spawns on its machine (a job of their own, never the learners'
process group), and consumes P / world groups a round. The learners update in step, so their weight versions
agree; each broadcasts the full weights to its own workers (FSDP2 gathers them first, collectively). Before a
checkpoint the ranks draw on to one sampler position, and what a rank has drawn but not ordered is saved with
its pending prompts.
"""

from __future__ import annotations

import collections
import queue
import time
from dataclasses import dataclass
from typing import Any

import torch

from cohort.trainer import distributed, spawn_workers, wire
from cohort.trainer.config import TrainConfig
from cohort.trainer.metrics import StepTimer
from cohort.trainer.precision import resolve
from cohort.trainer.rollout import RolloutBatch, concat_batches
from cohort.trainer.rounds.dynamic import DynamicSampling, informative
from cohort.trainer.rounds.messages import Generated, Order
from cohort.trainer.rounds.order_book import OrderBook
from cohort.trainer.rounds.publisher import SyncTimedOut, WeightPublisher
from cohort.trainer.rounds.receiver import Receiver
from cohort.trainer.rounds.round import Round, Sources, pad_right
from cohort.trainer.rounds.workers import EXIT_GRACE_S, WorkerDied, WorkerGroup
from cohort.trainer.scoring import Scores, merge_scores


@dataclass(eq=False)
class _Group:
    """One prompt's G scored rows."""

    idx: int  # the example index
    rows: RolloutBatch
    scores: Scores  # (1, G)
    version: int
    ref_logprobs: torch.Tensor | None  # (G, T') the reference's, when the worker computed them


class Pipeline:
    """A :class:`~cohort.trainer.rounds.source.RoundSource`: the rollout workers and the buffer, from the learner's
    side. ``publish`` sends a new version, ``state_dict`` is the checkpoint's share. Spawns its workers at once
    (or takes ``early``: those ``cohort train`` started), so that their start-up overlaps the learner's."""

    def __init__(self, cfg: TrainConfig, comm: distributed.Comm = distributed.SINGLE,
                 early: spawn_workers.Workers | None = None) -> None:
        self.cfg, self.comm = cfg, comm
        self.p = cfg.grpo.prompts_per_step // comm.world_size  # this learner's groups a round
        if self.p % cfg.rollout.generation_chunks:
            raise ValueError(f"rollout.generation_chunks={cfg.rollout.generation_chunks} must divide each learner's "
                             f"grpo.prompts_per_step / world size = {self.p}")
        self.chunk = self.p // cfg.rollout.generation_chunks
        self.book = OrderBook(cfg.rollout.max_staleness, self.p, self.chunk, cfg.rollout.workers, comm.rank,
                              comm.world_size)
        self.publisher = WeightPublisher(resolve(cfg.model.dtype, distributed.local_device(cfg.model.device)).compute)
        self.version = 0
        self.src: Sources | None = None
        self._policy: torch.nn.Module | None = None
        self._links: wire.Links | None = None
        self._receiver: Receiver | None = None
        self._arrivals: queue.Queue = queue.Queue()  # receiver.Arrival, or an Exception
        self._ready: collections.deque[_Group] = collections.deque()
        self.restarts = 0  # times the workers were started again after one died
        self.submitted_groups = 0  # groups generated and sent to the verifiers (each gets a status, or is lost)
        self._lags: list[int] = []
        self._depth_ready = 0
        self._gen_s = self._gen_idle_s = self._ref_s = 0.0
        self.consumed: list[list[int]] = []
        """Per round, the example indices of its groups (and, with dynamic sampling, ``left_out`` the ones left
        out for lack of signal): with ``state_dict``'s pending prompts, every prompt drawn is accounted for."""
        self.left_out: list[int] = []
        self.workers = WorkerGroup(cfg, comm.rank, comm.distributed, early)

    # ---- the round source ------------------------------------------------------------------------------

    def start(self, src: Sources, policy: torch.nn.Module, version: int) -> None:
        """Join the workers, send them version ``version`` and the first orders."""
        self.version, self.src, self._policy = version, src, policy
        self.publisher.snapshot(policy, version)
        self._connect()

    def publish(self, policy: torch.nn.Module) -> None:
        """After an update: the next version to the workers (the broadcast runs while the learner goes on)."""
        self.version += 1
        self.publisher.snapshot(policy, self.version)  # the other buffer than the previous version's
        self._recovering(self._broadcast)

    def state_dict(self) -> dict[str, Any]:
        """The prompts of every group drawn for this learner but not consumed (ordered again first on resume).
        Collective with several learners: they draw on to the same sampler position first."""
        if self.comm.world_size > 1:
            self.book.draw_to(int(self.comm.max_int(self.book.draws)), self.src.sampler)
        return {"pending_prompts": self.book.pending([g.idx for g in self._ready])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.book.load(state.get("pending_prompts", []))

    def close(self) -> None:
        """Stop the workers (they finish the generation in hand) and leave the job; never hangs; idempotent."""
        links, self._links = self._links, None
        if links is None:
            self.workers.reap()
            return
        self._receiver.mute()
        try:
            self.workers.stop(links)
            self.publisher.end(links.weights, 10.0)
        except Exception:  # a worker is gone already: what is left is to reap it
            pass
        stopped = self._receiver.stop(30 if self.workers.all_alive() else 2)
        self.workers.reap()
        links.retire(self.publisher.release(), leave=stopped)

    # ---- parts wired together ----------------------------------------------------------------------------

    def _connect(self) -> None:
        """Join the workers, start receiving, send the layout (relays), the current weights and the first orders."""
        self._links = self.workers.join()
        self._receiver = Receiver(self._links.up, self.workers.n, self._score, self._arrivals)
        if self.cfg.rollout.engine == "vllm-server":  # relays hold no model: what the buffers hold, once per join
            layout = self.publisher.layout(self._policy)
            for rank in self.workers.ranks:
                wire.send(layout, rank, self._links.down)
        self._broadcast()
        self._top_up(self.p)

    def _score(self, order: Order, rows: Generated):
        """The receiver's hand-off: an order's rows to the verifiers (on the receiver's thread)."""
        future = self.src.scorer.submit([self.src.examples[i] for i in order.idx], rows.batch.texts,
                                        rows.batch.truncated.tolist(), order.id * self.chunk, tools=rows.batch.tools)
        self.submitted_groups += len(order.idx)
        return future

    def _broadcast(self) -> None:
        try:
            self.publisher.broadcast(self.version, self._links.weights, self.cfg.rollout.weight_sync_timeout_s)
        except SyncTimedOut as exc:
            self.workers.check(EXIT_GRACE_S)
            raise RuntimeError(f"the weight sync to rollout worker(s) {self.workers.names()} did not finish within "
                               f"rollout.weight_sync_timeout_s={self.cfg.rollout.weight_sync_timeout_s:g}s ({exc})") \
                from None

    def _top_up(self, remaining: int) -> None:
        """Send what the order book admits (``remaining``: the groups the round being built still needs)."""
        for worker, order in self.book.admit(remaining, len(self._ready), self.version, self.src.prompt_ids,
                                             self.src.sampler):
            self._receiver.expect(order)
            self.workers.send(order, worker, self._links)

    def _recovering(self, fn, *args):
        """``fn(*args)``; when a spawned worker has died, the workers are started again (at most
        ``rollout.worker_restarts`` times in the run) and ``fn`` is called again."""
        while True:
            try:
                return fn(*args)
            except WorkerDied as died:
                if not self.workers.may_restart(self.restarts):
                    raise
                self._restart(died)

    def _restart(self, died: WorkerDied) -> None:
        """Stop every worker and leave the job, then spawn and join them again, send the current weights, and
        order first the prompts of every order that had not come back."""
        self.restarts += 1
        distributed.SINGLE.say(f"{died}; starting the rollout workers again (restart {self.restarts} of "
                               f"rollout.worker_restarts={self.cfg.rollout.worker_restarts})")
        self._receiver.mute()
        self.workers.terminate()
        self._receiver.stop(5)
        self._links.retire(self.publisher.release())
        self._links = None  # a failure from here on: close() only reaps
        kept = []  # arrivals stay (their scores are on the way); the receiver's error about the dead worker goes
        while True:
            try:
                item = self._arrivals.get_nowait()
            except queue.Empty:
                break
            if not isinstance(item, Exception):
                kept.append(item)
        for item in kept:
            self._arrivals.put(item)
        self.book.lose({order.id for _, order, _ in kept})
        self.workers.spawn()
        self._connect()  # a worker dying here ends the run (raised from here)

    def _next_group(self, timer: StepTimer) -> _Group:
        """The next scored group, in arrival order (waiting, timed as ``buffer_wait`` and ``verify_wait``)."""
        while not self._ready:
            with timer("buffer_wait"):
                message, order, future = self._arrival()
            with timer("verify_wait"):  # tool failures masked by the scorer, before dynamic sampling reads them
                scores = future.result()
            self.book.unpack(order.id)
            g = self.cfg.grpo.num_generations
            for k, i in enumerate(order.idx):
                rows = list(range(k * g, (k + 1) * g))
                ref = None if message.ref_logprobs is None else message.ref_logprobs[rows]
                self._ready.append(_Group(i, message.batch.select(rows), scores.select([k]), message.version, ref))
            self._gen_s += message.generate_s
            self._ref_s += message.reference_s
            self._gen_idle_s += message.idle_s
        return self._ready.popleft()

    def _arrival(self):
        while True:
            try:
                item = self._arrivals.get(timeout=0.5)
            except queue.Empty:
                self.workers.check()
                continue
            if isinstance(item, Exception):
                self.workers.check(EXIT_GRACE_S)
                raise item
            return item

    # ---- the learner's round ---------------------------------------------------------------------------

    def next_round(self, timer: StepTimer) -> Round:
        """P groups at most k versions old (dropping and re-ordering older ones; ``rounds.order_book``), those
        without signal replaced as ``rounds.dynamic`` decides, as the lock-step loop's round."""
        cfg, src = self.cfg, self.src
        pick = DynamicSampling(self.p, cfg.grpo.max_resample_rounds if cfg.grpo.dynamic_sampling else 0)
        self._depth_ready = len(self._ready) + self._arrivals.qsize()  # generated groups waiting, at the step's start
        kept: list[_Group] = []
        batch: list[_Group] = []  # the open batch of the dynamic sampling
        while pick.size:
            self._recovering(self._top_up, pick.size - len(batch))
            group = self._recovering(self._next_group, timer)
            if self.book.stale(group.idx, group.version, self.version):
                continue
            batch.append(group)
            if len(batch) < pick.size:
                continue
            keep = pick.close([informative(g.scores, cfg.grpo.scale_rewards)[0] for g in batch])
            kept += batch if keep is None else [batch[k] for k in keep]
            self.left_out += [] if keep is None else [g.idx for k, g in enumerate(batch) if k not in keep]
            batch = []
        self._recovering(self._top_up, 0)
        self.consumed.append([g.idx for g in kept])
        self._lags = [self.version - g.version for g in kept]
        batch_rows = concat_batches([g.rows for g in kept], src.pad_id)
        scores = merge_scores([g.scores for g in kept])
        ids, mask, t = batch_rows.input_ids, batch_rows.attention_mask, batch_rows.completion_ids.shape[1]
        behaviour = batch_rows.rollout_logprobs
        if all(g.ref_logprobs is not None for g in kept):  # the workers computed them
            ref = torch.cat([pad_right(g.ref_logprobs, t) for g in kept])
        else:
            with timer("logprobs"):
                ref = None if src.ref_logprobs is None else src.ref_logprobs(ids, mask, t)
        if cfg.rollout.is_correction == "none":  # naive off-policy PPO: the ratio against the behaviour policy
            return Round(batch_rows, scores, ref, old_logprobs=behaviour, resampled=pick.resampled)
        # the decoupled objective: the learner's first pass is the proximal policy (pi_old of the ratio, and
        # the numerator of the importance weight it computes itself: UpdateBatch.behaviour_logprobs)
        return Round(batch_rows, scores, ref, behaviour_logprobs=behaviour, resampled=pick.resampled)

    def metrics(self, timer: StepTimer) -> dict[str, float]:
        """Staleness of the round consumed, drops, buffer depth, and the idle fractions of both sides, over every
        learner (sums and counts summed over the ranks, then divided; maxima over the ranks)."""
        n = self.comm.sum_floats({
            "lags": float(sum(self._lags)), "groups": float(len(self._lags)), "dropped": float(self.book.dropped_stale),
            "submitted": float(self.submitted_groups), "ready": float(self._depth_ready),
            "buffer_wait": timer.seconds["buffer_wait"],
            "waited": timer.seconds["buffer_wait"] + timer.seconds["verify_wait"],
            "step_s": time.perf_counter() - timer.start, "gen_s": self._gen_s, "gen_idle_s": self._gen_idle_s,
            "ref_s": self._ref_s, "restarts": float(self.restarts)})
        gen_total = n["gen_s"] + n["ref_s"] + n["gen_idle_s"]
        out = {
            "async/staleness_mean": n["lags"] / n["groups"],
            "async/staleness_max": self.comm.max_float(float(max(self._lags))),
            "async/dropped_stale": n["dropped"],
            "async/submitted_groups": n["submitted"],
            "async/buffer_ready": n["ready"],
            "async/buffer_wait_s": n["buffer_wait"] / self.comm.world_size,
            "async/learner_idle_frac": n["waited"] / n["step_s"] if n["step_s"] > 0 else 0.0,
            "async/generator_idle_frac": n["gen_idle_s"] / gen_total if gen_total > 0 else 0.0,
            "async/generate_s": n["gen_s"],  # the workers' generation time in the groups consumed this step
            "async/reference_s": n["ref_s"],  # and their time on the reference's log-probs (beta > 0)
            "async/weight_version": float(self.version),
            "async/worker_restarts": n["restarts"],
        }
        self._gen_s = self._gen_idle_s = self._ref_s = 0.0
        return out
