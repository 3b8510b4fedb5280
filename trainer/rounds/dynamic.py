"""Dynamic sampling (DAPO), written once for both round sources: which of a round's groups it keeps.

Groups without signal (fewer than two valid rollouts, or all valid rewards equal) are replaced by groups of
freshly drawn prompts. A round is offered in batches: the first has the round's p groups; while a batch has
groups without signal and refills are left (``grpo.max_resample_rounds``), its groups with signal stay and the
next batch is what the round still lacks; the batch that ends the round enters whole (every group has signal,
or the refills ran out: then its flat groups fill the round). Pure: no threads, no I/O; the lock-step source
offers a generated call's groups at once, the pipeline its arriving groups one batch at a time.
"""

from __future__ import annotations

from cohort.trainer.advantages import ScaleRewards, group_advantages
from cohort.trainer.scoring import Scores


def informative(scores: Scores, scale_rewards: ScaleRewards) -> list[bool]:
    """Per group of ``scores`` (p, G): whether it carries signal (the advantages' own test)."""
    return group_advantages(scores.rewards, scores.valid, scale_rewards).informative_groups.tolist()


class DynamicSampling:
    """One round's choice. ``refills`` 0 (dynamic sampling off) takes the first batch as it is."""

    def __init__(self, p: int, refills: int) -> None:
        self.p, self.refills = p, refills
        self.size = p  # the open batch's groups; 0 once the round is complete
        self.kept = 0  # groups kept from the batches closed so far
        self.offered = 0

    def close(self, informative: list[bool]) -> list[int] | None:
        """The open batch's groups seen (``informative``, in order, one per group): None when they all enter
        the round, which is then complete; else the indices of the ones that stay, and :attr:`size` becomes the
        next batch's."""
        if len(informative) != self.size or not self.size:
            raise ValueError(f"a batch of {len(informative)} groups offered where {self.size} were asked for")
        self.offered += len(informative)
        keep = [k for k, ok in enumerate(informative) if ok]
        if len(keep) == len(informative) or not self.refills:
            self.size = 0
            return None
        self.refills -= 1
        self.kept += len(keep)
        self.size = self.p - self.kept
        return keep

    @property
    def resampled(self) -> int:
        """Groups drawn beyond the round's p (to replace groups without signal)."""
        return self.offered - self.p
