"""A third-party plugin: knows only cohort's public ``verifiers.base`` types."""

import time

from verifiers.base import GroupRequest, RolloutResult, VerifyContext, float_option


class ExactMatch:
    name = "exact"
    version = "0.0.1"
    description = "reward 1 when the stripped completion equals reference.answer"
    reference_kinds = ("answer",)

    def verify_group(self, group: GroupRequest, ctx: VerifyContext):
        gold = group.reference.answer.strip()
        return [RolloutResult.ok(r.index, float(r.completion.strip() == gold), components={"exact": float(r.completion.strip() == gold)})
                for r in group.rollouts]


class Sleepy:
    """Sleeps ``options["sleep_s"]`` per group, then rewards len(completion) % 2 (for drain/failover tests)."""

    name = "sleepy"
    version = "0.0.1"
    description = "slow verifier for tests"
    reference_kinds = ()

    def verify_group(self, group: GroupRequest, ctx: VerifyContext):
        time.sleep(float_option(group, "sleep_s", 0.5))
        return [RolloutResult.ok(r.index, float(len(r.completion) % 2)) for r in group.rollouts]
