"""A prime `verifiers` 0.4 taskset whose reward is a Cohort verifier (`cohort.integrations.prime.CohortReward`):
Cohort's math verifier behind their `Task.score`, for tests/interop/test_prime_verifiers.py. The endpoints come
from COHORT_VERIFIER_ENDPOINTS (`math=HOST:PORT`), which the test sets.

One task, `What is 2+2?` (answer `4`). The reward `correct` is declared on the task class; `again` is the same
verifier as a module-level function, for the taskset's config to plug (`{"task": {"rewards": {"again": {"fn":
"cohort_prime_math:again", "weight": 0.5}}}}`), as their config plugs any reward function by import path.
"""

import verifiers.v1 as vf

from cohort.integrations.prime import CohortReward


class MathData(vf.TaskData):
    answer: str | None = None


class MathTask(vf.Task[MathData, vf.State, vf.TaskConfig]):
    correct = CohortReward("math")


again = CohortReward("math")


class MathTaskset(vf.Taskset[MathTask, vf.TasksetConfig]):
    def load(self):
        yield MathTask(MathData(prompt="What is 2+2?", answer="4"), self.config.task)


__all__ = ["MathTaskset"]
