"""The judge's back-ends: a local transformers model in a killable worker process, or any
OpenAI-compatible HTTP endpoint (``vllm serve``, a hosted API).

Both take a list of :class:`Query` (a whole group, or every pair of it) in one call and return one
:class:`Answer` each, or raise one of the failures below, which the verifier turns into masks: a judge
that is down, overloaded or killed is the judge's failure, never a reward of 0 for the policy.

===================================================  ==========================  ====================
what happened                                        raised                      rollout status
===================================================  ==========================  ====================
connection refused / reset, the server or worker     :class:`JudgeUnavailable`   DEPENDENCY_UNAVAILABLE
died mid-call, 5xx after a retry, 401/403/404,
rate-limited (ours or HTTP 429) past the deadline
no answer by the deadline (the worker is killed)     :class:`JudgeTimeout`       VERIFIER_TIMEOUT
a reply that is not the API's JSON, other 4xx        :class:`JudgeFailed`        VERIFIER_ERROR
===================================================  ==========================  ====================

Each back-end's calls run on one event loop on a daemon thread (:class:`cohort.rpc.loop.BackgroundLoop`,
the mechanism of every blocking Cohort caller); every group the server's threads score goes through it,
so the concurrency limit (an ``asyncio.Semaphore``) and the rate limit (a minimum interval between
request starts, :class:`Limiter`) hold for the back-end as a whole, not per thread.

Why ``httpx`` (``AsyncClient``) rather than the stdlib: the requests run on that event loop, where a
request past the deadline is cancelled cleanly by ``asyncio.wait_for`` (a blocking ``urllib`` call in a
thread can only be abandoned, holding its thread and socket until its own timeout), and it pools
keep-alive connections to the endpoint. The local back-end needs no HTTP and no httpx.

The API key is read once, from the file named by the option ``api_key_file`` or the environment
variable named by ``api_key_env``; it is kept only in the request headers, never in
:class:`JudgeConfig`, a ``repr``, a log line or a ``detail``.

Over 400 lines on purpose: the two back-ends share the query and verdict types, the cost caps and
the retry policy, written here once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cohort.rpc.loop import BackgroundLoop

from pydantic import Field, model_validator

from cohort.verifiers.options import VerifierOptions

log = logging.getLogger("cohort.verifiers.judge")

BackendName = Literal["local", "openai"]
Method = Literal["verdict", "score", "pairwise", "reference_prob"]


class JudgeUnavailable(Exception):
    """The judge cannot be reached or refused to answer in time (DEPENDENCY_UNAVAILABLE)."""


class JudgeTimeout(Exception):
    """The judge did not answer by the deadline (VERIFIER_TIMEOUT)."""


class JudgeFailed(Exception):
    """The judge answered something that is not an answer (VERIFIER_ERROR)."""


class ConfigError(ValueError):
    """The judge's model or key cannot be found (raised at startup, naming the option)."""


class JudgeConfig(VerifierOptions):
    """The judge's server-side settings (serve config ``verifiers.judge``; each field's former
    ``COHORT_JUDGE_*`` variable still overrides it, docs/config.md)."""

    backend: BackendName = "local"
    """``local`` (transformers, in a worker process) or ``openai`` (formerly ``COHORT_JUDGE_BACKEND``)."""
    model: str = ""
    """local: a transformers folder or a named model of ``trainer/gguf_models.py`` (empty:
    ``smollm2-135m-instruct``); openai: the model name sent to the endpoint (required). Formerly
    ``COHORT_JUDGE_MODEL``."""
    url: str = ""
    """The endpoint's base URL, e.g. ``http://127.0.0.1:8000/v1`` (openai; formerly ``COHORT_JUDGE_URL``)."""
    api: Literal["chat", "completions"] = "chat"
    """``chat`` (``/chat/completions``, one request per query, sent concurrently) or ``completions``
    (``/completions`` with the group's prompts as one list: one HTTP request). Formerly ``COHORT_JUDGE_API``."""
    api_key_file: str = ""
    """A file holding the API key, read once at startup (formerly ``COHORT_JUDGE_API_KEY_FILE``)."""
    api_key_env: str = "OPENAI_API_KEY"
    """The name of the environment variable holding the key (formerly ``COHORT_JUDGE_API_KEY_ENV``)."""
    concurrency: int = Field(0, ge=0)
    """Requests in flight at once; 0: the back-end's default (local: 1 worker process, each holding the model;
    openai: 4). Formerly ``COHORT_JUDGE_CONCURRENCY``."""
    rate_per_s: float = Field(0.0, ge=0)
    """Request starts per second, 0 for no limit (formerly ``COHORT_JUDGE_RATE``)."""
    timeout_s: float = Field(60.0, ge=0.1)
    """A group's judge budget when the call sets no earlier deadline (formerly ``COHORT_JUDGE_TIMEOUT_S``)."""
    max_tokens: int = Field(32, ge=1)
    """Reply length for text back-ends, a verdict or 'Score: N' fits (formerly ``COHORT_JUDGE_MAX_TOKENS``)."""
    cache_size: int = Field(100_000, ge=0)
    """Answers kept (LRU); 0 disables the cache (formerly ``COHORT_JUDGE_CACHE_SIZE``)."""
    threads: int = Field(2, ge=1)
    """Torch threads of each local worker (formerly ``COHORT_JUDGE_THREADS``)."""
    device: str = "cpu"
    """The local model's torch device: ``cpu``, ``cuda``, ``cuda:1`` (formerly ``COHORT_JUDGE_DEVICE``)."""
    max_field_tokens: int = Field(1024, ge=16)
    """The most a field (question, reference, completion) may hold, in the judge's own tokens (local; an openai
    back-end, whose tokenizer is not known here, counts 4 characters a token). A longer question or reference is
    cut; a longer completion is not judged: reward 0, flagged ``candidate_limit`` (its own length would set the
    cost of its whole batch). Formerly ``COHORT_JUDGE_MAX_FIELD_TOKENS``."""

    @model_validator(mode="after")
    def _resolved(self) -> JudgeConfig:
        """The back-end's defaults filled in (model, concurrency); openai needs its url and model."""
        if self.backend == "openai" and not (self.model and self.url):
            raise ValueError("backend openai needs url (e.g. http://127.0.0.1:8000/v1) and model")
        fill = {"url": self.url.rstrip("/")}
        if not self.model:
            fill["model"] = "smollm2-135m-instruct"
        if self.concurrency == 0:
            fill["concurrency"] = 1 if self.backend == "local" else 4
        for key, value in fill.items():
            object.__setattr__(self, key, value)  # frozen: set once, here, while validating
        return self


@dataclass(frozen=True)
class Query:
    """One question to the judge: chat messages, and for probability back-ends what to read off.

    ``choices``: two verdict words; the answer's ``p`` is the first one's probability between them.
    ``continuation``: text whose mean token probability after ``prefix`` is the answer's ``p``.
    Text back-ends send ``messages`` and return the reply.
    """

    messages: tuple[tuple[str, str], ...]
    choices: tuple[str, str] | None = None
    prefix: str = ""
    continuation: str | None = None

    def chat(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]

    def digest(self, model_id: str) -> str:
        """The cache key: everything that affects the answer (the back-end's model and decoding included)."""
        blob = json.dumps([model_id, self.messages, self.choices, self.prefix, self.continuation], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Answer:
    text: str
    """Text back-ends: the reply; probability back-ends: the most likely next token (shown in detail)."""
    p: float | None = None
    mass: float = 1.0
    """Probability back-ends: the probability the choice words hold together (low: not an answer)."""


class Limiter:
    """At most ``concurrency`` calls at once, starts at least ``1 / rate_per_s`` apart; on one event loop."""

    def __init__(self, concurrency: int, rate_per_s: float) -> None:
        self._semaphore = asyncio.Semaphore(concurrency)
        self._interval = 1.0 / rate_per_s if rate_per_s > 0 else 0.0
        self._next_start = 0.0

    async def run(self, coro_fn, deadline: float):
        """``await coro_fn()`` once a slot is free; JudgeUnavailable when none frees up before ``deadline``."""
        try:
            await asyncio.wait_for(self._semaphore.acquire(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise JudgeUnavailable("the judge's concurrency limit had no free slot before the deadline") from None
        try:
            if self._interval:
                now = time.monotonic()
                start = max(now, self._next_start)
                if start > deadline:
                    raise JudgeUnavailable(f"rate-limited past the deadline ({1 / self._interval:g} requests/s)")
                self._next_start = start + self._interval
                await asyncio.sleep(start - now)
            return await coro_fn()
        finally:
            self._semaphore.release()


class FieldMeasure:
    """How long a field is to the judge: tokens of the judge's own tokenizer (``tokenizer.json`` read with
    ``tokenizers``, no torch in the server), or, without one, characters at 4 a token."""

    CHARS_PER_TOKEN = 4

    def __init__(self, tokenizer_file: Path | None = None) -> None:
        self.tokenizer = None
        if tokenizer_file is not None and tokenizer_file.exists():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.unit = "tokens" if self.tokenizer is not None else "characters"

    def cut(self, text: str, max_tokens: int) -> tuple[str, int]:
        """(``text`` cut to ``max_tokens``, its full length in tokens; over ``max_tokens`` when cut)."""
        if self.tokenizer is None:
            limit = max_tokens * self.CHARS_PER_TOKEN
            return text[:limit], -(-len(text) // self.CHARS_PER_TOKEN)
        if len(text) <= max_tokens:  # a token holds at least one character
            return text, len(self.tokenizer.encode(text, add_special_tokens=False).ids)
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        if len(enc.ids) <= max_tokens:
            return text, len(enc.ids)
        return text[: enc.offsets[max_tokens - 1][1]], len(enc.ids)


class _LoopBackend:
    """A back-end whose calls run on its own event loop thread (see the module docstring)."""

    measure = FieldMeasure()

    name: BackendName
    methods: frozenset[str]
    model_id: str

    def __init__(self, cfg: JudgeConfig) -> None:
        self.cfg = cfg
        self.queries_sent = 0
        """Queries that reached the model (cache hits never do): tests and the bench read it."""
        self.on_answers = None
        """Called with (queries, answers) when answers arrive after their caller gave up (local back-end)."""
        self._bg = BackgroundLoop(f"judge-{cfg.backend}")
        self._limiter = Limiter(self.cfg.concurrency, self.cfg.rate_per_s)  # its semaphore binds to the loop on first use

    def ask(self, queries: Sequence[Query], deadline: float) -> list[Answer]:
        """The answers to ``queries`` (one back-end call for all), or a Judge* failure."""
        self.queries_sent += len(queries)
        future = self._bg.submit(self._ask_by(queries, deadline))
        try:
            return future.result(max(0.0, deadline - time.monotonic()) + 5.0)
        except TimeoutError:  # the loop itself is stuck: give up on the call
            future.cancel()
            raise JudgeTimeout("the judge did not answer by the deadline") from None

    deadline_grace_s = 0.0
    """How long past the deadline the call is left to end by itself: a back-end that bounds each request by
    the deadline itself (and so can say why it ran out: rate-limited, failing) sets a short grace, so that its
    own timeout, not this backstop, ends the call."""

    async def _ask_by(self, queries: Sequence[Query], deadline: float) -> list[Answer]:
        try:
            return await asyncio.wait_for(self._ask(queries, deadline),
                                          max(0.0, deadline - time.monotonic()) + self.deadline_grace_s)
        except TimeoutError:
            raise JudgeTimeout("the judge did not answer by the deadline") from None

    async def _ask(self, queries: Sequence[Query], deadline: float) -> list[Answer]:
        raise NotImplementedError

    def close(self) -> None:
        """Run the loop's closers (the HTTP client's), stop it and join its thread. Idempotent."""
        self._bg.close()


# ---- local ---------------------------------------------------------------------------------------


def resolve_folder(model: str) -> Path:
    """A transformers folder, given as a path or as a named model of ``trainer/gguf_models.py``.

    A named model is resolved (and converted, the first time) by running that module's command,
    ``python -m cohort.trainer.gguf_models NAME``, which prints the folder: the verifiers layer never
    imports the trainer's code (tests/test_import_layers.py).
    """
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ConfigError(f"verifiers.judge.model={model!r}: the folder has no config.json (not a transformers model)")
        return path.resolve()
    if "/" in model or not model:
        raise ConfigError(f"verifiers.judge.model={model!r}: no such folder")
    try:
        proc = subprocess.run([sys.executable, "-m", "cohort.trainer.gguf_models", model], capture_output=True,
                              text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"verifiers.judge.model={model!r}: converting the named model took over 900 s") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not Path(lines[-1]).is_dir():
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"verifiers.judge.model={model!r}: neither a folder nor a named model that resolves ({why})")
    return Path(lines[-1])


def _fingerprint(folder: Path) -> str:
    """Names, sizes and mtimes of the folder's files: a changed model is a different judge (cache key)."""
    h = hashlib.sha256(str(folder).encode())
    for f in sorted(folder.iterdir()):
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


class LocalBackend(_LoopBackend):
    """A transformers causal LM in killable worker processes (:mod:`verifiers.judge._local_worker`)."""

    name: BackendName = "local"
    methods = frozenset({"verdict", "pairwise", "reference_prob"})

    def __init__(self, cfg: JudgeConfig, start_timeout_s: float = 300.0) -> None:
        from cohort.verifiers.judge._local_worker import setup
        from cohort.verifiers.hosting.workers import WorkerPool

        self.folder = resolve_folder(cfg.model)
        self.measure = FieldMeasure(self.folder / "tokenizer.json")
        self.model_id = f"local:{self.folder.name}:{_fingerprint(self.folder)}:{cfg.device}"
        super().__init__(cfg)
        # attempts=1: a group whose worker died under it is masked, not re-run on a fresh worker (which
        # would first have to load the model again, past most deadlines)
        self.pool = WorkerPool(setup, (str(self.folder), cfg.threads, cfg.device), cfg.concurrency,
                               name="judge-local-worker", attempts=1)
        # before the server turns SERVING: a judge that cannot load its model fails at startup
        self.pool.start(ready_timeout_s=start_timeout_s)

    async def _ask(self, queries: Sequence[Query], deadline: float) -> list[Answer]:
        """The group's task in a worker. A caller that gives up at its deadline (or is cancelled) does not
        stop it: the worker finishes, up to ``timeout_s`` after the call began (then it is killed), and its
        answers reach the cache through ``on_answers``, so the retry is a cache hit. Killing it at the
        caller's deadline instead would cost a model reload and redo the work on every retry."""
        hard = max(deadline, time.monotonic() + self.cfg.timeout_s)
        task = tuple((q.chat(), q.prefix, q.choices, q.continuation) for q in queries)
        job = asyncio.ensure_future(self._limiter.run(lambda: self.pool.run_async(task, hard), hard))
        job.add_done_callback(lambda done: self._finished(queries, done))
        return _answers(await asyncio.shield(job))

    def _finished(self, queries: Sequence[Query], job: asyncio.Future) -> None:
        if job.cancelled() or job.exception() is not None or self.on_answers is None:
            return
        try:
            self.on_answers(queries, _answers(job.result()))
        except (JudgeTimeout, JudgeUnavailable):
            pass  # the caller got (or gave up on) the same failure

    def close(self) -> None:
        self.pool.close()
        super().close()


def _answers(result) -> list[Answer]:
    if result.kind == "timeout":
        raise JudgeTimeout(f"local judge: {result.detail}")
    if result.kind != "ok":
        raise JudgeUnavailable(f"local judge worker: {result.detail}")
    return [Answer(top, p, mass) for p, top, mass in result.value]


# ---- OpenAI-compatible ------------------------------------------------------------------------------

RETRIES = 2
"""Extra tries after a connection failure or a 5xx, each after a short backoff, within the deadline."""


def read_api_key(cfg: JudgeConfig) -> str:
    if cfg.api_key_file:
        try:
            return Path(cfg.api_key_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"verifiers.judge.api_key_file={cfg.api_key_file!r}: {exc.strerror}") from None
    return os.environ.get(cfg.api_key_env, "").strip()


class OpenAIBackend(_LoopBackend):
    """``/chat/completions`` or ``/completions`` of an OpenAI-compatible server, temperature 0."""

    name: BackendName = "openai"
    methods = frozenset({"verdict", "score", "pairwise"})
    deadline_grace_s = 0.5  # each request is bounded by the deadline in _post

    def __init__(self, cfg: JudgeConfig) -> None:
        key = read_api_key(cfg)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.model_id = f"openai:{cfg.url}:{cfg.model}:{cfg.api}:t0:max{cfg.max_tokens}"
        super().__init__(cfg)
        self._client = self._bg.run(self._make_client())
        self._bg.on_close(self._client.aclose)

    async def _make_client(self):
        import httpx

        return httpx.AsyncClient(base_url=self.cfg.url, headers=self._headers, timeout=httpx.Timeout(self.cfg.timeout_s))

    def __repr__(self) -> str:  # the headers (the key) never show
        return f"OpenAIBackend({self.model_id!r})"

    async def _ask(self, queries: Sequence[Query], deadline: float) -> list[Answer]:
        if self.cfg.api == "completions":
            body = {"model": self.cfg.model, "prompt": [render_plain(q) for q in queries], "temperature": 0.0,
                    "max_tokens": self.cfg.max_tokens, "seed": 0}
            reply = await self._limiter.run(lambda: self._post("/completions", body, deadline), deadline)
            choices = _field(reply, "choices", list)
            if len(choices) != len(queries):
                raise JudgeFailed(f"/completions returned {len(choices)} choices for {len(queries)} prompts")
            texts = ["" for _ in queries]
            for k, choice in enumerate(choices):
                index = choice.get("index", k) if isinstance(choice, dict) else k
                if not isinstance(index, int) or not 0 <= index < len(queries):
                    raise JudgeFailed(f"/completions choice index {index!r} out of range")
                texts[index] = _text(choice, "text")
            return [Answer(t) for t in texts]

        async def one(q: Query) -> Answer:
            body = {"model": self.cfg.model, "messages": q.chat(), "temperature": 0.0,
                    "max_tokens": self.cfg.max_tokens, "seed": 0}
            reply = await self._limiter.run(lambda: self._post("/chat/completions", body, deadline), deadline)
            choices = _field(reply, "choices", list)
            if not choices or not isinstance(choices[0], dict):
                raise JudgeFailed("/chat/completions returned no choices")
            return Answer(_text(choices[0].get("message") or {}, "content"))

        return list(await asyncio.gather(*(one(q) for q in queries)))

    async def _post(self, path: str, body: dict, deadline: float) -> dict:
        import httpx

        backoff, failures, why = 0.25, 0, ""
        while True:
            try:
                response = await asyncio.wait_for(self._client.post(path, json=body), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                if why:  # an earlier try was rate-limited or failed: that is why there is no answer
                    raise JudgeUnavailable(f"{why}; the next try had no answer by the deadline") from None
                raise JudgeTimeout("the judge did not answer by the deadline") from None
            except httpx.TransportError as exc:  # refused, reset, the server died mid-reply
                why, wait = f"{self.cfg.url}{path}: {type(exc).__name__}", backoff
            else:
                code = response.status_code
                if code == 200:
                    try:
                        reply = response.json()
                    except ValueError:
                        raise JudgeFailed(f"{path} answered 200 with a body that is not JSON: {response.text[:80]!r}") from None
                    if not isinstance(reply, dict):
                        raise JudgeFailed(f"{path} answered a JSON {type(reply).__name__}, not an object")
                    return reply
                if code in (401, 403, 404):
                    raise JudgeUnavailable(f"{self.cfg.url}{path} refused the call: HTTP {code}")
                if code != 429 and code < 500:
                    raise JudgeFailed(f"{self.cfg.url}{path} rejected the request: HTTP {code} {response.text[:120]!r}")
                why, wait = f"{self.cfg.url}{path}: HTTP {code}", _retry_after(response, backoff)
                if code == 429:  # rate-limited: wait as long as the deadline allows, however many times
                    if time.monotonic() + wait >= deadline:
                        raise JudgeUnavailable(f"{why}: rate-limited past the deadline")
                    await asyncio.sleep(wait)
                    continue
            failures += 1
            if failures > RETRIES or time.monotonic() + wait >= deadline:
                raise JudgeUnavailable(f"{why}; gave up after {failures} tries")
            await asyncio.sleep(wait)
            backoff *= 2


def render_plain(q: Query) -> str:
    """A chat query as one prompt for ``/completions`` (no chat template on that endpoint)."""
    lines = [f"{role.capitalize()}: {content}" for role, content in q.messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


def _retry_after(response, default: float) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", default)))
    except ValueError:
        return default


def _field(reply: dict, key: str, kind: type):
    value = reply.get(key)
    if not isinstance(value, kind):
        raise JudgeFailed(f"the reply has no {key!r} {kind.__name__}: {json.dumps(reply)[:120]}")
    return value


def _text(obj: dict, key: str) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        raise JudgeFailed(f"the reply's choice has no {key!r} string")
    return value


def make_backend(cfg: JudgeConfig) -> LocalBackend | OpenAIBackend:
    log.info("judge back-end: %s", cfg.model_dump())  # holds no key (see the docstring)
    return LocalBackend(cfg) if cfg.backend == "local" else OpenAIBackend(cfg)


__all__ = ["Answer", "ConfigError", "JudgeConfig", "JudgeFailed", "JudgeTimeout", "JudgeUnavailable", "Limiter",
           "LocalBackend", "OpenAIBackend", "Query", "make_backend"]
