"""An OpenEnv environment server behind Cohort's contract: the verifier ``openenv``.

OpenEnv (PyPI ``openenv``, the package that replaced ``openenv-core``) serves an ``Environment`` with
FastAPI; its stateful sessions are its WebSocket ``/ws`` (the HTTP ``/reset`` and ``/step`` make a new
environment per call, so a reset's task is gone by the step). Each rollout is one session, as their
``EnvClient`` opens it::

    -> {"type": "reset", "data": {...the row's reset arguments...}}   <- {"type": "observation", ...}
    -> {"type": "step", "data": {ACTION_FIELD: completion, ...}}      <- {"type": "observation", "data":
                                                                           {"observation": ..., "reward": r, "done": true}}
    -> {"type": "close"}

The server's address is the verifier server's configuration (a row must not point a verifier at an
arbitrary address): the serve config's ``verifiers.openenv`` (:class:`~verifiers.interop.remote.HttpOptions`):
``url`` (``http://HOST:PORT``; formerly ``COHORT_OPENENV_URL``), ``timeout_s`` (default 60, per rollout: connect,
reset and step together) and ``concurrency`` (default 16; keep it at or under the server's
``max_concurrent_envs``, whose refusal is masked).

Row options: ``reset`` (a JSON object: the keyword arguments of the environment's ``reset``, e.g.
``{"seed": 3}`` or ``{"index": 7}``), ``answer_field`` (also send the row's reference answer to ``reset``
under this name; default: not sent), ``action_field`` (the action's text field; default: the one required
string field of the server's ``/schema`` action) and ``action`` (a JSON object of other action fields).

Mapping (docs/interop.md has the table): a step's ``reward`` with ``done: true`` is OK with that reward
(``true``/``false`` as 1/0); everything else is masked, never a 0: no reward or ``done: false`` after the
step (a multi-turn environment, which this adapter does not drive) VERIFIER_ERROR; a WebSocket error
frame by its ``code`` (``VALIDATION_ERROR`` on reset: the row's arguments refused, INVALID_REFERENCE;
``EXECUTION_ERROR``: the environment raised, VERIFIER_ERROR, or the status it names as
``cohort_status=<STATUS>: ...``, as ``integrations/openenv.py`` does; ``CAPACITY_REACHED``,
``FACTORY_ERROR``, ``SESSION_ERROR``: DEPENDENCY_UNAVAILABLE; others VERIFIER_ERROR); a refused or dropped
connection or an HTTP 5xx on the upgrade DEPENDENCY_UNAVAILABLE; no answer in time VERIFIER_TIMEOUT.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

from cohort.verifiers.base import GroupRequest, InvalidRequest, Rollout, RolloutResult, RolloutStatus
from cohort.verifiers.interop.remote import COHORT_STATUS, HttpOptions, _Failure, _HttpVerifier, _json_option

WS_DEPENDENCY_CODES = frozenset({"CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"})
"""OpenEnv ``WSErrorCode``s that mean the server could not give a session: DEPENDENCY_UNAVAILABLE."""

MAX_FRAME_BYTES = 16 << 20


def ws_error_status(code: str | None, message: str, phase: str) -> RolloutStatus:
    """The Cohort status of an OpenEnv WebSocket error frame (``WSErrorResponse``) during ``phase``.

    >>> ws_error_status("VALIDATION_ERROR", "bad seed", "reset").name
    'INVALID_REFERENCE'
    >>> ws_error_status("EXECUTION_ERROR", "cohort_status=VERIFIER_TIMEOUT: slow", "step").name
    'VERIFIER_TIMEOUT'
    >>> ws_error_status("CAPACITY_REACHED", "full", "reset").name, ws_error_status("EXECUTION_ERROR", "boom", "step").name
    ('DEPENDENCY_UNAVAILABLE', 'VERIFIER_ERROR')
    """
    said = message.partition(":")[0]
    if code == "EXECUTION_ERROR" and said.startswith(COHORT_STATUS):
        named = RolloutStatus.__members__.get(said[len(COHORT_STATUS):])
        if named is not None and named is not RolloutStatus.OK:
            return named
    if code in WS_DEPENDENCY_CODES:
        return RolloutStatus.DEPENDENCY_UNAVAILABLE
    if code == "VALIDATION_ERROR" and phase == "reset":
        return RolloutStatus.INVALID_REFERENCE
    return RolloutStatus.VERIFIER_ERROR


class OpenEnvVerifier(_HttpVerifier):
    name = "openenv"
    version = "1.0.0"
    description = ("an OpenEnv environment server over its WebSocket (url: serve config): reset with the row's "
                   "arguments, the completion as one step's action, its reward")
    env_prefix = "OPENENV"

    def __init__(self, options: HttpOptions | None = None, **fields) -> None:
        super().__init__(options, **fields)
        try:
            from websockets import exceptions as ws_exceptions
            from websockets.sync.client import connect
        except ImportError:
            raise ImportError("the openenv verifier needs websockets: pip install 'cohort-rl[interop]'") from None
        self._connect, self._wsx = connect, ws_exceptions
        self.ws_url = "ws" + self.url[len("http"):] + "/ws"
        self._action_field: str | None = None
        self._lock = threading.Lock()

    def _prepare(self, group: GroupRequest) -> dict[str, Any]:
        try:
            reset = _json_option(group, "reset") or {}
            action = _json_option(group, "action") or {}
        except _Failure as f:
            return {"failure": f}
        answer_field = group.options.get("answer_field", "")
        if answer_field:
            if group.reference.answer is None:
                return {"failure": _Failure(RolloutStatus.INVALID_REFERENCE,
                                            f"option answer_field={answer_field} but the row has no answer")}
            reset = {answer_field: group.reference.answer, **reset}
        return {"reset": reset, "action": action, "action_field": group.options.get("action_field") or None}

    def _discover_action_field(self, timeout_s: float) -> str:
        """The one required string field of the server's action schema (``GET /schema``), asked once."""
        with self._lock:
            if self._action_field is not None:
                return self._action_field
        schema = self._json(self._checked(self._client.get("/schema", timeout=timeout_s), "/schema"), "/schema")
        action = schema.get("action") if isinstance(schema, dict) else None
        if not isinstance(action, dict):
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"openenv server /schema has no action schema: {schema!r}"[:200])
        props = action.get("properties") or {}
        text = [k for k in action.get("required") or () if k != "metadata" and (props.get(k) or {}).get("type") == "string"]
        if len(text) != 1:
            raise InvalidRequest(f"OpenEnv server {self.url}: its action schema has {len(text)} required text fields "
                                 f"({text or list(props)}); name the completion's with option action_field")
        with self._lock:
            self._action_field = text[0]
        return text[0]

    def _score(self, group: GroupRequest, prepared: dict[str, Any], rollout: Rollout, timeout_s: float) -> RolloutResult:
        if "failure" in prepared:
            raise prepared["failure"]
        deadline = time.monotonic() + timeout_s
        field = prepared["action_field"] or self._discover_action_field(timeout_s)
        action = {**prepared["action"], field: rollout.completion}
        try:
            ws = self._connect(self.ws_url, open_timeout=max(deadline - time.monotonic(), 0.01), proxy=None,
                               max_size=MAX_FRAME_BYTES, compression=None, ping_interval=None, close_timeout=1)
        except self._wsx.InvalidStatus as exc:
            code = exc.response.status_code
            raise _Failure(RolloutStatus.DEPENDENCY_UNAVAILABLE if code >= 500 else RolloutStatus.VERIFIER_ERROR,
                           f"openenv server {self.ws_url} refused the session: HTTP {code}") from None
        except (OSError, self._wsx.WebSocketException) as exc:  # refused, reset; TimeoutError is an OSError
            if isinstance(exc, TimeoutError):
                raise _Failure(RolloutStatus.VERIFIER_TIMEOUT, f"openenv server {self.ws_url}: no session in time") from None
            raise _Failure(RolloutStatus.DEPENDENCY_UNAVAILABLE,
                           f"openenv server {self.ws_url} unreachable: {type(exc).__name__}: {exc}"[:500]) from None
        try:
            self._exchange(ws, {"type": "reset", "data": prepared["reset"]}, "reset", deadline)
            data = self._exchange(ws, {"type": "step", "data": action}, "step", deadline)
            try:
                ws.send(json.dumps({"type": "close"}))
            except self._wsx.WebSocketException:
                pass
        finally:
            ws.close()
        reward, done = data.get("reward"), data.get("done")
        if reward is None:
            raise _Failure(RolloutStatus.VERIFIER_ERROR, "openenv step returned no reward")
        if done is not True:
            raise _Failure(RolloutStatus.VERIFIER_ERROR, "openenv episode not done after one step: multi-turn "
                                                         f"environments are not supported (reward {reward!r})")
        if isinstance(reward, bool):
            reward = float(reward)
        if not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"openenv step: reward {reward!r} is not a finite number")
        return RolloutResult.ok(rollout.index, float(reward), detail=f"openenv reward {float(reward):g}")

    def _exchange(self, ws: Any, message: dict[str, Any], phase: str, deadline: float) -> dict[str, Any]:
        """One request and its reply; the reply's ``data`` if it is an observation, else the failure it means."""
        try:
            ws.send(json.dumps(message))
            raw = ws.recv(timeout=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            raise _Failure(RolloutStatus.VERIFIER_TIMEOUT, f"openenv server {self.url}: no answer to {phase} in time") from None
        except (OSError, self._wsx.WebSocketException) as exc:  # ConnectionClosed: the server went away mid-episode
            raise _Failure(RolloutStatus.DEPENDENCY_UNAVAILABLE,
                           f"openenv server {self.url} unreachable during {phase}: {type(exc).__name__}: {exc}"[:500]) from None
        try:
            reply = json.loads(raw)
        except ValueError:
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"openenv {phase} reply is not JSON: {str(raw)[:120]!r}") from None
        if not isinstance(reply, dict):
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"openenv {phase} reply is not an object: {reply!r}"[:200])
        data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
        if reply.get("type") == "error":
            code, text = data.get("code"), str(data.get("message", ""))
            raise _Failure(ws_error_status(code, text, phase), f"openenv {phase} failed ({code}): {text}"[:500])
        if reply.get("type") != "observation":
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"openenv {phase} reply of type {reply.get('type')!r}, "
                                                         "not an observation")
        return data
