"""Other standards' reward servers behind Cohort's contract, over HTTP: ``nemo_gym`` and ``ors``.

Each rollout of a group is one call to the foreign server (their protocols score one sample at a time),
up to ``CONCURRENCY`` at once; the answer is mapped to Cohort's statuses (docs/interop.md has the table):

- a reward is OK with that reward (CORRECT at >= 1, INCORRECT at <= 0, PARTIAL between);
- their typed failures are masked, never a 0: NeMo-Gym's ``mask_sample: true`` (the status from its
  ``failure_kind``), an ORS tool error or an environment that raised;
- the transport's failures are masked: a refused or dropped connection or an HTTP 5xx is
  DEPENDENCY_UNAVAILABLE, a timeout VERIFIER_TIMEOUT, a 200 that breaks the protocol (not JSON, no
  reward, a reward that is not a finite number) VERIFIER_ERROR; HTTP 400 / 422 (the server refuses the
  row's task data) is INVALID_REFERENCE.

Where the server is, is the verifier server's configuration, not the rows' (a row must not point a
verifier at an arbitrary address): the serve config's ``verifiers.<name>.url`` (``http://HOST:PORT``;
formerly ``COHORT_NEMO_GYM_URL`` / ``COHORT_ORS_URL``), ``timeout_s`` (default 60, per call) and
``concurrency`` (default 16): :class:`HttpOptions`.

**NeMo-Gym** (a resources server's ``POST /verify``, ``nemo_gym.base_resources_server``): the body is
their ``BaseVerifyRequest``: ``responses_create_params`` (the row's prompt as one user message),
``response`` (the completion as an OpenAI Responses ``Response`` with one assistant message), plus the
row's task fields: option ``fields`` (a JSON object, e.g. ``{"expected_answer": "4"}``), and the
row's reference answer under option ``answer_field`` (default ``expected_answer``; ``""``: not sent).
The reply is their ``BaseVerifyResponse``: ``reward``, ``mask_sample``, ``failure_kind``,
``failure_reason``. A reply with ``mask_sample: false`` is a valid measurement even when it names a
failure (their contract), and is OK.

**ORS** (Open Reward Standard, the ``openreward`` SDK's ``Server``): one session per rollout
(``POST /create`` with ``X-Session-ID``, the task from options ``split`` + ``index`` or ``task_spec``
(JSON), environment ``env`` or the options' ``env`` (:class:`OrsOptions`) or the server's default), the completion sent to
the environment's ``@terminal`` tool (``POST /{env}/call``, an SSE stream), the session deleted after.
Only single-turn environments (with a terminal tool) are supported: an environment without one is a
request error.
"""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import Field

from cohort.verifiers.base import (
    GroupRequest,
    InvalidRequest,
    Rollout,
    RolloutResult,
    RolloutStatus,
    VerifierBase,
    VerifyContext,
)
from cohort.verifiers.options import VerifierOptions

URL_RE = re.compile(r"https?://(\[[0-9a-fA-F:.]+\]|[^/:\[\]\s]+):\d{1,5}(/\S*)?")
"""A foreign server's address: scheme, host and an explicit port (a path prefix for a proxy may follow)."""

# NeMo-Gym's shared failure vocabulary (nemo_gym/failure_kinds.py) -> the Cohort status of a masked sample.
# Prefix rules first (transport_*, provider_*, session_*), then exact names; anything else: VERIFIER_ERROR.
NEMO_TIMEOUT_KINDS = frozenset({"transport_timeout", "agent_timeout"})
NEMO_DEPENDENCY_PREFIXES = ("transport_", "provider_", "session_", "agent_")
NEMO_DEPENDENCY_KINDS = frozenset({"judge_failed", "environment_server_failed", "cancelled", "kill_shaped", "shutdown",
                                   "persistence_failed", "cohort_incomplete"})


def nemo_masked_status(failure_kind: str | None) -> RolloutStatus:
    """The Cohort status of a NeMo-Gym sample with ``mask_sample: true``, from its ``failure_kind``.

    >>> nemo_masked_status("judge_failed").name, nemo_masked_status("transport_timeout").name
    ('DEPENDENCY_UNAVAILABLE', 'VERIFIER_TIMEOUT')
    >>> nemo_masked_status(None).name, nemo_masked_status("judge_unparseable").name
    ('VERIFIER_ERROR', 'VERIFIER_ERROR')
    """
    kind = (failure_kind or "").split(":")[-1]  # '<server>:<kind>' namespaced kinds
    if kind in NEMO_TIMEOUT_KINDS:
        return RolloutStatus.VERIFIER_TIMEOUT
    if kind in NEMO_DEPENDENCY_KINDS or kind.startswith(NEMO_DEPENDENCY_PREFIXES):
        return RolloutStatus.DEPENDENCY_UNAVAILABLE
    return RolloutStatus.VERIFIER_ERROR


class _Failure(Exception):
    """A rollout the foreign server could not score: carried to its masked result."""

    def __init__(self, status: RolloutStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _reward(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Failure(RolloutStatus.VERIFIER_ERROR, f"{where}: reward {value!r} is not a finite number")
    return float(value)


def _json_option(group: GroupRequest, key: str) -> dict[str, Any] | None:
    raw = group.options.get(key)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise _Failure(RolloutStatus.INVALID_REFERENCE, f"option {key} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _Failure(RolloutStatus.INVALID_REFERENCE, f"option {key} must be a JSON object")
    return value


class HttpOptions(VerifierOptions):
    """Where the foreign server is (serve config ``verifiers.nemo_gym``, ``verifiers.openenv``; a row never
    names an address)."""

    url: str = ""
    """``http://HOST:PORT`` of the foreign server (formerly ``COHORT_<NAME>_URL``); required."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds per call (formerly ``COHORT_<NAME>_TIMEOUT_S``)."""
    concurrency: int = Field(16, ge=1)
    """Calls in flight at once (formerly ``COHORT_<NAME>_CONCURRENCY``)."""


class OrsOptions(HttpOptions):
    """The ``ors`` verifier's server (serve config ``verifiers.ors``)."""

    env: str = ""
    """The environment when a row's options name none (formerly ``COHORT_ORS_ENV``); empty: the server's default."""


class _HttpVerifier(VerifierBase):
    """One foreign HTTP server: its client, its settings, and the transport's failures mapped once."""

    Options = HttpOptions
    reference_kinds: tuple[str, ...] = ()  # the foreign server holds or receives the task data
    env_prefix = ""
    """The ``COHORT_<env_prefix>_*`` names of its settings before the serve config (for the error message)."""

    def __init__(self, options: HttpOptions | None = None, **fields) -> None:
        """``NemoGymVerifier(url=...)`` is ``NemoGymVerifier(HttpOptions(url=...))``."""
        try:
            import httpx
        except ImportError:
            raise ImportError(f"the {self.name} verifier needs httpx: pip install 'cohort-rl[interop]'") from None
        self._httpx = httpx
        self.options = opts = options or self.Options(**fields)
        if not URL_RE.fullmatch(opts.url):
            raise ValueError(f"the {self.name} verifier needs verifiers.{self.name}.url in the serve config (or "
                             f"COHORT_{self.env_prefix}_URL=http://HOST:PORT), got {opts.url!r}")
        self.url = opts.url.rstrip("/")
        self.timeout_s, concurrency = opts.timeout_s, opts.concurrency
        self._client = httpx.Client(base_url=self.url, timeout=self.timeout_s, trust_env=False,
                                    limits=httpx.Limits(max_connections=concurrency))
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"cohort-{self.name}")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        prepared = self._prepare(group)  # request errors raise here, before any call
        futures = [self._pool.submit(self._one, group, prepared, r, ctx) for r in group.rollouts]
        return [f.result() for f in futures]

    def _one(self, group: GroupRequest, prepared: Any, rollout: Rollout, ctx: VerifyContext) -> RolloutResult:
        try:
            return self._score(group, prepared, rollout, self._timeout(ctx))
        except _Failure as f:
            return RolloutResult.unusable(rollout.index, f.status, f.detail[:500])
        except self._httpx.TimeoutException as exc:
            return RolloutResult.unusable(rollout.index, RolloutStatus.VERIFIER_TIMEOUT,
                                          f"{self.name} server {self.url}: no answer in time ({type(exc).__name__})")
        except self._httpx.TransportError as exc:  # refused, reset, dropped mid-answer
            return RolloutResult.unusable(rollout.index, RolloutStatus.DEPENDENCY_UNAVAILABLE,
                                          f"{self.name} server {self.url} unreachable: {type(exc).__name__}: {exc}"[:500])

    def _timeout(self, ctx: VerifyContext) -> float:
        remaining = ctx.remaining()
        if remaining is not None and remaining <= 0:
            raise _Failure(RolloutStatus.VERIFIER_TIMEOUT, "the call's deadline passed before the request was sent")
        return self.timeout_s if remaining is None else min(self.timeout_s, remaining)

    def _checked(self, response: Any, what: str) -> Any:
        """The reply of a call, or the failure its HTTP status means."""
        code = response.status_code
        if code < 400:
            return response
        body = response.text[:300].replace("\n", " ")
        detail = f"{self.name} server {what}: HTTP {code}: {body}"
        if code >= 500:
            raise _Failure(RolloutStatus.DEPENDENCY_UNAVAILABLE, detail)
        if code in (400, 422):
            raise _Failure(RolloutStatus.INVALID_REFERENCE, detail)
        raise _Failure(RolloutStatus.VERIFIER_ERROR, detail)

    def _json(self, response: Any, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise _Failure(RolloutStatus.VERIFIER_ERROR,
                           f"{self.name} server {what}: the reply is not JSON: {response.text[:120]!r}") from None

    # per protocol
    def _prepare(self, group: GroupRequest) -> Any:
        raise NotImplementedError

    def _score(self, group: GroupRequest, prepared: Any, rollout: Rollout, timeout_s: float) -> RolloutResult:
        raise NotImplementedError


# ---- NeMo-Gym ---------------------------------------------------------------------------------


def nemo_response(completion: str, response_id: str) -> dict[str, Any]:
    """A completion as the OpenAI Responses ``Response`` NeMo-Gym's ``/verify`` reads (one assistant message)."""
    return {"id": response_id, "object": "response", "created_at": 0, "model": "cohort-policy", "status": "completed",
            "output": [{"id": f"msg_{response_id}", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": completion, "annotations": []}]}],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}


class NemoGymVerifier(_HttpVerifier):
    name = "nemo_gym"
    version = "1.0.0"
    description = "a NeMo-Gym resources server's /verify over HTTP (url: serve config); mask_sample is masked"
    env_prefix = "NEMO_GYM"

    def _prepare(self, group: GroupRequest) -> dict[str, Any]:
        answer_field = group.options.get("answer_field", "expected_answer")
        try:
            fields = _json_option(group, "fields") or {}
        except _Failure as f:
            return {"failure": f}
        if answer_field and group.reference.answer is not None:
            fields = {answer_field: group.reference.answer, **fields}
        reserved = {"responses_create_params", "response"} & set(fields)
        if reserved:
            return {"failure": _Failure(RolloutStatus.INVALID_REFERENCE, f"option fields may not set {sorted(reserved)}")}
        params = {"input": [{"role": "user", "content": group.prompt}]}
        return {"fields": fields, "params": params}

    def _score(self, group: GroupRequest, prepared: dict[str, Any], rollout: Rollout, timeout_s: float) -> RolloutResult:
        if "failure" in prepared:
            raise prepared["failure"]
        body = {"responses_create_params": prepared["params"],
                "response": nemo_response(rollout.completion, f"{group.group_id or 'g'}-{rollout.index}"),
                **prepared["fields"]}
        reply = self._json(self._checked(self._client.post("/verify", json=body, timeout=timeout_s), "/verify"),
                           "/verify")
        if not isinstance(reply, dict):
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"nemo_gym server /verify: reply is not an object: {reply!r}"[:200])
        kind, reason = reply.get("failure_kind"), reply.get("failure_reason")
        said = ": ".join(str(x) for x in (kind, reason) if x)
        if reply.get("mask_sample") is True:
            raise _Failure(nemo_masked_status(kind), f"nemo_gym server masked the sample ({said or 'no reason given'})")
        reward = _reward(reply.get("reward"), "nemo_gym server /verify")
        return RolloutResult.ok(rollout.index, reward, detail=f"nemo_gym reward {reward:g}" + (f"; {said}" if said else ""))


# ---- Open Reward Standard ---------------------------------------------------------------------


def sse_events(lines: Any) -> list[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream (comments and pings skipped, multi-line data joined).

    >>> sse_events(["event: task_id", "data: t1", "", ": ping", "event: end", "data: {}", ""])
    [('task_id', 't1'), ('end', '{}')]
    """
    events, event, data = [], "message", []
    for line in lines:
        if not line:
            if data:
                events.append((event, "\n".join(data)))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)
    if data:
        events.append((event, "\n".join(data)))
    return events


COHORT_STATUS = "cohort_status="
"""The prefix of an ORS tool error that carries a Cohort status (``cohort_status=INVALID_REFERENCE: ...``)."""


class OrsVerifier(_HttpVerifier):
    name = "ors"
    version = "1.0.0"
    description = "an Open Reward Standard environment server over HTTP (url: serve config): the completion to its terminal tool"
    env_prefix = "ORS"
    Options = OrsOptions

    def __init__(self, options: OrsOptions | None = None, **fields) -> None:
        super().__init__(options, **fields)
        self.default_env = self.options.env
        self._terminal: dict[str, tuple[str, str, str | None]] = {}
        self._lock = threading.Lock()

    def _prepare(self, group: GroupRequest) -> dict[str, Any]:
        env = group.options.get("env") or self.default_env or None
        try:
            spec = _json_option(group, "task_spec")
        except _Failure as f:
            return {"failure": f}
        split, index = group.options.get("split"), group.options.get("index")
        if spec is not None:
            task: dict[str, Any] = {"task_spec": spec}
        elif split and index is not None and index.isdigit():
            task = {"split": split, "index": int(index)}
        else:
            return {"failure": _Failure(RolloutStatus.INVALID_REFERENCE, "the row names no ORS task: give options "
                                        "task_spec (a JSON object), or split and index (an integer)")}
        return {"env": env, "create": task}

    def _discover(self, env: str | None, timeout_s: float) -> tuple[str, str, str | None]:
        """(environment name, terminal tool name, its argument) from ``/list_environments`` and ``/{env}/tools``,
        asked once per environment."""
        key = env or ""
        with self._lock:
            found = self._terminal.get(key)
        if found is not None:
            return found
        if env is None:
            names = self._json(self._checked(self._client.get("/list_environments", timeout=timeout_s),
                                             "/list_environments"), "/list_environments")
            if not isinstance(names, list) or not names or not isinstance(names[0], str):
                raise _Failure(RolloutStatus.VERIFIER_ERROR, f"ors server lists no environments: {names!r}"[:200])
            env = names[0]
        tools = self._json(self._checked(self._client.get(f"/{env}/tools", timeout=timeout_s), f"/{env}/tools"),
                           f"/{env}/tools")
        term = tools.get("terminal_tool") if isinstance(tools, dict) else None
        if not isinstance(term, dict) or not term.get("name"):
            raise InvalidRequest(f"ORS environment {env!r} at {self.url} has no @terminal tool: only single-turn "
                                 "environments can score a completion")
        found = (env, term["name"], term.get("arg"))
        with self._lock:
            self._terminal[key] = found
        return found

    def _score(self, group: GroupRequest, prepared: dict[str, Any], rollout: Rollout, timeout_s: float) -> RolloutResult:
        if "failure" in prepared:
            raise prepared["failure"]
        env, tool, arg = self._discover(prepared["env"], timeout_s)
        headers = {"X-Session-ID": uuid.uuid4().hex}
        self._checked(self._client.post("/create", json={**prepared["create"], "env_name": env}, headers=headers,
                                        timeout=timeout_s), "/create")
        try:
            call = {"name": tool, "input": {arg: rollout.completion} if arg else {}}
            with self._client.stream("POST", f"/{env}/call", json=call, headers=headers, timeout=timeout_s) as resp:
                if resp.status_code >= 400:
                    resp.read()
                self._checked(resp, f"/{env}/call")
                events = sse_events(resp.iter_lines())
        finally:
            try:
                self._client.post("/delete", headers=headers, timeout=timeout_s)
            except self._httpx.HTTPError:
                pass  # their server's reaper ends idle sessions
        return self._result(rollout, events)

    def _result(self, rollout: Rollout, events: list[tuple[str, str]]) -> RolloutResult:
        errors = [data for event, data in events if event == "error"]
        if errors:  # a Cohort verifier behind ORS (integrations/ors.py) names its masked status there
            said = errors[0].partition(":")[0]
            status = (RolloutStatus.__members__.get(said[len(COHORT_STATUS):]) if said.startswith(COHORT_STATUS)
                      else None)
            if status is None or status is RolloutStatus.OK:
                status = RolloutStatus.VERIFIER_ERROR
            raise _Failure(status, f"ors environment raised: {errors[0][:300]}")
        chunks = [data for event, data in events if event in ("chunk", "end")]
        if not any(event == "end" for event, _ in events):
            raise _Failure(RolloutStatus.DEPENDENCY_UNAVAILABLE, "ors server ended the stream without a result")
        try:
            out = json.loads("".join(chunks))
        except ValueError:
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"ors result is not JSON: {''.join(chunks)[:120]!r}") from None
        if not isinstance(out, dict):
            raise _Failure(RolloutStatus.VERIFIER_ERROR, f"ors result is not an object: {out!r}"[:200])
        if out.get("ok") is False:
            raise _Failure(RolloutStatus.VERIFIER_ERROR,
                           f"ors tool error ({out.get('reason') or 'no reason'}): {out.get('error')}")
        output = out.get("output") if isinstance(out.get("output"), dict) else {}
        if output.get("reward") is None:
            raise _Failure(RolloutStatus.VERIFIER_ERROR, "ors terminal tool returned no reward")
        reward = _reward(output["reward"], "ors terminal tool")
        return RolloutResult.ok(rollout.index, reward, detail=f"ors reward {reward:g}")
