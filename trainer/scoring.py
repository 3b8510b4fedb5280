"""Remote scoring, off the learner's thread: submit a round's completions, keep generating or
computing, collect the rewards later.

The one scoring call (:meth:`cohort.verifiers.client.VerifierClient.score`: route each row, one
``BatchVerifyGroups`` per verifier per chunk, ride out an outage as ``scoring.on_outage`` says, combine with
weights) runs on the private event loop thread of the blocking client
(:class:`cohort.verifiers.blocking.BlockingClient`, the adapters' too); :meth:`Scorer.submit` returns a
``concurrent.futures.Future`` of :class:`Scores` at once. The learner only waits in ``Future.result``, and that
wait is what ``verify/idle_frac`` reports. Statuses travel with the rewards: a rollout no verifier could judge
is ``valid = False`` (masked), never a reward of 0, and so is a rollout whose tool call hit an infrastructure
failure (masked here, where the scores are made, so a round has one ``Scores``).

Routing: each group goes only to the verifiers its row is routed to (``verifiers.records.route``: the
row's own list, else every configured verifier that accepts its reference kind), so one batch can mix
math and code rows. A rollout's reward is the weighted sum over *its* verifiers, and it is usable when each
of those could judge it; a verifier that does not apply to a row neither scores nor masks it (its component
is NaN there). Routes are checked for every row at start-up (:meth:`Scorer.check`), after the handshake has
told which reference kinds each verifier accepts.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cohort.trainer.config import ScoringSection
from cohort.trainer.distributed import SINGLE, Comm
from cohort.trainer.preflight import client_tls
from cohort.verifiers.base import Rollout, RolloutStatus
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import OutageError, WeightedVerifier
from cohort.verifiers.combine import ScoredRollout
from cohort.verifiers.records import Record, RecordError, Task, check_routes

if TYPE_CHECKING:
    from cohort.trainer.rollout import ToolTrace

__all__ = ["MaskCounts", "MaskedShare", "MaskedShareError", "OutageError", "Scorer", "Scores", "merge_scores",
           "TOOL_FAILED_STATUS"]

TOOL_FAILED_STATUS = "tool_unavailable"
"""The status of a rollout whose tool call hit an infrastructure failure (``masked_by``: ``tools/<status>``)."""


@dataclass
class Scores:
    rewards: Float[Tensor, "P G"]  # weighted sum (0 where not valid; never used there)
    valid: Bool[Tensor, "P G"]  # status OK, and no tool call hit an infrastructure failure
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

    @staticmethod
    def of(scored: list[list[ScoredRollout]], latency_s: float, tool_failed: Bool[Tensor, "P G"] | None = None
           ) -> Scores:
        """The tensors of P groups of G combined verdicts; ``tool_failed``: rollouts masked whatever the
        verifiers said (:data:`TOOL_FAILED_STATUS`)."""
        p, g = len(scored), len(scored[0])
        flat = [r for group in scored for r in group]  # prompt-major, B = P*G
        judged = [r.status is RolloutStatus.OK for r in flat]  # the verifiers could judge it
        failed = [False] * len(flat) if tool_failed is None else tool_failed.flatten().tolist()
        valid = [ok and not f for ok, f in zip(judged, failed)]
        rewards = [r.reward if ok else 0.0 for r, ok in zip(flat, valid)]
        nan = float("nan")
        names = sorted({k for r, ok in zip(flat, judged) if ok for k in r.components})
        components = {  # what the verifiers said, a tool failure's rollout included (it is masked by ``valid``)
            k: torch.tensor([r.components.get(k, nan) if ok else nan for r, ok in zip(flat, judged)],
                            dtype=torch.float64).view(p, g)
            for k in names
        }
        statuses = [TOOL_FAILED_STATUS if f else r.status.value for r, f in zip(flat, failed)]
        masked_by = [f"tools/{TOOL_FAILED_STATUS}" if f else f"{r.masked_by}/{r.status.value}" if r.masked_by else ""
                     for r, f in zip(flat, failed)]
        rows = lambda xs: [xs[k * g : (k + 1) * g] for k in range(p)]  # noqa: E731
        dropped = frozenset().union(*(r.dropped for r in flat))
        return Scores(torch.tensor(rewards, dtype=torch.float64).view(p, g), torch.tensor(valid).view(p, g),
                      components, latency_s, statuses=rows(statuses), masked_by=rows(masked_by),
                      flags=[[r.flags for r in group] for group in scored], dropped=dropped)


class Scorer:
    def __init__(self, cfg: ScoringSection, endpoints: dict[str, list[str]]):
        self.cfg = cfg
        tls = client_tls(cfg)
        # a process verifier's scalar reward stays out of the outcome sum (weight 0); its steps travel apart
        verifiers = [WeightedVerifier(v.name, v.weight if v.kind == "outcome" else 0.0, tuple(endpoints[v.name]),
                                      dict(v.options), tls[v.name]) for v in cfg.verifiers]
        self.process = next((v.name for v in cfg.verifiers if v.kind == "process"), None)
        note = {"wait": "training waits until it is back (scoring.on_outage=wait)",
                "drop": "its weight is left out, the others renormalised, until it is back (scoring.on_outage=drop)",
                "mask": "its rollouts are masked until it is back (scoring.on_outage=mask)"}
        self.remote = BlockingClient(verifiers, thread_name="cohort-scorer", timeout_s=cfg.timeout_s,
                                     retries=cfg.retries, attempt_timeout_s=cfg.attempt_timeout_s,
                                     outage_note=note[cfg.on_outage])
        self.client = self.remote.client
        self.versions = self.remote.handshake()
        self.defaults = self.client.defaults  # route weights: a process verifier's is 0, as above
        self.kinds = dict(self.client.reference_kinds)
        self._record = open(cfg.record_path, "a") if cfg.record_path else None  # scoring.record_path: an audit log
        self._submitted = 0

    def check(self, tasks: list[Task]) -> None:
        """Every row routes to configured verifiers that accept its reference (raises ValueError)."""
        try:
            check_routes(tasks, self.defaults, self.kinds)
        except RecordError as exc:
            raise ValueError(f"data: {exc}") from None

    def describe(self) -> list[str]:
        """One line per verifier: endpoints, TLS mode, server version and limits from the handshake."""
        return self.client.describe()

    def outage_s(self) -> float:
        """Seconds any verifier has been unavailable so far (outages of different verifiers add up)."""
        return sum(a.total_down_s() for a in self.client.availability.values())

    def submit(self, tasks: list[Task], texts: list[str], truncated: list[bool], group_offset: int = 0,
               tools: ToolTrace | None = None) -> Future:
        """Score P groups of G completions (prompt-major ``texts``); returns a Future of :class:`Scores`.

        ``tools``: what tools did in these rows (``batch.tools``); a rollout whose tool call hit an
        infrastructure failure is masked with :data:`TOOL_FAILED_STATUS`, whatever the verifiers said of its text."""
        p = len(tasks)
        g = len(texts) // p
        rows = [Record(dataclasses.replace(task, id=f"g{group_offset + i}"),
                       tuple(Rollout(j, texts[i * g + j], bool(truncated[i * g + j])) for j in range(g)))
                for i, task in enumerate(tasks)]
        failed = None if tools is None else tools.failed.view(p, g)
        started = time.perf_counter()
        serial, self._submitted = self._submitted, self._submitted + 1

        async def run() -> Scores:
            scored = await self.client.score(rows, on_outage=self.cfg.on_outage, max_outage_s=self.cfg.max_outage_s)
            if self._record is not None:
                self._write_record(serial, rows, scored)
            scores = Scores.of(scored, time.perf_counter() - started, failed)  # latency includes the conversion
            if self.process is not None:
                scores.steps = [r.steps.get(self.process, ()) for group in scored for r in group]
            return scores

        return self.remote.submit(run())

    def _write_record(self, serial: int, rows: list[Record], scored: list[list[ScoredRollout]]) -> None:
        """One JSON line per submitted batch (``scoring.record_path``), written on the scorer's loop."""
        import json

        groups = [{"group_id": row.task.id, "answer": row.task.reference.answer,
                   "texts": [r.completion for r in row.rollouts], "truncated": [r.truncated for r in row.rollouts],
                   "status": [r.status.name for r in group], "reward": [r.reward for r in group]}
                  for row, group in zip(rows, scored)]
        line = {"submission": serial, "client": dict(self.client.stats), "groups": groups}
        self._record.write(json.dumps(line) + "\n")
        self._record.flush()

    def close(self) -> None:
        self.remote.close()
        if self._record is not None:
            self._record.close()


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
