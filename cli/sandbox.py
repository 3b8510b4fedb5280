"""``cohort sandbox exec``: run one piece of code against asserts in the sandbox, print JSON."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cohort.cli import app, fail

sandbox_app = typer.Typer(help="Debug rewards: run code in the sandbox by hand.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("exec")
def exec_(
    code_file: Path = typer.Option(..., "--code-file", exists=True, dir_okay=False, readable=True,
                                   help="Python file (or a completion: its last ```python block is used)."),
    tests_json: str = typer.Option(None, "--tests-json",
                                   help='JSON list of assert statements, e.g. \'["assert f(1) == 2"]\'. '
                                        "Without it the file runs as a program."),
    timeout: float = typer.Option(5.0, "--timeout", min=0.01, help="Seconds per test (or for the program)."),
    stdin: str = typer.Option("", "--stdin", help="Text fed to the program's stdin (program mode)."),
    endpoint: str = typer.Option("", "--endpoint", envvar="COHORT_SANDBOX_ENDPOINT",
                                 help="host:port of a SandboxService; in-process sandbox when empty."),
) -> None:
    """Print one JSON object: verdict, reward (fraction of asserts passed), stdout, stderr, tests.

    Exits 0 whatever the verdict; non-zero only for bad input (2) or a sandbox failure (3).
    """
    from cohort.sandbox import policy
    from cohort.sandbox.grader import InvalidTests, TestSpec
    from cohort.verifiers.code.backend import GrpcBackend, LocalBackend, SandboxUnavailable
    from cohort.verifiers.code.extract import extract_code
    from cohort.verifiers.code.verifier import verdict_for

    asserts: list[str] | None = None
    if tests_json is not None:
        try:
            asserts = json.loads(tests_json)
        except json.JSONDecodeError as exc:
            fail(f"error: --tests-json is not valid JSON: {exc}")
        if not isinstance(asserts, list) or not asserts or not all(isinstance(a, str) for a in asserts):
            fail("error: --tests-json must be a non-empty JSON list of strings")
    code = extract_code(code_file.read_text(errors="replace"))
    from cohort.rpc.tls import TlsError

    try:  # TLS to the sandbox from COHORT_SANDBOX_TLS_CA / _CERT / _KEY
        backend = GrpcBackend(endpoint) if endpoint else LocalBackend(pool_size=1)
    except TlsError as exc:
        fail(f"error: {exc}")
    limits = policy.Limits(wall_s=timeout, cpu_s=timeout, memory_bytes=0, output_bytes=0, max_processes=0,
                           disk_bytes=0)
    try:
        if asserts is None:
            r = backend.execute(code, stdin.encode(), limits)
            out = {"verdict": r.status.value, "reward": None, "exit_code": r.exit_code, "signal": r.signal,
                   "stdout": r.stdout.decode(errors="replace"), "stderr": r.stderr.decode(errors="replace"),
                   "wall_s": round(r.wall_s, 4), "cpu_s": round(r.cpu_s, 4)}
        else:
            run = backend.run_tests(code, TestSpec("asserts", asserts=tuple(asserts)), timeout, False, limits)
            reward, verdict = verdict_for(run.outcomes, run.load_error, run.load_cause, all_or_nothing=False)
            out = {"verdict": verdict.value, "reward": run.passed / len(run.outcomes),
                   "passed": run.passed, "total": len(run.outcomes),
                   "stdout": run.stdout.decode(errors="replace"), "stderr": run.stderr.decode(errors="replace"),
                   "load_error": run.load_error,
                   "tests": [{"test": a, "passed": o.passed, "cause": o.cause, "error": o.error}
                             for a, o in zip(asserts, run.outcomes)],
                   "wall_s": round(run.wall_s, 4)}
    except InvalidTests as exc:
        fail(f"error: the tests cannot run: {exc}")
    except SandboxUnavailable as exc:
        fail(f"error: sandbox unavailable: {exc}", 3)
    finally:
        if isinstance(backend, LocalBackend):
            backend.sandbox.close()
    typer.echo(json.dumps(out))
