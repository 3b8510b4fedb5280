"""A prime `verifiers` 0.4 taskset (their `vf.Taskset` / `vf.Task` / `@vf.reward` classes) for the
`prime_verifiers` adapter's tests, importable as the taskset id `cohort_prime_arith` (tests put this folder on
PYTHONPATH, as `pip install` of a Hub environment would put its package on the path).

Two tasks, `What is 2+2?` (4) and `What is 3*5?` (15). Two rewards: `correct` (weight 1: the reply equals
the answer) and `short` (weight 0.5: 1 if the reply has at most 8 characters). Some replies fail on purpose:
`RAISE` makes `correct` raise (their `TaskError`), `PROVIDER` raises their `ProviderError` (a judge's model
unavailable), `SLOW` sleeps 30 s, `NAN` returns a reward that is not a number.
"""

import asyncio

import verifiers.v1 as vf
from verifiers.v1.errors import ProviderError


class ArithData(vf.TaskData):
    answer: str = ""


class ArithTask(vf.Task[ArithData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task, trace) -> float:
        reply = trace.last_reply
        if reply == "RAISE":
            raise RuntimeError("reward function failure on purpose")
        if reply == "PROVIDER":
            raise ProviderError("judge model unreachable", status_code=503)
        if reply == "SLOW":
            await asyncio.sleep(30)
        if reply == "NAN":
            return float("nan")
        return float(reply == task.answer)

    @vf.reward(weight=0.5)
    async def short(self, trace) -> float:
        return float(len(trace.last_reply) <= 8)


class ArithTaskset(vf.Taskset[ArithTask, vf.TasksetConfig]):
    def load(self):
        for question, answer in [("What is 2+2?", "4"), ("What is 3*5?", "15")]:
            yield ArithTask(ArithData(prompt=question, answer=answer), self.config.task)


__all__ = ["ArithTaskset"]
