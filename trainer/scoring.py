"""Remote scoring, off the learner's thread: submit a round's completions, keep generating or
computing, collect the rewards later.

The async :class:`verifiers.client.VerifierClient` runs on the one private event loop thread of blocking
callers (:class:`cohort.rpc.loop.BackgroundLoop`, shared with the TRL/verl adapters);
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
import time
from concurrent.futures import Future
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cohort.rpc.loop import BackgroundLoop
from cohort.trainer.config import ScoringSection
from cohort.trainer.distributed import SINGLE, Comm
from cohort.trainer.preflight import client_tls
from cohort.verifiers.records import RecordError, Task, check_routes, group_requests, route


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
    masked_by: list[list[str]] = dataclasses.field(default_factory=list)
    """(P, G): ``verifier/status`` of the verifier that masked each rollout, "" where usable."""
    flags: list[list[tuple[str, ...]]] = dataclasses.field(default_factory=list)
    """(P, G): ``verifier/flag`` set on each rollout (candidate-caused limits, hack attempts, ...)."""
    dropped: frozenset[str] = frozenset()
    """Verifiers left out of these rewards for an outage (``scoring.on_outage=drop``)."""

    def select(self, groups: list[int]) -> Scores:
        idx = torch.tensor(groups, dtype=torch.long)
        g = self.rewards.shape[1]
        steps = None if self.steps is None else [self.steps[k * g + j] for k in groups for j in range(g)]
        pick = lambda rows: [rows[i] for i in groups] if rows else []  # noqa: E731
        return Scores(self.rewards[idx], self.valid[idx], {k: v[idx] for k, v in self.components.items()},
                      self.latency_s, steps, pick(self.statuses), pick(self.masked_by), pick(self.flags), self.dropped)


OUTAGE_POLL_S = 0.5
"""Longest wait between two tries of an unavailable verifier (channels reconnect as fast: cohort.rpc.tls)."""


class OutageError(RuntimeError):
    """A verifier stayed unavailable longer than ``scoring.max_outage_s``."""


class Scorer:
    def __init__(self, cfg: ScoringSection, endpoints: dict[str, list[str]]):
        from cohort.verifiers.client import VerifierClient, WeightedVerifier

        self.cfg = cfg
        tls = client_tls(cfg)
        # a process verifier's scalar reward stays out of the outcome sum (weight 0); its steps travel apart
        verifiers = [WeightedVerifier(v.name, v.weight if v.kind == "outcome" else 0.0, tuple(endpoints[v.name]),
                                      dict(v.options), tls[v.name]) for v in cfg.verifiers]
        self.process = next((v.name for v in cfg.verifiers if v.kind == "process"), None)
        self._bg = BackgroundLoop("cohort-scorer")  # the one private event loop thread of blocking callers
        self.client = self._bg.run(self._make_client(VerifierClient, verifiers))
        self._bg.on_close(self.client.close)
        self.versions = self._bg.run(self.client.handshake())
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
        note = {"wait": "training waits until it is back (scoring.on_outage=wait)",
                "drop": "its weight is left out, the others renormalised, until it is back (scoring.on_outage=drop)",
                "mask": "its rollouts are masked until it is back (scoring.on_outage=mask)"}
        return cls(verifiers, timeout_s=self.cfg.timeout_s, retries=self.cfg.retries,
                   attempt_timeout_s=self.cfg.attempt_timeout_s, outage_note=note[self.cfg.on_outage])

    def describe(self) -> list[str]:
        """One line per verifier: endpoints, TLS mode, server version and limits from the handshake."""
        return self.client.describe()

    def outage_s(self) -> float:
        """Seconds any verifier has been unavailable so far (outages of different verifiers add up)."""
        return sum(a.total_down_s() for a in self.client.availability.values())

    def _droppable(self, name: str) -> bool:
        """``on_outage=drop`` may leave out a verifier while another outcome verifier with weight is up."""
        up = [n for n, (w, _) in self.defaults.items() if n != name and w > 0
              and self.client.availability[n].down_since is None]
        return self.cfg.on_outage == "drop" and bool(up)

    async def _verify(self, name: str, groups: list):
        """One verifier's results for ``groups``; through an outage, retried with backoff (capped at
        ``OUTAGE_POLL_S``, so a restarted verifier is used within about a second) or, with
        ``on_outage=drop``, None (left out). Scoring is pure, so a retry is safe."""
        from cohort.verifiers.client import VerifierUnavailable

        if self.cfg.on_outage == "mask":
            return await self.client.verify_groups(groups, unreachable="mask")
        wait = 0.05
        while True:
            try:
                return await self.client.verify_groups(groups, unreachable="raise")
            except VerifierUnavailable:
                if self._droppable(name):
                    return None
                since = self.client.availability[name].down_since
                if self.cfg.max_outage_s is not None and since is not None \
                        and time.monotonic() - since > self.cfg.max_outage_s:
                    raise OutageError(f"verifier {name!r} unavailable for over scoring.max_outage_s="
                                      f"{self.cfg.max_outage_s:g} s (last error: "
                                      f"{self.client.availability[name].last_error})") from None
                await asyncio.sleep(wait)
                wait = min(OUTAGE_POLL_S, wait * 2)

    def submit(self, tasks: list[Task], texts: list[str], truncated: list[bool], group_offset: int = 0) -> Future:
        """Score P groups of G completions (prompt-major ``texts``); returns a Future of :class:`Scores`."""
        from cohort.verifiers.base import Rollout
        from cohort.verifiers.client import combine

        p = len(tasks)
        g = len(texts) // p
        plan, groups = [], []
        for i, task in enumerate(tasks):
            rollouts = tuple(Rollout(j, texts[i * g + j], bool(truncated[i * g + j])) for j in range(g))
            routes = route(task, self.defaults, self.kinds)
            plan.append((rollouts, routes))
            groups.extend(group_requests(task, rollouts, routes, f"g{group_offset + i}"))
        started = time.perf_counter()
        serial, self._submitted = self._submitted, self._submitted + 1

        async def run() -> Scores:
            names = sorted({g.verifier for g in groups})
            per_verifier = await asyncio.gather(*(self._verify(n, [g for g in groups if g.verifier == n]) for n in names))
            dropped = frozenset(n for n, res in zip(names, per_verifier) if res is None)
            results = {n: iter(res or ()) for n, res in zip(names, per_verifier)}  # one call per verifier (per server limit)
            scored = [combine(rollouts, {r.name: next(results[r.name]) for r in routes if r.name not in dropped}
                              | {r.name: None for r in routes if r.name in dropped},
                              {r.name: r.weight for r in routes}, dropped)
                      for rollouts, routes in plan]
            if self._record is not None:
                self._write_record(serial, tasks, plan, scored, group_offset)
            scores = _to_tensors(scored, time.perf_counter() - started)  # latency includes the conversion
            scores.dropped = dropped
            if self.process is not None:
                scores.steps = [r.steps.get(self.process, ()) for group in scored for r in group]
            return scores

        return self._bg.submit(run())

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
        self._bg.close()
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
                  components, latency_s, statuses=[[r.status.value for r in group] for group in scored],
                  masked_by=[[f"{r.masked_by}/{r.status.value}" if r.masked_by else "" for r in group] for group in scored],
                  flags=[[r.flags for r in group] for group in scored])


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
                  max(s.latency_s for s in parts), steps, [row for s in parts for row in s.statuses],
                  [row for s in parts for row in s.masked_by], [row for s in parts for row in s.flags],
                  frozenset().union(*(s.dropped for s in parts)))


@dataclass(frozen=True)
class MaskCounts:
    """A round's rollouts, the usable ones, and the masked ones by ``verifier/status``: over every rank's
    rows (:meth:`of` sums them), so the alarm and the skip of a fully masked round are the same on every rank."""

    rollouts: int
    valid: int
    masked_by: dict[str, int]

    @staticmethod
    def of(scores: Scores, comm: Comm = SINGLE) -> MaskCounts:
        import collections

        local = collections.Counter(k for row in scores.masked_by for k in row if k)
        total = comm.sum_floats({"rollouts": scores.valid.numel(), "valid": int(scores.valid.sum()),
                                 **{f"masked_by/{k}": n for k, n in local.items()}})  # one collective
        return MaskCounts(int(total.pop("rollouts")), int(total.pop("valid")),
                          {k.removeprefix("masked_by/"): int(n) for k, n in total.items()})


class MaskedShare:
    """The masked-share alarm: the share of rollouts each verifier masks with each status, over the last
    ``scoring.masked_window`` rounds. A mask removes a rollout's gradient, so a share that rises is either
    an outage or a policy that found how to earn masks; either way a person should look.

    :meth:`observe` takes the round's :class:`MaskCounts` and returns its metrics
    (``verify/masked_frac/<verifier>/<status>``, ``verify/masked_alarm``) and says (``say``) one line when a
    share rises past ``masked_alarm_frac`` (or to double its first full window's share, once that is at least
    1%), one when it falls back. Past ``max_masked_frac`` over a full window it raises :class:`MaskedShareError`."""

    def __init__(self, cfg: ScoringSection) -> None:
        import collections

        self.cfg = cfg
        self.window: collections.deque = collections.deque(maxlen=cfg.masked_window)
        self.baseline: dict[str, float] | None = None
        self.alarmed: set[str] = set()

    def observe(self, counts: MaskCounts, say) -> dict[str, float]:
        import collections

        self.window.append((counts.masked_by, counts.rollouts))
        total = sum(n for _, n in self.window)
        masked = collections.Counter()
        for c, _ in self.window:
            masked.update(c)
        fracs = {k: v / total for k, v in sorted(masked.items())}
        full = len(self.window) == self.window.maxlen
        if full and self.baseline is None:
            self.baseline = dict(fracs)
        base = self.baseline or {}
        alarming = {k for k, f in fracs.items()
                    if f > self.cfg.masked_alarm_frac or (base.get(k, 0) > 0 and f >= 0.01 and f >= 2 * base[k])}
        span = f"the last {len(self.window)} rounds"
        lines = [f"masked-share alarm: {k} masks {fracs[k]:.1%} of rollouts over {span} (alarm past "
                 f"{self.cfg.masked_alarm_frac:.0%}, or double the first window's {base.get(k, 0):.1%})"
                 for k in sorted(alarming - self.alarmed)]
        lines += [f"masked share back to normal: {k} {fracs.get(k, 0):.1%} over {span}"
                  for k in sorted(self.alarmed - alarming)]
        self.alarmed = alarming
        overall = sum(masked.values()) / total
        if full and self.cfg.max_masked_frac is not None and overall > self.cfg.max_masked_frac:
            worst = ", ".join(f"{k} {f:.1%}" for k, f in sorted(fracs.items(), key=lambda kv: -kv[1])[:3])
            raise MaskedShareError(f"{overall:.1%} of rollouts masked over {span}, above scoring.max_masked_frac="
                                   f"{self.cfg.max_masked_frac:g} ({worst})")
        for line in lines:
            say(line)
        record = {f"verify/masked_frac/{k}": f for k, f in fracs.items()}
        return record | {"verify/masked_alarm": float(bool(alarming))}


class MaskedShareError(RuntimeError):
    """The masked share passed ``scoring.max_masked_frac``."""
