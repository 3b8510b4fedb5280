"""What the adapters and fronts share: verifier endpoints (configuration or environment), code tests, and a row
as a front shows it to another standard's client (its task view) and reads it back (its reference)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cohort.verifiers.base import CodeTests, Reference
from cohort.verifiers.records import RecordError, Task, code_tests_record, parse_record

ENDPOINTS_ENV = "COHORT_VERIFIER_ENDPOINTS"


def parse_endpoints(spec: str | Mapping[str, str | Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """``"math=10.0.0.5:50051,math=10.0.0.6:50051,code=127.0.0.1:50052"`` (repeat a name for replicas),
    or a mapping ``{"math": ["10.0.0.5:50051"], "code": "127.0.0.1:50052"}``, to ``{name: addresses}``."""
    out: dict[str, list[str]] = {}
    if isinstance(spec, str):
        for item in (s.strip() for s in spec.replace(";", ",").split(",")):
            if not item:
                continue
            name, sep, address = item.partition("=")
            if not sep or not name.strip() or not address.strip():
                raise ValueError(f"verifier endpoints: expected NAME=HOST:PORT, got {item!r} in {spec!r}")
            out.setdefault(name.strip(), []).append(address.strip())
    elif isinstance(spec, Mapping):
        for name, addresses in spec.items():
            addresses = [addresses] if isinstance(addresses, str) else list(addresses)
            if not addresses or not all(isinstance(a, str) and a for a in addresses):
                raise ValueError(f"verifier endpoints: {name!r} needs one or more 'HOST:PORT' strings, got {addresses!r}")
            out[str(name)] = addresses
    else:
        raise TypeError(f"verifier endpoints: expected 'NAME=HOST:PORT,...' or a mapping, got {type(spec).__name__}")
    for name, addresses in out.items():
        for a in addresses:
            host, sep, port = a.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"verifier endpoints: {name}={a!r} is not HOST:PORT")
    if not out:
        raise ValueError(f"verifier endpoints: none given ({spec!r})")
    return {name: tuple(a) for name, a in out.items()}


def endpoints_from_env() -> dict[str, tuple[str, ...]]:
    spec = os.environ.get(ENDPOINTS_ENV, "")
    if not spec.strip():
        raise ValueError(f"no verifier endpoints: pass them in the configuration or set {ENDPOINTS_ENV}="
                         "'NAME=HOST:PORT,...' (e.g. 'math=127.0.0.1:50051,code=127.0.0.1:50052')")
    return parse_endpoints(spec)


def parse_code_tests(value: object) -> CodeTests:
    """Code tests from a dataset cell: a mapping or its JSON text, in the ``cohort verify`` record format
    (``{"asserts": [...], "setup_code": ""}``, ``{"test_code": "...", "entry_point": "f"}`` or
    ``{"io": [{"stdin": "", "expected_stdout": ""}], "comparison": "exact"}``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"code tests: not JSON: {exc.msg}") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"code tests must be a mapping (or its JSON), got {type(value).__name__}")
    try:  # the one validator of code tests is the record parser's
        record = parse_record({"code_tests": dict(value), "rollouts": [""]}, default_id="code_tests")
    except RecordError as exc:
        raise ValueError(f"code tests: {exc}") from None
    assert record.task.reference.code_tests is not None
    return record.task.reference.code_tests


def task_view(task: Task, verifier: str) -> dict[str, Any]:
    """A row as a front shows it (an ORS task spec, an OpenEnv episode's task): its id, prompt, reference (its
    ``answer``, or its ``code_tests`` in the row schema's form) and the options it gives ``verifier``."""
    options = {**next((u.options for u in task.verifiers or () if u.name == verifier), {}), **task.options.get(verifier, {})}
    view = {"id": task.id, "prompt": task.prompt, "answer": task.reference.answer, "options": dict(options)}
    if task.reference.code_tests is not None:
        view["code_tests"] = code_tests_record(task.reference.code_tests)
    return view


def reference_of(view: Mapping[str, Any]) -> Reference:
    """The reference a task view (or a request carrying ``answer`` / ``code_tests`` fields) names; a bad
    ``code_tests`` raises ValueError naming the fault."""
    tests = view.get("code_tests")
    if tests is not None:
        return Reference(code_tests=parse_code_tests(tests))
    answer = view.get("answer")
    return Reference(answer=None if answer is None else str(answer))


def on_stop_signals(stop: Callable[[], None]) -> None:
    """Ctrl-C and SIGTERM call ``stop`` (a front then shuts down and returns 0). Set, not inherited: a shell
    starts a background job with SIGINT ignored. uvicorn, which serves two of the fronts, takes both signals
    while it runs and raises them again once it has stopped: for this handler, not for the default one that
    would end the process before the scorer is closed (SIGTERM: exit -15; Ctrl-C: a KeyboardInterrupt)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop())
