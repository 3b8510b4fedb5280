"""Unit tests whose verdict the candidate cannot forge.

The candidate's code and the tests never share a process. Two sandboxes run side by side:

- the **candidate** slot loads the submission as a module and then only answers
  ``call(name, args, kwargs)`` requests with a plain-data return value (``codec.py``);
- the **grader** slot runs the trusted test code (MBPP asserts, or HumanEval ``check(candidate)``)
  in which every function the candidate defined is a proxy that forwards the call.

The host relays frames between the two without parsing the candidate's return values (nothing
untrusted is built or hashed on the host: a set of hash-colliding ints or 16 MiB of JSON costs
the grader's time budget, not the service's), and the grader decodes each one strictly into fresh
ints, strs, lists... Pass/fail is reported by the grader over its own socket. Hence: fake PASS markers,
patched ``print``/builtins/harness, frame walking, ``atexit`` hooks, ``os._exit(0)``, an
``__eq__`` that always returns True, re-exec of the harness, reading tests from disk or writing to
the parent's stdout all stay inside the candidate's sandbox, which holds neither the tests nor the
verdict channel. Per-test timeouts are enforced here: a call that does not answer in time gets the
candidate's run killed (the next call starts a fresh one). An exception the candidate raises
re-appears in the grader as the builtin class of the same name, except control-flow ones
(StopIteration: ``all(map(candidate, ...))`` would pass vacuously), which become RuntimeError.

Helper functions: every callable the candidate defines is visible to the tests under its name, so
a test that calls a helper of the *prompt* (HumanEval's ``poly``, ``encode_cyclic``) would call the
candidate's version. Pass the prompt as ``setup_code``: names the setup defines are the
reference's own, and only the entry point stays the candidate's.

Standard modules the candidate imported under their own name (``import math``) are imported
afresh by the grader from a fixed allow-list (``_zygote.GRADER_MODULES``), so MBPP asserts such as
``math.isclose(area(2), 12.566)`` work; nothing of the candidate's module objects crosses.

The output cap is enforced asynchronously: the host reads the pipes and then asks PID 1 to kill
the candidate, so a call can still answer between the cap firing and the kill landing (a kill
delayed by 10 ms let a flooding candidate pass one assert in 5 of 20 runs). A run in which any
candidate process exceeded the cap is therefore void: every test fails with cause ``output``,
whatever passed before the cap fired, so the verdict never depends on when the kill lands. It is
decided after every candidate process has ended, from their final statuses. Time and memory limits
stay per test: they end the call in progress, synchronously.

Limitation: values must be plain data; a test that needs a candidate-defined class instance, or
checks in-place mutation of an argument, fails (reported as a runtime error).

Over 400 lines on purpose: the host's half of the grader protocol (relay, per-test deadlines, strict
decoding) is one security boundary, kept in one file to be read whole.
"""

from __future__ import annotations

import ast
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Literal

from cohort.sandbox import policy
from cohort.sandbox.codec import CodecError, FRAME_HEADER, pack, unpack, valid_text
from cohort.sandbox.executor import ExecResult, ExecStatus, SandboxError, Slot

MAX_FRAME = 16 << 20
SMALL_FRAME = 64 << 10
READY_FRAME = 1 << 20  # the candidate's first frame (its function names) is parsed here: kept small
OUTPUT_VOID = "output limit exceeded: the whole run is void, including tests that answered before the kill"
Cause = Literal["", "assertion", "runtime", "timeout", "memory", "output"]


class InvalidTests(ValueError):
    """The reference's test code itself does not run (a bad reference, not a bad answer)."""


@dataclass(frozen=True)
class TestSpec:
    __test__ = False  # a data class, not a pytest test class
    kind: Literal["asserts", "function"]
    asserts: tuple[str, ...] = ()
    setup_code: str = ""
    test_code: str = ""
    entry_point: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("asserts", "function"):
            raise InvalidTests(f"unknown test kind {self.kind!r}")
        if self.kind == "asserts" and not self.asserts:
            raise InvalidTests("no asserts given")
        if self.kind == "function" and not (_is_text(self.test_code) and self.test_code.strip()
                                            and _is_text(self.entry_point) and self.entry_point.strip()):
            raise InvalidTests("function tests need test_code defining check(candidate) and an entry_point")
        object.__setattr__(self, "_names", check_reference(self))

    @property
    def reference_names(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(names bound at module level of the setup/test code, modules the reference imports)."""
        return self._names  # type: ignore[attr-defined]

    @property
    def count(self) -> int:
        return len(self.asserts) if self.kind == "asserts" else 1


def _is_text(value) -> bool:
    return isinstance(value, str)


def _compile(source, filename: str, what: str) -> ast.Module:
    """Parse and compile one piece of the reference on the host (nothing runs): a SyntaxError (or a null
    byte, or nesting the compiler refuses) is the reference's, found before any candidate is loaded."""
    if not isinstance(source, str):
        raise InvalidTests(f"{what} is a {type(source).__name__}, not text")
    try:
        tree = ast.parse(source, filename)
        compile(tree, filename, "exec")
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        raise InvalidTests(f"{what} does not compile{where}: {type(exc).__name__}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise InvalidTests(f"{what} does not compile: {type(exc).__name__}: {exc}") from None
    return tree


def _module_bindings(tree: ast.Module) -> set[str]:
    """Names a module binds outside function and class bodies (defs, assignments, imports, for/with targets)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # their bodies bind locals, not module names
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if isinstance(node, ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return names


def _imported_modules(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return {m for name in out for m in _prefixes(name)}


def _prefixes(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _discarded_comparison(tree: ast.Module) -> bool:
    """``f(1) == 2`` as a statement: a test that can never fail (an ``assert`` left out)."""
    return any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Compare) for node in tree.body)


def check_reference(spec: TestSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Validate the reference on its own, before and independently of any candidate; raises InvalidTests.

    Every piece (setup code, test code, each assert) must compile; ``function`` test code must define
    ``check`` taking one argument, and the entry point must be an identifier; an assert must be code and
    not a bare comparison. Returns what the grader needs to attribute a run-time failure (see
    ``_zygote._reference_error``): the names the reference binds at module level and the modules it imports.
    """
    trees = [_compile(spec.setup_code, "<setup>", "setup_code")] if spec.setup_code else []
    if spec.kind == "function":
        if not spec.entry_point.isidentifier():
            raise InvalidTests(f"entry_point {spec.entry_point[:100]!r} is not a Python name")
        tree = _compile(spec.test_code, "<tests>", "test_code")
        trees.append(tree)
        check = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
        if not check and "check" not in set().union(*(_module_bindings(t) for t in trees)):
            raise InvalidTests("test_code does not define check(candidate)")
        if check:
            a = check[-1].args
            positional = len(a.posonlyargs) + len(a.args)
            required = positional - len(a.defaults) + sum(d is None for d in a.kw_defaults)
            if (positional < 1 and a.vararg is None) or required > 1:
                raise InvalidTests("check() in test_code must take exactly one argument (the candidate)")
    else:
        for i, src in enumerate(spec.asserts):
            tree = _compile(src, f"<assert {i}>", f"assert {i}")
            if not tree.body:
                raise InvalidTests(f"assert {i} is empty: a test that cannot fail")
            if _discarded_comparison(tree):
                raise InvalidTests(f"assert {i} is a comparison whose result is discarded (no `assert`): "
                                   f"{src.strip()[:200]!r}")
            trees.append(tree)
    names = set().union(*(_module_bindings(t) for t in trees))
    modules = set().union(*(_imported_modules(t) for t in trees))
    return tuple(sorted(names)), tuple(sorted(modules))


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False
    passed: bool
    cause: Cause = ""
    error: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "error", valid_text(self.error)[:2000])  # untrusted text


@dataclass(frozen=True)
class TestRun:
    __test__ = False
    outcomes: tuple[TestOutcome, ...]
    load_error: str = ""
    load_cause: Cause = ""
    stdout: bytes = b""
    stderr: bytes = b""
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "load_error", valid_text(self.load_error)[:2000])

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)


def _cause_of(result: ExecResult | None) -> Cause:
    if result is None:
        return "runtime"
    return {
        ExecStatus.TIME_LIMIT_EXCEEDED: "timeout",
        ExecStatus.MEMORY_LIMIT_EXCEEDED: "memory",
        ExecStatus.OUTPUT_LIMIT_EXCEEDED: "output",
    }.get(result.status, "runtime")


def _send(sock: socket.socket, message: dict, deadline: float) -> None:
    """One frame; raises TimeoutError when the peer does not take it before ``deadline``."""
    _send_raw(sock, pack(message), deadline)


def _recv(sock: socket.socket, deadline: float, cap: int = MAX_FRAME) -> dict | None:
    """One frame, or None on EOF; raises TimeoutError when ``deadline`` passes."""
    body = _recv_body(sock, deadline, cap)
    return None if body is None else unpack(body)


def _recv_body(sock: socket.socket, deadline: float, cap: int = MAX_FRAME) -> bytes | None:
    """One frame's raw body, or None on EOF; raises TimeoutError when ``deadline`` passes."""
    header = _recv_exact(sock, FRAME_HEADER, deadline)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > cap:
        raise CodecError(f"frame of {size} bytes is over the {cap} cap")
    return _recv_exact(sock, size, deadline)


def _send_raw(sock: socket.socket, frame: bytes, deadline: float) -> None:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        sock.sendall(frame)
    except socket.timeout:
        raise TimeoutError from None


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except socket.timeout:
            raise TimeoutError from None
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class _Run:
    """One background execution in a slot, talking to the host over a socketpair."""

    def __init__(self, slot: Slot, job: dict, limits: policy.Limits) -> None:
        self.slot = slot
        self.host, child = socket.socketpair()
        self.result: ExecResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._target, args=(job, limits, child), daemon=True)
        self._thread.start()

    def _target(self, job: dict, limits: policy.Limits, child: socket.socket) -> None:
        try:
            self.result = self.slot.run(job, limits, rpc=child)
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
            self.error = exc

    def finish(self, kill: bool = False, timeout: float = 30.0) -> ExecResult | None:
        if kill and self._thread.is_alive():
            self.slot.kill_current()
        try:
            self.host.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.host.close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.slot.kill()
            self._thread.join(10)
        if isinstance(self.error, SandboxError):
            raise self.error
        return self.result


class _Candidate:
    """The candidate side: (re)started on demand in its slot."""

    def __init__(self, slot: Slot, code: str, limits: policy.Limits) -> None:
        self.slot, self.code, self.limits = slot, code, limits
        self.run: _Run | None = None
        self.names: list[str] = []
        self.modules: list[str] = []
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.over_output = False  # some process of this run exceeded the output cap: the run is void

    def start(self, deadline: float) -> tuple[str, Cause]:
        """Load the code; returns ("", "") or (load error, cause)."""
        self.run = _Run(self.slot, {"mode": "serve", "code": self.code}, self.limits)
        try:
            first = _recv(self.run.host, deadline, cap=READY_FRAME)
        except TimeoutError:
            self.stop(kill=True)
            return "module load did not finish in time", "timeout"
        except CodecError as exc:
            first = {"load_error": ["ProtocolError", str(exc)]}
        if first is not None and isinstance(first.get("ready"), list):
            names = [n for n in first["ready"][:10_000] if isinstance(n, str)]
            self.names = [n for n in names if n.isidentifier() and not n.startswith("__")]
            modules = first.get("modules")
            self.modules = [m for m in modules[:100] if isinstance(m, str)] if isinstance(modules, list) else []
            return "", ""
        result = self.stop(kill=True)
        if first is not None and isinstance(first.get("load_error"), list):
            kind, msg = (list(first["load_error"]) + ["", ""])[:2]
            return f"{kind}: {msg}"[:2000], "memory" if kind == "MemoryError" else "runtime"
        return "candidate exited while loading", _cause_of(result)

    def stop(self, kill: bool = False) -> ExecResult | None:
        if self.run is None:
            return None
        run, self.run = self.run, None
        result = run.finish(kill=kill)
        if result is not None:  # a candidate restarted per test must not pile up output: one cap in all
            self.over_output = self.over_output or result.status is ExecStatus.OUTPUT_LIMIT_EXCEEDED
            cap = self.limits.output_bytes
            self.stdout += result.stdout[: max(0, cap - len(self.stdout))]
            self.stderr += result.stderr[: max(0, cap - len(self.stderr))]
        return result

    def call(self, request: dict, deadline: float) -> tuple[bytes, Cause]:
        """Forward one call; returns (frame for the grader, cause if the candidate failed).

        A return value is relayed as the candidate's raw frame, unparsed: the host never spends
        time on untrusted data (16 MiB of JSON would hold the service's GIL for seconds per
        call). The grader decodes it strictly into fresh builtins, under its own deadline.
        """
        if self.run is None:
            error, cause = self.start(deadline)
            if error:
                return pack({"gone": error}), cause
        message = {"call": request.get("call"), "args": request.get("args"), "kwargs": request.get("kwargs")}
        try:
            _send(self.run.host, message, deadline)
            body = _recv_body(self.run.host, deadline)
        except TimeoutError:
            self.stop(kill=True)
            return pack({"gone": "per-test time limit exceeded"}), "timeout"
        except (OSError, CodecError):
            body = None
        if body is None:
            return pack({"gone": "candidate process ended"}), _cause_of(self.stop(kill=True))
        if body.startswith(b'{"ok":'):
            return len(body).to_bytes(FRAME_HEADER, "big") + body, ""
        try:  # an exception report: small, parsed here for its cause
            reply = unpack(body) if len(body) <= SMALL_FRAME else {}
        except CodecError:
            reply = {}
        err = reply.get("err")
        if isinstance(err, list) and len(err) == 2 and all(isinstance(x, str) for x in err):
            kind, msg = valid_text(err[0][:100]), valid_text(err[1][:2000])
            return pack({"err": [kind, msg]}), "memory" if kind == "MemoryError" else "runtime"
        return pack({"err": ["RuntimeError", "malformed reply from candidate"]}), "runtime"


def run_tests(sandbox, code: str, spec: TestSpec, per_test_timeout_s: float, stop_first: bool,
              limits: policy.Limits) -> TestRun:
    """Run ``spec`` against ``code``. Raises SandboxError (infra) or InvalidTests (bad reference)."""
    started = time.monotonic()
    per_test = max(0.05, min(per_test_timeout_s, limits.wall_s))
    budget = per_test * (spec.count + 1) + 2.0
    run_limits = replace(limits, wall_s=min(budget, policy.MAX_LIMITS.wall_s * 10))
    with sandbox.candidates.acquire() as cslot:
        candidate = _Candidate(cslot, code, run_limits)
        try:
            load_error, load_cause = candidate.start(time.monotonic() + per_test)
            if load_error:
                fail = TestOutcome(False, load_cause, load_error)
                return TestRun((fail,) * spec.count, load_error, load_cause, bytes(candidate.stdout),
                               bytes(candidate.stderr), time.monotonic() - started)
            with sandbox.graders.acquire() as jslot:
                outcomes = _grader(jslot, spec, candidate, per_test, stop_first, run_limits)
        finally:
            candidate.stop()
    if candidate.over_output:  # every candidate process has ended: this is final, not a race
        outcomes = [TestOutcome(False, "output", OUTPUT_VOID)] * spec.count
    return TestRun(tuple(outcomes), "", "", bytes(candidate.stdout), bytes(candidate.stderr),
                   time.monotonic() - started)


def _grader(jslot: Slot, spec: TestSpec, candidate: _Candidate, per_test: float, stop_first: bool,
           limits: policy.Limits) -> list[TestOutcome]:
    job = {
        "mode": "grader", "kind": spec.kind, "asserts": list(spec.asserts), "setup_code": spec.setup_code,
        "test_code": spec.test_code, "entry_point": spec.entry_point, "stop_first": stop_first,
        "candidate_names": candidate.names, "candidate_modules": candidate.modules,
        "reference_names": list(spec.reference_names[0]), "reference_imports": list(spec.reference_names[1]),
    }
    grader = _Run(jslot, job, limits)
    outcomes: dict[int, TestOutcome] = {}
    overall = time.monotonic() + limits.wall_s
    test_deadline = overall
    current, cause = -1, ""
    called_in_setup = False
    try:
        while True:
            try:
                msg = _recv(grader.host, overall)
            except TimeoutError:
                break
            if msg is None or msg.get("done"):
                break
            if "setup_error" in msg:
                if called_in_setup:  # the candidate took part: its failure, not a bad reference
                    error = valid_text(f"test setup failed calling the candidate: {msg['setup_error']}")
                    return [TestOutcome(False, "runtime", error)] * spec.count
                raise InvalidTests(f"test code failed before any test ran: {msg['setup_error']}")
            if "begin" in msg:
                current, cause = int(msg["begin"]), ""
                test_deadline = min(overall, time.monotonic() + per_test)
            elif "call" in msg:
                called_in_setup = called_in_setup or current < 0
                frame, call_cause = candidate.call(msg, test_deadline)
                cause = cause or call_cause
                try:
                    _send_raw(grader.host, frame, overall)
                except (TimeoutError, OSError):
                    break  # the grader is gone or stuck: its unfinished tests count as not passed
            elif "end" in msg:
                if msg.get("reference_error"):  # decided by the grader from where the test failed, not why
                    raise InvalidTests(f"test {msg['end']} failed in the reference's own code: "
                                       f"{valid_text(str(msg['reference_error']))[:500]}")
                passed = msg.get("passed") is True
                error = str(msg.get("error", ""))[:2000]
                if passed:
                    outcomes[current] = TestOutcome(True)
                else:
                    outcomes[current] = TestOutcome(False, cause or _error_cause(error), error)
                if time.monotonic() > test_deadline and not passed:
                    outcomes[current] = TestOutcome(False, "timeout", error or "per-test time limit exceeded")
    finally:
        grader_result = grader.finish(kill=True)
    if grader_result is not None and grader_result.status is ExecStatus.TIME_LIMIT_EXCEEDED:
        pass  # remaining tests are marked as timed out below
    missing = TestOutcome(False, "timeout" if current >= 0 and current not in outcomes else "runtime",
                          "test did not finish")
    results = []
    for i in range(spec.count):
        if i in outcomes:
            results.append(outcomes[i])
        elif stop_first and any(not o.passed for o in outcomes.values()):
            results.append(TestOutcome(False, "", "not run (stopped at first failure)"))
        else:
            results.append(missing if i == current else TestOutcome(False, "timeout", "test did not run in time"))
    return results


def _error_cause(error: str) -> Cause:
    if error.startswith("AssertionError"):
        return "assertion"
    if error.startswith("MemoryError"):
        return "memory"
    return "runtime"
