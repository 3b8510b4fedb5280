"""Several verifiers' results for one group, combined into one reward per rollout (pure: no gRPC).

The last step of the one scoring call (:meth:`cohort.verifiers.client.VerifierClient.score`: route, fan out,
combine): the weighted sum over the row's verifiers, components ``name`` and ``name/component``, and a
rollout usable only when every verifier that scored it could judge it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cohort.verifiers.base import GroupResult, Rollout, RolloutResult, RolloutStatus, StepReward


@dataclass(slots=True)
class ScoredRollout:
    index: int
    reward: float
    status: RolloutStatus
    components: Mapping[str, float]
    detail: str = ""
    steps: Mapping[str, tuple[StepReward, ...]] = field(default_factory=dict)
    """Step rewards per verifier that sent any (process supervision), only when usable."""
    flags: tuple[str, ...] = ()
    """``verifier/flag`` for every flag a verifier set (e.g. a candidate-caused limit, a hack attempt)."""
    masked_by: str = ""
    """The verifier whose status masked this rollout ("" when usable)."""
    results: Mapping[str, RolloutResult] = field(default_factory=dict)
    """Each verifier's own result for this rollout (those left out for an outage have none)."""
    dropped: frozenset[str] = frozenset()
    """Verifiers the call left out for an outage (``on_outage="drop"``): not in this reward."""

    @property
    def usable(self) -> bool:
        return self.status is RolloutStatus.OK


def combine(rollouts: Sequence[Rollout], results: Mapping[str, GroupResult | None], weights: Mapping[str, float],
            dropped: frozenset[str] = frozenset()) -> list[ScoredRollout]:
    """Weighted sum per rollout; components ``name`` and ``name/component``; unusable if any verifier is.

    ``dropped``: verifiers left out (an outage the caller chose to ride out without them; their entry in
    ``results`` is None): not in the sum, and the other weights scaled up to the configured total
    (renormalised)."""
    used = {name: w for name, w in weights.items() if name in results and name not in dropped}
    total = sum(w for name, w in weights.items() if name in results)
    if dropped & results.keys() and total > 0 and not any(used.values()):  # nothing left to score with
        name = sorted(dropped & results.keys())[0]
        return [ScoredRollout(r.index, 0.0, RolloutStatus.DEPENDENCY_UNAVAILABLE, {}, f"{name}: unavailable (dropped)",
                              masked_by=name, dropped=dropped) for r in rollouts]
    scale = total / sum(used.values()) if dropped and sum(used.values()) else 1.0
    scored = []
    for pos, rollout in enumerate(rollouts):
        reward, components, details, steps, flags, own = 0.0, {}, [], {}, [], {}
        status, masked_by = RolloutStatus.OK, ""
        for name, group in results.items():
            if name in dropped:
                continue
            r = own[name] = group.results[pos]
            if r.status is not RolloutStatus.OK and status is RolloutStatus.OK:
                status, masked_by = r.status, name
            reward += used[name] * scale * r.reward
            components[name] = r.reward
            components.update({f"{name}/{k}": v for k, v in r.components.items()})
            flags.extend(f"{name}/{f}" for f in r.flags)
            if r.detail:
                details.append(f"{name}: {r.detail}")
            if r.steps:
                steps[name] = r.steps
        ok = status is RolloutStatus.OK
        scored.append(ScoredRollout(rollout.index, reward if ok else 0.0, status, components, " | ".join(details),
                                    steps if ok else {}, tuple(flags), masked_by, own, dropped))
    return scored
