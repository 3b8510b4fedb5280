"""Remote scoring, off the learner's thread: submit a round's completions, keep generating or
computing, collect the rewards later.

The async :class:`verifiers.client.VerifierClient` runs on its own event loop in a daemon thread;
:meth:`Scorer.submit` returns a ``concurrent.futures.Future`` at once. The learner only waits in
:meth:`Scorer.result`, and that wait is what ``verify/idle_frac`` reports. Statuses travel with the
rewards: a rollout no verifier could judge is ``valid = False`` (masked), never a reward of 0.

Routing: each group goes only to the verifiers its row is routed to (``verifiers.records.route``: the
row's own list, else every configured verifier that accepts its reference kind), so one batch can mix
math and code rows and still makes one ``BatchVerifyGroups`` per verifier per chunk. A rollout's
reward is the weighted sum over *its* verifiers, and it is usable when each of those could judge it;
a verifier that does not apply to a row neither scores nor masks it (its component is NaN there).
Routes are checked for every row at start-up (:meth:`Scorer.check`), after the handshake has told
which reference kinds each verifier accepts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cohort.trainer.config import ScoringSection
from cohort.verifiers.records import RecordError, Task, check_routes, route


@dataclass
class Scores:
    rewards: Float[Tensor, "P G"]  # weighted sum (0 where not valid; never used there)
    valid: Bool[Tensor, "P G"]  # status OK
    components: dict[str, Float[Tensor, "P G"]]  # per verifier (and sub-component), NaN where absent
    latency_s: float  # submit -> scores ready
    steps: list[tuple] | None = None
    """Process supervision: per row (B = P*G, prompt-major) the ``StepReward``s of the ``kind: process``
    verifier, () where it sent none or the row is not valid; None without a process verifier."""
    statuses: list[list[str]] = dataclasses.field(default_factory=list)  # (P, G) status names ("ok", ...)

    def select(self, groups: list[int]) -> Scores:
        idx = torch.tensor(groups, dtype=torch.long)
        g = self.rewards.shape[1]
        steps = None if self.steps is None else [self.steps[k * g + j] for k in groups for j in range(g)]
        return Scores(self.rewards[idx], self.valid[idx], {k: v[idx] for k, v in self.components.items()},
                      self.latency_s, steps, [self.statuses[i] for i in groups] if self.statuses else [])


def client_tls(cfg: ScoringSection) -> dict:
    """``{verifier: ClientTls | None}``, its files read now: a bad one raises ``cohort.rpc.tls.TlsError`` naming it."""
    from cohort.rpc.tls import ClientTls

    return {v.name: None if v.tls is None else ClientTls.from_options(v.tls.ca, v.tls.cert, v.tls.key, v.tls.server_name)
            for v in cfg.verifiers}


class Scorer:
    def __init__(self, cfg: ScoringSection, endpoints: dict[str, list[str]]):
        from cohort.verifiers.client import VerifierClient, WeightedVerifier

        self.cfg = cfg
        tls = client_tls(cfg)
        # a process verifier's scalar reward stays out of the outcome sum (weight 0); its steps travel apart
        verifiers = [WeightedVerifier(v.name, v.weight if v.kind == "outcome" else 0.0, tuple(endpoints[v.name]),
                                      dict(v.options), tls[v.name]) for v in cfg.verifiers]
        self.process = next((v.name for v in cfg.verifiers if v.kind == "process"), None)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cohort-scorer", daemon=True)
        self._thread.start()
        self.client = self._run(self._make_client(VerifierClient, verifiers))
        self.versions = self._run(self.client.handshake())
        # route weights: a process verifier's scalar reward stays out of the outcome sum, as above
        self.defaults = {v.name: (v.weight if v.kind == "outcome" else 0.0, dict(v.options)) for v in cfg.verifiers}
        self.kinds = dict(self.client.reference_kinds)
        self._record = open(cfg.record_path, "a") if cfg.record_path else None  # scoring.record_path: an audit log
        self._submitted = 0

    def check(self, tasks: list[Task]) -> None:
        """Every row routes to configured verifiers that accept its reference (raises ValueError)."""
        try:
            check_routes(tasks, self.defaults, self.kinds)
        except RecordError as exc:
            raise ValueError(f"data: {exc}") from None

    async def _make_client(self, cls, verifiers):  # the channels belong to the scorer's loop
        return cls(verifiers, timeout_s=self.cfg.timeout_s, retries=self.cfg.retries,
                   attempt_timeout_s=self.cfg.attempt_timeout_s)

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def submit(self, tasks: list[Task], texts: list[str], truncated: list[bool], group_offset: int = 0) -> Future:
        """Score P groups of G completions (prompt-major ``texts``); returns a Future of :class:`Scores`."""
        from cohort.verifiers.base import GroupRequest, Rollout
        from cohort.verifiers.client import combine

        p = len(tasks)
        g = len(texts) // p
        plan, groups = [], []
        for i, task in enumerate(tasks):
            rollouts = tuple(Rollout(j, texts[i * g + j], bool(truncated[i * g + j])) for j in range(g))
            routes = route(task, self.defaults, self.kinds)
            plan.append((rollouts, routes))
            groups.extend(GroupRequest(r.name, rollouts, task.reference, f"g{group_offset + i}", task.prompt,
                                       task.rollout_timeout_s, dict(r.options)) for r in routes)
        started = time.perf_counter()
        serial, self._submitted = self._submitted, self._submitted + 1

        async def run() -> Scores:
            results = iter(await self.client.verify_groups(groups))  # one call per verifier (per server limit)
            scored = [combine(rollouts, {r.name: next(results) for r in routes}, {r.name: r.weight for r in routes})
                      for rollouts, routes in plan]
            if self._record is not None:
                self._write_record(serial, tasks, plan, scored, group_offset)
            scores = _to_tensors(scored, time.perf_counter() - started)  # latency includes the conversion
            if self.process is not None:
                scores.steps = [r.steps.get(self.process, ()) for group in scored for r in group]
            return scores

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def _write_record(self, serial: int, tasks: list[Task], plan, scored, group_offset: int) -> None:
        """One JSON line per submitted batch (``scoring.record_path``), written on the scorer's loop."""
        import json

        groups = [{"group_id": f"g{group_offset + i}", "answer": task.reference.answer,
                   "texts": [r.completion for r in rollouts], "truncated": [r.truncated for r in rollouts],
                   "status": [r.status.name for r in group], "reward": [r.reward for r in group]}
                  for i, (task, (rollouts, _routes), group) in enumerate(zip(tasks, plan, scored))]
        line = {"submission": serial, "client": dict(self.client.stats), "groups": groups}
        self._record.write(json.dumps(line) + "\n")
        self._record.flush()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self.client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if self._record is not None:
            self._record.close()


def _to_tensors(scored, latency_s: float) -> Scores:
    from cohort.verifiers.base import RolloutStatus

    p, g = len(scored), len(scored[0])
    flat = [r for group in scored for r in group]  # prompt-major, B = P*G
    valid = [r.status is RolloutStatus.OK for r in flat]
    rewards = [r.reward if ok else 0.0 for r, ok in zip(flat, valid)]
    nan = float("nan")
    names = sorted({k for r, ok in zip(flat, valid) if ok for k in r.components})
    components = {
        k: torch.tensor([r.components.get(k, nan) if ok else nan for r, ok in zip(flat, valid)],
                        dtype=torch.float64).view(p, g)
        for k in names
    }
    return Scores(torch.tensor(rewards, dtype=torch.float64).view(p, g), torch.tensor(valid).view(p, g),
                  components, latency_s, statuses=[[r.status.value for r in group] for group in scored])


def merge_scores(parts: list[Scores]) -> Scores:
    """Concatenate chunks along P (components missing from a chunk are NaN there)."""
    if len(parts) == 1:
        return parts[0]
    names = sorted({k for s in parts for k in s.components})
    comps = {
        k: torch.cat([s.components.get(k, torch.full_like(s.rewards, float("nan"))) for s in parts]) for k in names
    }
    steps = None if any(s.steps is None for s in parts) else [x for s in parts for x in s.steps]
    return Scores(torch.cat([s.rewards for s in parts]), torch.cat([s.valid for s in parts]), comps,
                  max(s.latency_s for s in parts), steps, [row for s in parts for row in s.statuses])
