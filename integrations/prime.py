"""Cohort's verifiers behind prime's ``verifiers`` (0.4, the ``verifiers.v1`` stack): a task reward scored by a
Cohort verifier.

In 0.4 a task's rubric is its rewards: ``@vf.reward`` functions that their ``Task.score`` awaits with the
arguments they name (``task``: the task's data; ``trace``: the finished rollout), declared on the task class
or plugged by the taskset's config (a ``rewards`` entry naming a function by import path). A
:class:`CohortReward` is such a reward; it sends the trace's last reply to a running Cohort verifier (``cohort
serve NAME``) as a group of one, through Cohort's client (retries, failover across endpoints, the status
contract)::

    # my_rewards.py
    from cohort.integrations.prime import CohortReward
    correct = CohortReward("math", ["127.0.0.1:50051"])

    # on the task class:          correct = CohortReward("math", ["127.0.0.1:50051"])
    # or plugged by their config: --taskset.task.rewards '{"correct": {"fn": "my_rewards:correct"}}'

Without endpoints it reads ``COHORT_VERIFIER_ENDPOINTS`` (``math=127.0.0.1:50051``) at its first call. The
reference is the task field ``answer_field`` (default ``answer``), or ``tests_field`` (default ``code_tests``:
unit tests in the row schema's form, for the code verifier); the prompt is the task's prompt text.

Mapping (docs/interop.md): status OK is the reward (Cohort's, a float); a masked status raises, so that their
rollout records an error on the trace (``trace.ok`` false, ``trace.errors``) and no reward, never a 0:
DEPENDENCY_UNAVAILABLE and VERIFIER_TIMEOUT raise their ``ProviderError`` (status 503 and 504: the type their
error model gives an unavailable provider or judge, which Cohort's own ``prime_verifiers`` adapter maps back to
DEPENDENCY_UNAVAILABLE), VERIFIER_ERROR and INVALID_REFERENCE a plain error naming the status, which their
scoring boundary records as a ``TaskError``.

Needs PyPI's ``verifiers`` 0.4 beside Cohort (its ``openai<3`` pin means a venv of its own: ``scripts/ci-prime``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence

try:
    import verifiers.v1 as vf
    from verifiers.v1.errors import ProviderError
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(f"cohort.integrations.prime needs prime's verifiers 0.4 (pip install verifiers==0.4.0, in a venv "
                      f"of its own: see scripts/ci-prime): {exc}") from None

from cohort.integrations._common import endpoints_from_env, parse_endpoints, reference_of
from cohort.verifiers.base import GroupRequest, RolloutResult, RolloutStatus
from cohort.verifiers.base import Rollout as CohortRollout
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import WeightedVerifier

PROVIDER_STATUS = {RolloutStatus.DEPENDENCY_UNAVAILABLE: 503, RolloutStatus.VERIFIER_TIMEOUT: 504}
"""Masked Cohort statuses raised as their ``ProviderError``, with its HTTP status; the others raise a plain error."""


class CohortReward:
    """A prime task reward (tagged with their own ``vf.reward``: ``weight``, ``priority``) scored by Cohort
    verifier ``verifier`` at ``endpoints`` (None: ``COHORT_VERIFIER_ENDPOINTS``). Its name in ``trace.rewards``
    is the class attribute it is assigned to (or ``name``, or the plugged entry's). A callable object, not a
    function: on a task class it is not bound as a method, so their ``Task.score`` passes it ``task`` and
    ``trace`` by name either way."""

    def __init__(self, verifier: str, endpoints: Sequence[str] | None = None, *, answer_field: str = "answer",
                 tests_field: str = "code_tests", options: Mapping[str, str] | None = None, weight: float = 1.0,
                 priority: int = 0, timeout_s: float = 60.0, name: str | None = None) -> None:
        if endpoints is not None:
            parse_endpoints({verifier: list(endpoints)})  # bad addresses fail here, not at the first rollout
        self.verifier, self.endpoints = verifier, None if endpoints is None else tuple(endpoints)
        self.answer_field, self.tests_field, self.timeout_s = answer_field, tests_field, timeout_s
        self.options = {str(k): str(v) for k, v in (options or {}).items()}
        self.__name__ = name or verifier
        vf.reward(self, weight=weight, priority=priority)
        self._client: BlockingClient | None = None
        self._lock = threading.Lock()

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name

    def client(self) -> BlockingClient:
        """Cohort's client, made at the first call (on its own event loop thread, so any loop may await it)."""
        with self._lock:
            if self._client is None:
                endpoints = self.endpoints
                if endpoints is None:
                    configured = endpoints_from_env()
                    if self.verifier not in configured:
                        raise ValueError(f"COHORT_VERIFIER_ENDPOINTS names no endpoint for verifier {self.verifier!r} "
                                         f"(it has {sorted(configured)})")
                    endpoints = configured[self.verifier]
                self._client = BlockingClient([WeightedVerifier(self.verifier, 1.0, tuple(endpoints))],
                                              timeout_s=self.timeout_s)
            return self._client

    async def __call__(self, task: vf.TaskData, trace: vf.Trace) -> float:
        reference = reference_of({"answer": getattr(task, self.answer_field, None),
                                  "code_tests": getattr(task, self.tests_field, None)})
        group = GroupRequest(self.verifier, (CohortRollout(0, trace.last_reply or ""),), reference, str(trace.id),
                             task.prompt_text, None, self.options)
        client = self.client()
        (result,) = (await asyncio.wrap_future(client.submit(client.client.verify_groups([group]))))[0].results
        return reward_of(self.verifier, result)

    def close(self) -> None:
        """Close the client (also done at interpreter exit)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def reward_of(verifier: str, result: RolloutResult) -> float:
    """A Cohort result as their reward: OK is its reward; a masked status raises (the mapping above)."""
    if result.status is RolloutStatus.OK:
        return float(result.reward)
    detail = f"Cohort verifier {verifier}: {result.status.name}: {result.detail}"[:500]
    if result.status in PROVIDER_STATUS:
        raise ProviderError(detail, status_code=PROVIDER_STATUS[result.status])
    raise RuntimeError(detail)
