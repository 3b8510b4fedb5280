"""The ``code`` verifier: run the completion's code against ``reference.code_tests`` in the sandbox.

Code is the last fenced python block of the completion, or the whole text. Test kinds:

- ``asserts`` (MBPP): each assert is one test; ``setup_code`` runs first.
- ``function`` (HumanEval): ``test_code`` defines ``check(candidate)``; one test. Give the prompt
  as ``setup_code``: helpers the check calls (``poly``, ``encode_cyclic``) then come from the
  reference, not from the candidate (which could otherwise redefine them to pass).
- ``io``: each case runs the program with ``stdin`` and compares stdout with
  ``expected_stdout`` exactly or whitespace-normalised (``comparison``); exit code must be 0.

asserts/function run through :mod:`sandbox.grader` (tests and candidate in separate sandboxes,
plain data between them), so the candidate cannot forge a pass; io output is compared here.

Options (``group.options``): ``reward=fraction`` (default, fraction of tests passed) or
``all_or_nothing``; ``stop_at_first_failure=false|true``; ``per_test_timeout_s`` (default 5, and
never more than the group's ``rollout_timeout_s``); ``memory_mb`` per process.

Verdicts: CORRECT (all pass), PARTIAL (some pass, fraction mode), INCORRECT, RUNTIME_ERROR (the
code did not load, or crashed in every failing test), RESOURCE_LIMIT_EXCEEDED (a failing test hit
a time, memory or output limit), NO_ANSWER (no code). A sandbox failure is
DEPENDENCY_UNAVAILABLE and a reference whose tests cannot run is INVALID_REFERENCE: neither is
ever a reward of 0.

Each group is its own sandbox tenant (:func:`group_tenant`, sent as ``cohort-tenant``): the sandbox
caps one tenant at half of each slot pool and of its RPC threads, so one group whose programs all burn
CPU or sleep to their deadline cannot starve the other groups' programs.
"""

from __future__ import annotations

import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from pydantic import Field, field_validator, model_validator

from cohort.sandbox import policy
from cohort.sandbox.executor import ExecResult, ExecStatus
from cohort.sandbox.grader import InvalidTests, TestOutcome, TestRun, TestSpec
from cohort.verifiers.base import (CodeTests, GroupRequest, InvalidRequest, IoCase, Rollout, RolloutResult,
                                  RolloutStatus, Verdict, VerifierBase, VerifyContext, float_option, option)
from cohort.verifiers.code.backend import Backend, SandboxUnavailable, default_concurrency, make_backend
from cohort.verifiers.code.extract import extract_code
from cohort.verifiers.options import VerifierOptions

DEFAULT_PER_TEST_TIMEOUT_S = 5.0
RESOURCE_CAUSES = ("timeout", "memory", "output")


def io_passed(stdout: bytes, expected: str, comparison: str) -> bool:
    """Compare program output with the expected output.

    >>> io_passed(b"1 2\\n3\\n", "1 2 3", "whitespace"), io_passed(b"1 2\\n", "1 2", "exact")
    (True, False)
    """
    text = stdout.decode("utf-8", errors="replace")
    if comparison == "exact":
        return text == expected
    return text.split() == expected.split()


def io_outcome(r: ExecResult, expected: str, comparison: str) -> TestOutcome:
    """One stdin/stdout case: passes only when the program exited 0 with the expected output."""
    if r.status is ExecStatus.TIME_LIMIT_EXCEEDED:
        return TestOutcome(False, "timeout", "time limit exceeded")
    if r.status is ExecStatus.MEMORY_LIMIT_EXCEEDED:
        return TestOutcome(False, "memory", "memory limit exceeded")
    if r.status is ExecStatus.OUTPUT_LIMIT_EXCEEDED:
        return TestOutcome(False, "output", "output limit exceeded")
    if r.exit_code != 0 or r.signal:
        return TestOutcome(False, "runtime", r.stderr.decode(errors="replace")[-500:] or f"exit code {r.exit_code}")
    if io_passed(r.stdout, expected, comparison):
        return TestOutcome(True)
    return TestOutcome(False, "assertion", "wrong output")


def verdict_for(outcomes: tuple[TestOutcome, ...], load_error: str, load_cause: str, all_or_nothing: bool
                ) -> tuple[float, Verdict]:
    n = len(outcomes)
    passed = sum(o.passed for o in outcomes)
    if passed == n:
        return 1.0, Verdict.CORRECT
    failed_causes = {o.cause for o in outcomes if not o.passed}
    if load_error:
        kind = Verdict.RESOURCE_LIMIT_EXCEEDED if load_cause in RESOURCE_CAUSES else Verdict.RUNTIME_ERROR
        return 0.0, kind
    if passed and not all_or_nothing:
        return passed / n, Verdict.PARTIAL
    if failed_causes & set(RESOURCE_CAUSES):
        return 0.0, Verdict.RESOURCE_LIMIT_EXCEEDED
    if failed_causes and failed_causes <= {"runtime", ""}:
        return 0.0, Verdict.RUNTIME_ERROR
    return 0.0, Verdict.INCORRECT


LIMIT_FLAGS = {"timeout": "time_limit_exceeded", "memory": "memory_limit_exceeded", "output": "output_limit_exceeded"}
"""The flag of a rollout whose program hit a limit in some test (time, memory, output): the program's own
doing, so it is scored (reward for the tests it passed), never masked; the flag says which limit."""


def limit_flags(run: TestRun) -> tuple[str, ...]:
    """
    >>> limit_flags(TestRun((TestOutcome(True), TestOutcome(False, "timeout"), TestOutcome(False, "output"))))
    ('output_limit_exceeded', 'time_limit_exceeded')
    """
    causes = {o.cause for o in run.outcomes if not o.passed} | {run.load_cause}
    return tuple(sorted(LIMIT_FLAGS[c] for c in causes if c in LIMIT_FLAGS))


def _one_reference(rollouts, results: list[RolloutResult]) -> list[RolloutResult]:
    """The group shares one reference: once any rollout's run showed it broken, every rollout is
    INVALID_REFERENCE, including those whose own code never got as far as the tests (a candidate that
    did not load is not scored 0 against a reference that could not have passed it)."""
    bad = next((r for r in results if r.status is RolloutStatus.INVALID_REFERENCE), None)
    if bad is None:
        return results
    detail = f"the group's reference is broken (found running rollout {bad.index}): {bad.detail}"[:500]
    return [r if r.status is RolloutStatus.INVALID_REFERENCE else
            RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, detail) for r in results]


def group_tenant(group: GroupRequest) -> str:
    """The sandbox tenant of one group: its id (made metadata-safe, for the logs) and a random suffix, so
    that two callers' groups with the same id (``g0``) are still two tenants.

    >>> group_tenant(GroupRequest("code", (), group_id="step 3/prompt é7")).startswith("group:step_3/prompt__7#")
    True
    """
    label = re.sub(r"[^A-Za-z0-9._:/-]", "_", group.group_id)[:64]
    return f"group:{label}#{secrets.token_hex(4)}"


class SandboxTlsOptions(VerifierOptions):
    """TLS to the sandbox services (all null: plaintext)."""

    ca: str | None = None
    """PEM CA the sandbox's certificate must chain to (formerly ``COHORT_SANDBOX_TLS_CA``)."""
    cert: str | None = None
    """PEM client certificate for mutual TLS, with ``key`` (formerly ``COHORT_SANDBOX_TLS_CERT``)."""
    key: str | None = None
    """PEM private key of ``cert`` (formerly ``COHORT_SANDBOX_TLS_KEY``)."""
    server_name: str | None = None
    """Name the sandbox's certificate must carry, when not the endpoint's host (formerly
    ``COHORT_SANDBOX_TLS_SERVER_NAME``)."""

    @model_validator(mode="after")
    def _readable(self) -> SandboxTlsOptions:
        """A missing or unreadable file, or a certificate without its key, is refused here, at startup."""
        from cohort.rpc.tls import ClientTls, TlsError

        try:
            ClientTls.from_options(self.ca, self.cert, self.key, self.server_name)
        except TlsError as exc:
            raise ValueError(str(exc)) from None
        return self

    def client_tls(self):
        """The :class:`cohort.rpc.tls.ClientTls` these options describe (None: plaintext)."""
        from cohort.rpc.tls import ClientTls

        return ClientTls.from_options(self.ca, self.cert, self.key, self.server_name)


class CodeOptions(VerifierOptions):
    """The code verifier's server-side settings (serve config ``verifiers.code``)."""

    sandbox_endpoints: tuple[str, ...] = ()
    """``host:port`` of SandboxService instances (``cohort serve sandbox``; a comma-separated string is split),
    used round robin with failover (formerly ``COHORT_SANDBOX_ENDPOINT``); empty: an in-process sandbox."""
    sandbox_tls: SandboxTlsOptions = SandboxTlsOptions()
    """TLS to ``sandbox_endpoints``."""
    pool_size: int = Field(0, ge=0)
    """Slots of the in-process sandbox (formerly ``COHORT_SANDBOX_POOL_SIZE``); 0: max(4, 2 x CPUs)."""
    max_parallel: int | None = Field(None, ge=1)
    """Programs in flight at once; null: as many as the sandbox runs (its slots, or 16 per endpoint)."""

    @field_validator("sandbox_endpoints", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            value = value.split(",")
        return tuple(e.strip() for e in value if e.strip()) if isinstance(value, (list, tuple)) else value


class CodeVerifier(VerifierBase):
    Options = CodeOptions
    name = "code"
    version = "1.0.0"
    description = "runs the completion's Python against asserts / check(candidate) / stdin-stdout cases in the sandbox"
    reference_kinds = ("code_tests",)

    def __init__(self, options: CodeOptions | None = None, *, backend: Backend | None = None, **fields) -> None:
        """``backend``: a sandbox made by the caller (tests); else made from the options on first use.
        ``CodeVerifier(pool_size=2)`` is ``CodeVerifier(CodeOptions(pool_size=2))``."""
        self.options = opts = options or CodeOptions(**fields)
        self._tls = opts.sandbox_tls.client_tls()
        self._backend = backend
        # One thread per program in flight, as many as the sandbox runs at once: its slots, or a share of each
        # remote sandbox service (a fleet is used whole, not at this host's CPU count).
        in_flight = opts.max_parallel or (backend.concurrency if backend is not None
                                          else default_concurrency(list(opts.sandbox_endpoints), opts.pool_size))
        self._executor = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="code-verifier")

    @property
    def backend(self) -> Backend:
        """Resolved on first use; a sandbox that cannot even start (no bwrap) is unavailable."""
        if self._backend is None:
            try:
                self._backend = make_backend(list(self.options.sandbox_endpoints), self._tls, self.options.pool_size)
            except (ValueError, OSError) as exc:
                raise SandboxUnavailable(f"sandbox cannot start: {exc}") from exc
        return self._backend

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        tests = group.reference.code_tests
        if tests is None:
            raise InvalidRequest("the code verifier needs reference.code_tests")
        all_or_nothing = option(group, "reward", "fraction", ("fraction", "all_or_nothing")) == "all_or_nothing"
        stop_first = option(group, "stop_at_first_failure", "false", ("false", "true")) == "true"
        per_test = float_option(group, "per_test_timeout_s", DEFAULT_PER_TEST_TIMEOUT_S)
        memory_mb = float_option(group, "memory_mb", 0.0)
        if per_test <= 0 or memory_mb < 0:
            raise InvalidRequest("per_test_timeout_s must be > 0 and memory_mb >= 0")
        if group.rollout_timeout_s:
            per_test = min(per_test, group.rollout_timeout_s)
        limits = policy.Limits(wall_s=per_test, cpu_s=per_test, memory_bytes=int(memory_mb * (1 << 20)),
                               output_bytes=0, max_processes=0, disk_bytes=0)
        try:
            spec = _spec(tests)
        except InvalidTests as exc:
            return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, str(exc)) for r in group.rollouts]
        tenant = group_tenant(group)
        futures = [self._executor.submit(self._one, r, tests, spec, per_test, stop_first, all_or_nothing, limits, ctx,
                                         tenant)
                   for r in group.rollouts]
        return _one_reference(group.rollouts, [f.result() for f in futures])

    def _one(self, rollout: Rollout, tests: CodeTests, spec: TestSpec | None, per_test: float, stop_first: bool,
             all_or_nothing: bool, limits: policy.Limits, ctx: VerifyContext, tenant: str = "") -> RolloutResult:
        start = time.monotonic()
        code = extract_code(rollout.completion)
        if not code.strip():
            return RolloutResult.ok(rollout.index, 0.0, Verdict.NO_ANSWER, detail="no code in the completion")
        size = len(code.encode("utf-8", "surrogatepass"))
        if size > policy.MAX_CODE_BYTES:  # the sandbox would refuse the request: the answer's fault, scored
            return RolloutResult.ok(rollout.index, 0.0, Verdict.RESOURCE_LIMIT_EXCEEDED,
                                    detail=f"code is {size} bytes, over the sandbox's {policy.MAX_CODE_BYTES}",
                                    flags=("code_too_large",))
        if ctx.expired():
            return RolloutResult.unusable(rollout.index, RolloutStatus.VERIFIER_TIMEOUT, "deadline passed before running")
        try:
            if spec is None:
                run = self._run_io(code, tests, stop_first, limits, tenant)
            else:
                run = self.backend.run_tests(code, spec, per_test, stop_first, limits, tenant=tenant)
        except SandboxUnavailable as exc:
            return RolloutResult.unusable(rollout.index, RolloutStatus.DEPENDENCY_UNAVAILABLE, str(exc)[:500])
        except InvalidTests as exc:
            return RolloutResult.unusable(rollout.index, RolloutStatus.INVALID_REFERENCE, str(exc)[:500])
        reward, verdict = verdict_for(run.outcomes, run.load_error, run.load_cause, all_or_nothing)
        failing = next((o for o in run.outcomes if not o.passed), None)
        detail = run.load_error or (f"{failing.cause}: {failing.error}" if failing else "")
        result = RolloutResult.ok(
            rollout.index, reward, verdict,
            components={"tests_passed": run.passed / len(run.outcomes)},
            detail=f"{run.passed}/{len(run.outcomes)} tests passed" + (f"; first failure: {detail[:300]}" if detail else ""),
            flags=limit_flags(run),
        )
        return replace(result, duration_s=time.monotonic() - start)

    def _run_io(self, code: str, tests: CodeTests, stop_first: bool, limits: policy.Limits, tenant: str) -> TestRun:
        outcomes = []
        for case in tests.io_cases:
            o = io_outcome(self.backend.execute(code, case.stdin.encode(), limits, tenant=tenant),
                           case.expected_stdout, tests.comparison)
            outcomes.append(o)
            if stop_first and not o.passed:
                break
        while len(outcomes) < len(tests.io_cases):
            outcomes.append(TestOutcome(False, "", "not run (stopped at first failure)"))
        return TestRun(tuple(outcomes))


def _check_io_cases(tests: CodeTests) -> None:
    """Malformed stdin/stdout case data is the reference's: InvalidTests, before any candidate runs."""
    if not tests.io_cases:
        raise InvalidTests("io tests without cases")
    if tests.comparison not in ("exact", "whitespace"):
        raise InvalidTests(f"unknown comparison {tests.comparison!r}")
    for i, case in enumerate(tests.io_cases):
        if not isinstance(case, IoCase):
            raise InvalidTests(f"io case {i} is a {type(case).__name__}, not a case with stdin and expected_stdout")
        for name in ("stdin", "expected_stdout"):
            value = getattr(case, name)
            if not isinstance(value, str):
                raise InvalidTests(f"io case {i}: {name} is {'missing' if value is None else type(value).__name__}, "
                                   "not text")
    # One case may expect no output; every case expecting none is a dropped field, not a task.
    if all(not c.expected_stdout.strip() for c in tests.io_cases):
        raise InvalidTests(f"no io case has an expected output (all {len(tests.io_cases)} are empty): "
                           "expected_stdout missing from the reference?")


def _spec(tests: CodeTests) -> TestSpec | None:
    """The grader spec for asserts/function tests; None for io (compared here). The reference is validated
    here, on its own (:func:`sandbox.grader.check_reference`): a reference that cannot compile is
    INVALID_REFERENCE for the whole group before any candidate is loaded."""
    if tests.kind == "io":
        _check_io_cases(tests)
        return None
    if tests.kind == "asserts":
        if isinstance(tests.asserts, str) or not all(isinstance(a, str) for a in tests.asserts):
            raise InvalidTests("asserts must be a list of code strings")
        return TestSpec("asserts", asserts=tuple(tests.asserts), setup_code=tests.setup_code)
    if tests.kind == "function":
        return TestSpec("function", test_code=tests.test_code, entry_point=tests.entry_point,
                        setup_code=tests.setup_code)
    raise InvalidTests(f"unknown code_tests kind {tests.kind!r}")
