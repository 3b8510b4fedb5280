"""Cohort's verifiers behind OpenEnv: a Cohort verifier served as an OpenEnv environment.

The environment runs in OpenEnv's own server (``openenv.core.env_server.create_app``; extra
``interop-test`` pins ``openenv``), so the protocol (WebSocket ``/ws`` sessions, ``/schema``,
``/health``, their clients) is theirs, not a copy. One episode is one task: ``reset`` picks it, one
``step`` with ``CohortAction(message=...)`` (the policy's final answer) scores it with a running Cohort
verifier (``cohort serve NAME``) through the learner's client, and ends the episode::

    cohort serve math --port 50051 &
    cohort serve front openenv --verifier math --endpoint 127.0.0.1:50051 --rows rows.jsonl --port 8001

``reset(index=I)`` takes row I of ``--rows`` (``seed=S`` takes row S modulo their number); without rows,
or to score a task the trainer holds, ``reset(prompt=..., answer=..., options={...})`` gives the task
itself. The observation carries the prompt.

Status OK is the observation's ``reward`` with ``done: true`` (``metadata`` has ``cohort_status``,
``cohort_verdict``, ``cohort_flags``, ``cohort_components``). OpenEnv has no field for a reward that is
not a measurement, so any other status makes ``step`` raise: their server answers the WebSocket step
with an ``EXECUTION_ERROR`` frame whose message is ``cohort_status=<STATUS>: <detail>``: an OpenEnv
client sees an error, never a reward of 0, and Cohort's own ``openenv`` adapter reads the status back.
Episodes need the WebSocket (their clients use it): OpenEnv's HTTP ``/reset`` and ``/step`` make a new
environment per call, so an HTTP ``/step`` has no task and fails. Binds 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cohort.integrations._common import on_stop_signals, parse_endpoints, reference_of, task_view
from cohort.verifiers.base import GroupRequest, Rollout, RolloutStatus
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import WeightedVerifier
from cohort.verifiers.interop.remote import COHORT_STATUS
from cohort.verifiers.records import Task, read_tasks


class Unscored(RuntimeError):
    """The Cohort verifier could not judge (a masked status): the step fails instead of giving a reward."""


def environment(scorer: BlockingClient, verifier: str, tasks: Sequence[Task] = ()) -> tuple[type, type, type]:
    """``(Environment, Action, Observation)`` classes for OpenEnv's ``create_app``: episodes over ``tasks``
    (or tasks given to ``reset``), scored by ``verifier`` through ``scorer``."""
    from openenv.core.env_server import Action, Environment, Observation, State

    rows = [task_view(t, verifier) for t in tasks]

    class CohortAction(Action):
        message: str

    class CohortObservation(Observation):
        prompt: str = ""
        task_id: str = ""

    class CohortEnvironment(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True  # the scorer is shared and thread-safe; each session has its own task

        def __init__(self) -> None:
            super().__init__()
            self.task: dict[str, Any] | None = None
            self._state = State(step_count=0)

        def reset(self, seed: int | None = None, episode_id: str | None = None, index: int | None = None,
                  prompt: str | None = None, answer: str | None = None, options: Mapping[str, Any] | None = None,
                  code_tests: Any = None, **kwargs: Any) -> CohortObservation:
            if prompt is not None or answer is not None or code_tests is not None:
                if options is not None and not isinstance(options, Mapping):
                    raise ValueError("options must be an object of verifier options")
                self.task = {"id": episode_id or "", "prompt": prompt or "", "answer": None if answer is None else str(answer),
                             "options": {str(k): str(v) for k, v in (options or {}).items()}}
                if code_tests is not None:
                    reference_of({"code_tests": code_tests})  # refused here, at reset, naming the fault
                    self.task["code_tests"] = code_tests
            elif not rows:
                raise ValueError("this environment has no rows: reset with prompt=..., answer=... (or code_tests=...)")
            elif index is not None:
                if not isinstance(index, int) or not 0 <= index < len(rows):
                    raise ValueError(f"index {index!r}: there are {len(rows)} tasks")
                self.task = rows[index]
            else:
                self.task = rows[(seed or 0) % len(rows)]
            self._state = State(episode_id=episode_id, step_count=0)
            return CohortObservation(prompt=self.task["prompt"], task_id=str(self.task["id"]))

        def step(self, action: CohortAction, timeout_s: float | None = None, **kwargs: Any) -> CohortObservation:
            if self.task is None:
                raise ValueError("step before reset: no task")
            self._state.step_count += 1
            task = self.task
            group = GroupRequest(verifier, (Rollout(0, action.message),), reference_of(task),
                                 str(task["id"]), str(task["prompt"]), None, dict(task["options"]))
            (result,) = scorer.verify_groups([group])[0].results
            if result.status is not RolloutStatus.OK:
                raise Unscored(f"{COHORT_STATUS}{result.status.name}: {result.detail}")
            return CohortObservation(prompt=task["prompt"], task_id=str(task["id"]), reward=result.reward, done=True,
                                     metadata={"cohort_status": "OK", "cohort_verdict": result.verdict.name,
                                               "cohort_flags": list(result.flags),
                                               "cohort_components": dict(result.components)})

        @property
        def state(self) -> State:
            return self._state

    return CohortEnvironment, CohortAction, CohortObservation


def app(scorer: BlockingClient, verifier: str, tasks: Sequence[Task] = (), max_concurrent_envs: int = 64) -> Any:
    """OpenEnv's FastAPI app (their ``create_app``, simulation mode) around the environment."""
    from openenv.core.env_server import create_app

    env, action, observation = environment(scorer, verifier, tasks)
    return create_app(env, action, observation, env_name=f"cohort-{verifier}", max_concurrent_envs=max_concurrent_envs,
                      mode="simulation")


def main(verifier: str, endpoints: Sequence[str], rows: Path | None = None, host: str = "127.0.0.1", port: int = 8001,
         port_file: Path | None = None, max_sessions: int = 64, timeout_s: float = 60.0) -> int:
    """``cohort serve front openenv``: serve ``verifier`` at ``endpoints`` as an OpenEnv environment until
    interrupted; bad input is one line on stderr and 2."""
    try:
        import openenv.core.env_server  # noqa: F401  (app() builds on it)
        import uvicorn
    except ImportError as exc:
        print(f"error: cohort serve front openenv needs OpenEnv ({exc.name} is not installed): "
              "pip install 'cohort-rl[interop-test]'", file=sys.stderr)
        return 2
    scorer = None
    try:
        parse_endpoints({verifier: list(endpoints)})
        tasks = read_tasks(rows) if rows else []
        scorer = BlockingClient([WeightedVerifier(verifier, 1.0, tuple(endpoints))], timeout_s=timeout_s)
        scorer.handshake()
        asgi = app(scorer, verifier, tasks, max_sessions)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except Exception as exc:  # one line, no traceback: no openenv, bad rows, an unreachable verifier, a taken port
        if scorer is not None:
            scorer.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bound = sock.getsockname()[1]
    if port_file:
        port_file.write_text(str(bound))
    print(f"OpenEnv environment cohort-{verifier} ({len(tasks)} rows) on http://{host}:{bound} (WebSocket /ws)",
          flush=True)
    try:
        on_stop_signals(lambda: None)  # uvicorn stops on them; then main returns 0
        uvicorn.Server(uvicorn.Config(asgi, log_level="warning")).run(sockets=[sock])
    finally:
        scorer.close()
    return 0
