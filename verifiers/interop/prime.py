"""A prime ``verifiers`` environment's rewards behind Cohort's contract: the verifier ``prime_verifiers``.

prime's ``verifiers`` (PyPI ``verifiers``, 0.4.0: the ``verifiers.v1`` stack) describes an environment as a
*taskset* (an installed package exporting a ``vf.Taskset`` subclass, as their Environments Hub installs it)
whose tasks score a finished trace with their ``@vf.reward`` methods (weighted, summed: ``trace.reward``;
0.4.0 has no ``Rubric`` class any more, the task's rewards are its rubric) and any configured judges. This
verifier loads one taskset and, for each rollout, builds the trace their rollout loop would have left
(the task's prompt, the completion as the one sampled assistant message) and awaits their own
``Task.score`` on it, in process: the reward is their number, the components their named rewards.

It runs where prime's package is installed next to Cohort's: both own a module tree whose top-level
name is ``verifiers`` on PyPI's side and ``cohort.verifiers`` on ours, so they import side by side
(``scripts/ci-namespace``). PyPI's ``verifiers`` 0.4.0 needs ``openai<3``, which the trainer's venv does
not have, so it is served from a venv of its own (``scripts/ci-prime`` makes ``.venv-prime``)::

    COHORT_PRIME_TASKSET=my_env .venv-prime/bin/cohort serve prime_verifiers --port 50064

Server settings: the serve config's ``verifiers.prime_verifiers`` (:class:`PrimeOptions`): ``taskset`` (the
taskset id, e.g. an installed Hub environment's name), ``taskset_config`` (its config fields), ``timeout_s``
(default 60: the scoring of one rollout); their former ``COHORT_PRIME_*`` variables override the file. Row options: ``idx`` (the task's position in the taskset, as their ``idx``)
or ``task_data`` (a JSON object: the task's data itself, validated by their task's data model).

Mapping (docs/interop.md): their reward (finite) is OK, the components their named rewards; what their
error model records as a failure is masked, never a 0: a ``ProviderError`` or ``SandboxError`` (a judge's
model or a runtime unavailable) DEPENDENCY_UNAVAILABLE, a ``TaskError`` (a reward function raised:
their code's fault or the completion's, which the adapter cannot tell apart) and any other
``RolloutError`` VERIFIER_ERROR, the timeout VERIFIER_TIMEOUT; a row naming no task, or one their data
model refuses, INVALID_REFERENCE. A taskset whose rewards need a runtime (a sandbox: ``NEEDS_CONTAINER``,
a reward taking ``runtime``) is refused when the server starts: scoring it without one would skip those
rewards and give a different number.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from typing import Any

from pydantic import Field, field_validator

from cohort.verifiers.base import GroupRequest, Rollout, RolloutResult, RolloutStatus, VerifierBase, VerifyContext
from cohort.verifiers.options import VerifierOptions

NAME = "prime_verifiers"


def _needs_runtime(fn: Any) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


class PrimeOptions(VerifierOptions):
    """The prime_verifiers verifier's server-side settings (serve config ``verifiers.prime_verifiers``)."""

    taskset: str = ""
    """The taskset id, e.g. an installed Hub environment's name (formerly ``COHORT_PRIME_TASKSET``); required."""
    taskset_config: dict[str, Any] = {}
    """Its config fields (a mapping, or a JSON object in a string; formerly ``COHORT_PRIME_TASKSET_CONFIG``)."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds one rollout's scoring may take (formerly ``COHORT_PRIME_TIMEOUT_S``)."""

    @field_validator("taskset_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value


class PrimeVerifier(VerifierBase):
    Options = PrimeOptions
    name = NAME
    version = "1.0.0"
    description = ("a prime `verifiers` (0.4) taskset's rewards in process (taskset: serve config): the completion "
                   "as the trace's reply, their Task.score")
    reference_kinds: tuple[str, ...] = ()  # the taskset holds the task data

    def __init__(self, options: PrimeOptions | None = None, **fields) -> None:
        """``PrimeVerifier(taskset="...")`` is ``PrimeVerifier(PrimeOptions(taskset="..."))``."""
        self.options = opts = options or PrimeOptions(**fields)
        try:
            import verifiers.v1 as vf
            from verifiers.v1 import errors
            from verifiers.v1.utils.loaders import load_taskset, taskset_config_type
        except ImportError as exc:
            raise ImportError(f"the {NAME} verifier needs prime's verifiers 0.4 (pip install verifiers==0.4.0, in a "
                              f"venv of its own: see scripts/ci-prime): {exc}") from None
        self._vf, self._errors = vf, errors
        taskset_id, config, self.timeout_s = opts.taskset, opts.taskset_config, opts.timeout_s
        if not taskset_id:
            raise ValueError(f"the {NAME} verifier needs verifiers.{NAME}.taskset in the serve config (or "
                             "COHORT_PRIME_TASKSET=<taskset id>: an installed taskset package)")
        taskset = load_taskset(taskset_config_type(taskset_id).model_validate({**config, "id": taskset_id}))
        if not taskset.bounded:
            raise ValueError(f"taskset {taskset_id!r} is infinite: bound it in verifiers.{NAME}.taskset_config")
        self.tasks = list(taskset)
        if not self.tasks:
            raise ValueError(f"taskset {taskset_id!r} has no tasks")
        self.taskset_id, self._task_cls, self._task_config = taskset_id, type(self.tasks[0]), self.tasks[0].config
        first = self.tasks[0]
        offline = [fn.__name__ for fn in (*first.hooks("reward"), *first.hooks("metric")) if _needs_runtime(fn)]
        offline += [j.reward_name for j in first.plugged_judges() if _needs_runtime(j.score)]
        if first.NEEDS_CONTAINER or offline:
            raise ValueError(f"taskset {taskset_id!r} scores in a runtime (a sandbox: "
                             f"{', '.join(offline) or 'NEEDS_CONTAINER'}), which this verifier does not start")

    def close(self) -> None:
        pass

    def _task(self, group: GroupRequest) -> Any:
        """The row's task, or the INVALID_REFERENCE it is."""
        raw, idx = group.options.get("task_data"), group.options.get("idx")
        if raw is not None:
            try:
                data = self._task_cls.data_type().model_validate(json.loads(raw))
            except ValueError as exc:  # not JSON, or their data model refuses it (pydantic's error is a ValueError)
                return f"option task_data: {str(exc)[:300]}"
            return self._task_cls(data, self._task_config)
        if idx is None or not idx.isdigit() or int(idx) >= len(self.tasks):
            return f"the row names no task of {self.taskset_id!r}: give option idx (0..{len(self.tasks) - 1}) or task_data"
        return self.tasks[int(idx)]

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        task = self._task(group)
        if isinstance(task, str):
            return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, task) for r in group.rollouts]
        remaining = ctx.remaining()
        timeout_s = self.timeout_s if remaining is None else max(min(self.timeout_s, remaining), 0.0)

        async def all_of() -> list[RolloutResult]:
            return list(await asyncio.gather(*(self._one(task, r, timeout_s) for r in group.rollouts)))

        return asyncio.run(all_of())

    async def _one(self, task: Any, rollout: Rollout, timeout_s: float) -> RolloutResult:
        vf, errors = self._vf, self._errors
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask

        trace = vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                         agent=AgentInfo(config=vf.AgentConfig()))
        prompt = task.data.prompt
        messages = ([vf.UserMessage(content=prompt)] if isinstance(prompt, str) else list(prompt or []))
        if task.data.system_prompt:
            messages.insert(0, vf.SystemMessage(content=task.data.system_prompt))
        for i, message in enumerate(messages):
            trace.nodes.append(MessageNode(parent=i - 1 if i else None, message=message))
        trace.nodes.append(MessageNode(parent=len(messages) - 1 if messages else None,
                                       message=vf.AssistantMessage(content=rollout.completion), sampled=True))
        try:
            async with asyncio.timeout(timeout_s):
                await task.score(trace)
        except TimeoutError:
            return RolloutResult.unusable(rollout.index, RolloutStatus.VERIFIER_TIMEOUT,
                                          f"{NAME}: their scoring took over {timeout_s:.3g} s")
        except (errors.ProviderError, errors.SandboxError, errors.InterceptionError) as exc:
            return RolloutResult.unusable(rollout.index, RolloutStatus.DEPENDENCY_UNAVAILABLE,
                                          f"{NAME}: {type(exc).__name__}: {exc}"[:500])
        except errors.RolloutError as exc:  # TaskError: a reward raised; they record it, never score it
            return RolloutResult.unusable(rollout.index, RolloutStatus.VERIFIER_ERROR,
                                          f"{NAME}: {type(exc).__name__}: {exc}"[:500])
        scores = {name: r.score for name, r in trace.rewards.items() if r is not None}
        missing = sorted(name for name, r in trace.rewards.items() if r is None)
        reward = trace.reward
        if missing or not scores or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (reward, *scores.values())):
            return RolloutResult.unusable(rollout.index, RolloutStatus.VERIFIER_ERROR,
                                          f"{NAME}: no usable reward (rewards {dict(trace.rewards)!r})"[:500])
        return RolloutResult.ok(rollout.index, float(reward), components={k: float(v) for k, v in scores.items()},
                                detail=f"{self.taskset_id} reward {reward:g}")
