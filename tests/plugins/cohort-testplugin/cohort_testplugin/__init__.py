"""A third-party plugin: knows only cohort's public ``verifiers.base`` types."""

import time

from cohort.verifiers.base import GroupRequest, RolloutResult, VerifierBase, VerifyContext, float_option


class ExactMatch(VerifierBase):
    name = "exact"
    version = "0.0.1"
    description = "reward 1 when the stripped completion equals reference.answer"
    reference_kinds = ("answer",)

    def verify_group(self, group: GroupRequest, ctx: VerifyContext):
        gold = group.reference.answer.strip()
        return [RolloutResult.ok(r.index, float(r.completion.strip() == gold), components={"exact": float(r.completion.strip() == gold)})
                for r in group.rollouts]


class Sleepy(VerifierBase):
    """Sleeps ``options["sleep_s"]`` per group, then rewards len(completion) % 2 (for drain/failover tests)."""

    name = "sleepy"
    version = "0.0.1"
    description = "slow verifier for tests"
    reference_kinds = ()

    def verify_group(self, group: GroupRequest, ctx: VerifyContext):
        time.sleep(float_option(group, "sleep_s", 0.5))
        return [RolloutResult.ok(r.index, float(len(r.completion) % 2)) for r in group.rollouts]


class Spinner(VerifierBase):
    """A runaway pure-Python verifier: busy-loops ``options["spin_s"]`` seconds holding the GIL, ignoring
    its deadline, then rewards len(completion) % 2. Declares itself GIL-bound (``max_concurrency = 1``),
    so ``--scoring-procs`` servers run it in their killable scoring processes."""

    name = "spinner"
    version = "0.0.1"
    description = "GIL-bound runaway verifier for tests"
    reference_kinds = ()
    max_concurrency = 1

    def verify_group(self, group: GroupRequest, ctx: VerifyContext):
        end = time.monotonic() + float_option(group, "spin_s", 0.0)
        while time.monotonic() < end:
            pass
        return [RolloutResult.ok(r.index, float(len(r.completion) % 2)) for r in group.rollouts]
