"""The asynchronous pipeline (``rollout.max_staleness = k > 0``): generation never waits for an update.

``rollout.workers`` rollout processes (``trainer.rollout_worker``) each hold an engine and the newest
weights they have received, and generate work orders continuously. Every finished order goes to the
verifiers the moment it arrives (the learner's one :class:`~cohort.trainer.scoring.Scorer`, so outage
handling, masking and metrics are the lock-step loop's), and the scored groups wait in a bounded buffer
that :meth:`Pipeline.next_round` consumes P groups at a time. After each update the learner broadcasts the
new weights (``trainer.wire``) and goes straight on to the next round.

**Bounding staleness.** A group generated with weight version v and consumed when the learner holds
version s has staleness s - v. Two mechanisms, one primary and one a guarantee:

1. *Admission* (primary): between rounds the learner keeps k * P groups ordered but not yet consumed (plus,
   while it builds a round, the groups that round still needs), and each order names the learner's version
   when it was sent as the oldest the worker may generate it with. Consumed in order, a group is then at
   most k versions old, so in the steady state nothing is wasted.
2. *Rejection* (the guarantee): a group that arrives more than k versions old anyway (a slow verifier held
   it, dynamic sampling consumed faster than planned) is dropped, counted (``async/dropped_stale``), and
   its prompt goes to the front of the next order: no prompt is silently lost.

Why not rejection alone (TRL, prime-rl): generation would run ahead freely and throw away work whenever
the learner is the slower side; why not a depth bound alone: it bounds the queue, not the age, so one slow
verifier call could let an old group through. Admission wastes nothing and rejection makes the bound hold.

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

**A spawned worker that dies** is started again up to ``rollout.worker_restarts`` times: every worker is
stopped and the job formed again (a process group cannot take a new member); past that, or under
``torchrun`` (its ``--max-restarts`` starts the whole job again), the run ends with an error naming it.

**DDP/FSDP2 learners** (``distributed.parallel``, under ``torchrun``): every learner rank runs a pipeline of its
own with ``rollout.workers`` private workers it spawns on its machine (a job of their own, never the learners'
process group), and consumes P / world groups a round. The learners update in step, so their weight versions
agree; each broadcasts the full weights to its own workers (FSDP2 gathers them first, collectively). Every rank
draws the same P prompts at a time from the same sampler and orders only its own share (lock-step's rule), so no
two learners train on the same draw; before a checkpoint the ranks draw on to one sampler position, and what a
rank has drawn but not ordered is saved with its pending prompts.
"""

from __future__ import annotations

import collections
import datetime
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from cohort.trainer import distributed, spawn_workers, wire
from cohort.trainer.advantages import group_advantages
from cohort.trainer.collect import Round, pad_right
from cohort.trainer.config import TrainConfig
from cohort.trainer.flat_layout import FlatLayout
from cohort.trainer.metrics import StepTimer
from cohort.trainer.precision import resolve
from cohort.trainer.rollout import RolloutBatch, concat_batches
from cohort.trainer.rollout_worker import BYE, STOP, Order
from cohort.trainer.scoring import Scores, merge_scores
from cohort.trainer.tool_rollouts import mask_failures

EXIT_GRACE_S = 5.0
"""After an exchange with the workers fails, how long to look for the worker that exited, to name it."""
START_TIMEOUT_S = 600.0
"""Workers that have not joined the job by then are an error (they load the model first)."""


@dataclass(eq=False)
class _Group:
    """One prompt's G scored rows."""

    idx: int  # the example index
    rows: RolloutBatch
    scores: Scores  # (1, G)
    version: int
    ref_logprobs: torch.Tensor | None  # (G, T') the reference's, when the worker computed them


class WorkerDied(RuntimeError):
    """A spawned rollout worker exited (``rollout.worker_restarts`` may start the workers again)."""


class Pipeline:
    """The rollout workers and the buffer, from the learner's side. Stands in for the engine of the lock-step
    loop: ``sync_weights`` publishes a new version, ``state_dict`` is the checkpoint's share."""

    def __init__(self, cfg: TrainConfig, comm: distributed.Comm = distributed.SINGLE) -> None:
        self.cfg, self.comm = cfg, comm
        self.k, self.n_workers = cfg.rollout.max_staleness, cfg.rollout.workers
        self.p = cfg.grpo.prompts_per_step // comm.world_size  # this learner's groups a round
        if self.p % cfg.rollout.generation_chunks:
            raise ValueError(f"rollout.generation_chunks={cfg.rollout.generation_chunks} must divide each learner's "
                             f"grpo.prompts_per_step / world size = {self.p}")
        self.chunk = self.p // cfg.rollout.generation_chunks
        self.version = 0
        self._requeue: collections.deque[int] = collections.deque()
        self._mine: collections.deque[int] = collections.deque()  # drawn for this learner, not yet ordered
        self._draws = 0  # draws of P prompts from the sampler
        self._of = f" of learner rank {comm.rank}" if comm.distributed else ""  # in the names of the workers
        self._orders: dict[int, tuple[int, Order]] = {}  # id -> (worker rank, order): sent, not yet consumed
        self._lock = threading.Lock()  # guards _orders (the receiver thread reads it)
        self._arrived: queue.Queue = queue.Queue()  # (Generated, Order, Future[Scores]) or an Exception
        self._ready: collections.deque[_Group] = collections.deque()
        self._next_id = 0
        self._spawned: spawn_workers.Workers | None = None
        self._links: wire.Links | None = None
        self._weight_works: list = []
        self._flat: torch.Tensor | None = None  # the current version's weights, one of:
        self._buffers: list[torch.Tensor | None] = [None, None]
        """Host memory the versions alternate between (page-locked for a policy on a GPU): version v is written
        into ``v % 2`` while v - 1 may still be on the wire; v - 2's broadcast was done before v - 1's began."""
        self._push_dtype = resolve(cfg.model.dtype, distributed.local_device(cfg.model.device)).compute  # bf16 copy
        self._closing = False
        self._init = ""
        self.dropped_stale = 0
        self.restarts = 0  # times the workers were started again after one died
        self._arrived_ids: set[int] = set()  # orders whose groups came back, not yet consumed (guarded by _lock)
        self._policy: torch.nn.Module | None = None
        self.submitted_groups = 0  # groups generated and sent to the verifiers (each gets a status, or is lost)
        self._lags: list[int] = []
        self._gen_s = self._gen_idle_s = self._ref_s = 0.0
        self.consumed: list[list[int]] = []
        """Per round, the example indices of its groups (and, with dynamic sampling, ``left_out`` the ones left
        out for lack of signal): with ``state_dict``'s pending prompts, every prompt drawn is accounted for."""
        self.left_out: list[int] = []

    # ---- the engine's interface (checkpoints, weight sync) ---------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The prompts of every group drawn for this learner but not consumed (ordered again first on resume).
        Collective with several learners: they draw on to the same sampler position first."""
        if self.comm.world_size > 1:
            self._draw_to(int(self.comm.max_int(self._draws)))
        with self._lock:
            ordered = [i for _, order in self._orders.values() for i in order.idx]
        return {"pending_prompts": [*self._requeue, *ordered, *(g.idx for g in self._ready), *self._mine]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._requeue = collections.deque(state.get("pending_prompts", []))

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """After an update: the next version to the workers (the broadcast runs while the learner goes on)."""
        self.version += 1
        self._flat = self._full_weights(policy)  # the other buffer than the previous version's, maybe still sending
        self._recovering(self._broadcast)

    # ---- start and stop ------------------------------------------------------------------------------

    def spawn(self, early: spawn_workers.Workers | None = None) -> None:
        """Start the workers on this machine (not under torchrun, which starts them), or take those ``cohort
        train`` started ``early``: before the learner builds its model and verifiers, so that the workers'
        start-up (imports, their own model) overlaps it."""
        world = 1 + self.n_workers
        if distributed.launched() and not self.comm.distributed:  # torchrun started the workers: ranks 1..
            if int(os.environ["WORLD_SIZE"]) != world:
                raise ValueError(f"torchrun started {os.environ['WORLD_SIZE']} processes; the asynchronous pipeline "
                                 f"needs 1 + rollout.workers = {world} (rank 0 is the learner)")
            self._init = "env://"
            return
        self._spawned = early or spawn_workers.start(self.cfg, self.comm.rank)
        self._init = self._spawned.init

    @property
    def _procs(self) -> list[Any]:
        return self._spawned.procs if self._spawned else []

    def start(self, src: Any, policy: torch.nn.Module, version: int) -> None:
        """Join the workers (:meth:`spawn` first), send them version ``version`` and the first orders."""
        self.version = version
        self._src, self._policy = src, policy
        self._links = self._join(self._init, 1 + self.n_workers)
        self._receiver = threading.Thread(target=self._receive, args=(self._links, self.restarts), daemon=True,
                                          name="pipeline-receiver")
        self._receiver.start()
        if self._flat is None:  # the first start (a restart sends the current version's weights again)
            self._flat = self._full_weights(policy)
        if self.cfg.rollout.engine == "vllm-server":  # relays hold no model: what the buffers hold, once per join
            layout = FlatLayout.of(distributed.unwrap(policy), self._push_dtype)
            for rank in range(1, 1 + self.n_workers):
                wire.send(layout, rank, self._links.down)
        self._broadcast()
        self._top_up(self.p)

    def _join(self, init: str, world: int) -> wire.Links:
        """Join the job, failing (naming the worker) when a spawned worker dies before it joins."""
        box: dict[str, Any] = {}

        def join() -> None:
            try:
                box["links"] = wire.Links.join(init, wire.LEARNER, world)
            except Exception as exc:
                box["error"] = exc

        thread = threading.Thread(target=join, daemon=True, name="pipeline-join")
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while thread.is_alive():
            thread.join(0.2)
            self._check_workers()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the rollout workers did not join within {START_TIMEOUT_S:.0f}s")
        if "error" in box:
            raise RuntimeError(f"joining the rollout workers failed: {box['error']}")
        return box["links"]

    def close(self) -> None:
        """Stop the workers (they finish the generation in hand) and leave the job; never hangs."""
        if self._links is None:
            self._reap()
            return
        self._closing = True
        try:
            for rank in range(1, 1 + self.n_workers):
                wire.send(STOP, rank, self._links.down)
            self._wait_weights(timeout_s=10.0)
            for work in wire.end_weights(self._links.weights):
                work.wait(timeout=datetime.timedelta(seconds=10))
        except Exception:  # a worker is gone already: what is left is to reap it
            pass
        self._receiver.join(timeout=30 if all(p.is_alive() for p in self._procs) else 2)
        if not self._receiver.is_alive():
            self._links.leave()
        self._links = None
        self._reap()

    def _reap(self) -> None:
        if self._spawned:
            self._spawned.reap()

    # ---- a worker that died ----------------------------------------------------------------------------

    def _recovering(self, fn, *args):
        """``fn(*args)``; when a spawned worker has died, the workers are started again (at most
        ``rollout.worker_restarts`` times in the run) and ``fn`` is called again."""
        while True:
            try:
                return fn(*args)
            except WorkerDied as died:
                if not self._procs or self.restarts >= self.cfg.rollout.worker_restarts:
                    raise
                self._restart(died)

    def _restart(self, died: WorkerDied) -> None:
        """Stop every worker and leave the job (a process group cannot take a new member), then spawn and join
        them again, send the current weights, and order the prompts of every order that had not come back
        first: groups already generated stay in the buffer, so no prompt is lost and none is used twice."""
        self.restarts += 1
        distributed.SINGLE.say(f"{died}; starting the rollout workers again (restart {self.restarts} of "
                               f"rollout.worker_restarts={self.cfg.rollout.worker_restarts})")
        self._closing = True
        for p in self._procs:
            p.terminate()  # a worker closes its engine on SIGTERM (vLLM's engine core, its work folder); _reap kills
        self._reap()
        # gloo's receive from any rank does not always fail when the peers die, and cannot be aborted or polled
        # (a timed-out wait closes the connection): a receiver still blocked is left in the old group, a daemon
        # thread of an older generation that holds its own links, so it never touches the new group and, should its
        # receive ever fail, reports nothing (one such thread per restart at most)
        self._receiver.join(timeout=5)
        self._weight_works = []
        self._links.leave()
        self._links = None  # a failure from here on: close() only reaps
        kept = []
        while True:  # arrivals stay (their scores are on the way); the receiver's error about the dead worker goes
            try:
                item = self._arrived.get_nowait()
            except queue.Empty:
                break
            if not isinstance(item, Exception):
                kept.append(item)
        for item in kept:
            self._arrived.put(item)
        with self._lock:
            lost = [order for oid, (_, order) in sorted(self._orders.items()) if oid not in self._arrived_ids]
            for order in lost:
                del self._orders[order.id]
        self._requeue.extendleft(reversed([i for order in lost for i in order.idx]))
        self._closing = False
        self.spawn()
        self.start(self._src, self._policy, self.version)  # a worker dying here ends the run (raised from here)

    # ---- weights ---------------------------------------------------------------------------------------

    def _full_weights(self, policy: torch.nn.Module) -> torch.Tensor:
        """The policy's full weights, flat (FSDP2: gathered from every learner's shards, so collective)."""
        slot = self.version % 2
        with distributed.gathered(policy):
            self._buffers[slot] = wire.flat_parameters(distributed.unwrap(policy), self._buffers[slot], self._push_dtype)
        return self._buffers[slot]

    def _broadcast(self) -> None:
        """The current version's weights to the workers (the previous broadcast done first); ``_flat`` stays
        alive until this one is done."""
        self._wait_weights(self.cfg.rollout.weight_sync_timeout_s)
        self._weight_works = wire.broadcast_weights(self.version, self._flat, self._links.weights)

    def _wait_weights(self, timeout_s: float) -> None:
        """The previous broadcast done, within ``timeout_s``; else an error naming the workers."""
        works, self._weight_works = self._weight_works, []
        for work in works:
            try:
                work.wait(timeout=datetime.timedelta(seconds=timeout_s))
            except RuntimeError as exc:
                self._check_workers(EXIT_GRACE_S)
                raise RuntimeError(f"the weight sync to rollout worker(s) {self._worker_names()} did not finish "
                                   f"within rollout.weight_sync_timeout_s={timeout_s:g}s ({exc})") from None

    # ---- orders and arrivals ---------------------------------------------------------------------------

    def _outstanding(self) -> int:
        with self._lock:
            return sum(len(order.idx) for _, order in self._orders.values()) + len(self._ready)

    def _top_up(self, remaining: int) -> None:
        """Order groups until k * P + ``remaining`` (the groups the round being built still needs) are ordered
        and not consumed (admission; module docstring). Consumed in order, the j-th of them (0-based) goes
        into the round after ``(j - remaining) // P`` more updates, so an order sent at version v is consumed
        at version v + k at the latest."""
        src, target = self._src, self.k * self.p + remaining
        while self._outstanding() + self.chunk <= target:
            n_old = min(self.chunk, len(self._requeue))
            idx = [self._requeue.popleft() for _ in range(n_old)] + self._draw(self.chunk - n_old)
            order = Order(self._next_id, idx, [src.prompt_ids[i] for i in idx], self.version)
            self._next_id += 1
            with self._lock:
                load = collections.Counter({r: 0 for r in range(1, 1 + self.n_workers)})
                load.update({r: len(o.idx) for r, o in self._orders.values()})
                worker = min(load, key=lambda r: (load[r], r))
                self._orders[order.id] = (worker, order)
            try:
                wire.send(order, worker, self._links.down)
            except Exception as exc:
                self._check_workers(EXIT_GRACE_S)
                raise RuntimeError(f"sending work to rollout worker {worker}{self._of} failed: {exc}") from None

    def _draw(self, n: int) -> list[int]:
        """``n`` new prompts for this learner: its share of each draw of P (all P with one learner)."""
        while len(self._mine) < n:
            self._draw_to(self._draws + 1)
        return [self._mine.popleft() for _ in range(n)]

    def _draw_to(self, draws: int) -> None:
        while self._draws < draws:
            drawn = self._src.sampler.next(self.cfg.grpo.prompts_per_step)
            self._mine.extend(drawn[self.comm.rank * self.p:(self.comm.rank + 1) * self.p])
            self._draws += 1

    def _receive(self, links: wire.Links, generation: int) -> None:
        """The receiver thread: every finished order to the verifiers at once, then into the buffer.
        ``generation``: the restarts before it started (a receiver of workers since stopped reports nothing)."""
        byes = 0
        try:
            while byes < self.n_workers:
                _, message = wire.receive(links.up)
                if message == BYE:
                    byes += 1
                    continue
                if self._closing or generation != self.restarts:
                    continue
                with self._lock:
                    _, order = self._orders[message.order]
                src = self._src
                future = src.scorer.submit([src.examples[i] for i in order.idx], message.batch.texts,
                                           message.batch.truncated.tolist(), order.id * self.chunk)
                self.submitted_groups += len(order.idx)
                with self._lock:
                    self._arrived_ids.add(order.id)
                self._arrived.put((message, order, future))
        except Exception as exc:
            if not self._closing and generation == self.restarts:
                self._arrived.put(RuntimeError(f"receiving from the rollout workers failed: {exc}"))

    def _next_group(self, timer: StepTimer) -> _Group:
        """The next scored group, in arrival order (waiting, timed as ``buffer_wait`` and ``verify_wait``)."""
        while not self._ready:
            with timer("buffer_wait"):
                item = self._arrival()
            message, order, future = item
            with timer("verify_wait"):  # masked before dynamic sampling reads them (as the lock-step loop)
                scores = mask_failures(future.result(), message.batch)
            with self._lock:
                del self._orders[order.id]
                self._arrived_ids.discard(order.id)
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
                item = self._arrived.get(timeout=0.5)
            except queue.Empty:
                self._check_workers()
                continue
            if isinstance(item, Exception):
                self._check_workers(EXIT_GRACE_S)
                raise item
            return item

    def _check_workers(self, grace_s: float = 0.0) -> None:
        """RuntimeError naming a spawned worker that has exited. ``grace_s``: after a failed exchange with the
        workers, how long to wait for the dead one to be seen exiting (a peer's closed connection can be
        noticed before the kernel has reaped the process)."""
        deadline = time.monotonic() + grace_s
        while True:
            for rank, p in enumerate(self._procs, start=1):
                if p.exitcode is not None:
                    raise WorkerDied(f"rollout worker {rank}{self._of} (pid {p.pid}) exited with code {p.exitcode}"
                                     + (" (its error is on stderr above)" if p.exitcode == 1 else ""))
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def _worker_names(self) -> str:
        return ", ".join(f"{r}{self._of} (pid {p.pid})" for r, p in enumerate(self._procs, start=1)) or \
            f"ranks 1..{self.n_workers}"

    # ---- the learner's round ---------------------------------------------------------------------------

    def next_round(self, src: Any, timer: StepTimer):
        """P groups at most k versions old (dropping and re-ordering older ones), with dynamic sampling's
        refill of groups without signal, as the lock-step loop's :class:`~cohort.trainer.collect.Round`."""
        cfg = self.cfg
        p_want = self.p
        dynamic = cfg.grpo.dynamic_sampling
        budget = p_want * (1 + cfg.grpo.max_resample_rounds) if dynamic else p_want
        self._depth_ready = len(self._ready) + self._arrived.qsize()  # generated groups waiting, at the step's start
        kept: list[_Group] = []
        flat: list[_Group] = []
        seen = 0
        while len(kept) < p_want:
            if seen >= budget:  # refills ran out: the last flat groups fill the round (as the lock-step loop)
                kept += flat[len(flat) - (p_want - len(kept)):]
                break
            self._recovering(self._top_up, p_want - len(kept))
            group = self._recovering(self._next_group, timer)
            if self.version - group.version > self.k:
                self.dropped_stale += 1
                self._requeue.append(group.idx)
                continue
            seen += 1
            if dynamic and not bool(group_advantages(group.scores.rewards, group.scores.valid,
                                                     cfg.grpo.scale_rewards).informative_groups[0]):
                flat.append(group)
                continue
            kept.append(group)
        self._recovering(self._top_up, 0)
        self.consumed.append([g.idx for g in kept])
        self.left_out += [g.idx for g in flat if not any(g is k for k in kept)]
        self._lags = [self.version - g.version for g in kept]
        batch = concat_batches([g.rows for g in kept], src.pad_id)
        scores = merge_scores([g.scores for g in kept])
        ids, mask, t = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
        behaviour = batch.rollout_logprobs
        if all(g.ref_logprobs is not None for g in kept):  # the workers computed them
            ref = torch.cat([pad_right(g.ref_logprobs, t) for g in kept])
        else:
            with timer("logprobs"):
                ref = None if src.ref_logprobs is None else src.ref_logprobs(ids, mask, t)
        resampled = max(0, seen - p_want) if dynamic else 0
        if cfg.rollout.is_correction == "none":  # naive off-policy PPO: the ratio against the behaviour policy
            return Round(batch, scores, ref, old_logprobs=behaviour, resampled=resampled)
        # the decoupled objective: the learner's first pass is the proximal policy (pi_old of the ratio, and
        # the numerator of the importance weight it computes itself: UpdateBatch.behaviour_logprobs)
        return Round(batch, scores, ref, behaviour_logprobs=behaviour, resampled=resampled)

    def metrics(self, timer: StepTimer) -> dict[str, float]:
        """Staleness of the round consumed, drops, buffer depth, and the idle fractions of both sides, over every
        learner (sums and counts summed over the ranks, then divided; maxima over the ranks)."""
        n = self.comm.sum_floats({
            "lags": float(sum(self._lags)), "groups": float(len(self._lags)), "dropped": float(self.dropped_stale),
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
