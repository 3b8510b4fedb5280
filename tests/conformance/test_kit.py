"""The conformance kit against real servers on loopback, each in its own subprocess.

The built-in ``format`` verifier passes every rule; a small standalone grpcio server
(``broken_server.py``) passes every rule when correct and fails the rule matching each
deliberate defect.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.conformance import RULES, CasesError, KitOptions, load_cases, run_kit
from cohort.conformance.runner import free_port

ROOT = Path(__file__).resolve().parents[2]
FORMAT_CASES = ROOT / "tests" / "conformance" / "cases" / "format.jsonl"
EXACT_CASES = ROOT / "examples" / "node-verifier" / "cases.jsonl"
BROKEN = ROOT / "tests" / "conformance" / "broken_server.py"


def broken(defect: str) -> str:
    return f"{sys.executable} {BROKEN} --port {{port}} --defect {defect}"


def by_rule(results) -> dict[str, object]:
    return {r.rule: r for r in results}


def cohort_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_format_verifier_passes_every_rule_through_the_cli():
    proc = cohort_cli(
        "conformance", "127.0.0.1:0", "--verifier", "format", "--cases", str(FORMAT_CASES),
        "--server-cmd", f"{sys.executable} -m cohort.cli serve format --port {{port}}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in RULES:
        assert name in proc.stdout
    assert "FAIL" not in proc.stdout and "SKIP" not in proc.stdout
    assert f"{len(RULES)} passed, 0 failed, 0 skipped" in proc.stdout


@pytest.mark.parametrize("name", ["math", "code", "steps"])
def test_builtin_verifier_passes_every_rule(name):
    cases = load_cases(ROOT / "tests" / "conformance" / "cases" / f"{name}.jsonl", name)
    results = run_kit("127.0.0.1:0", name, cases, server_cmd=f"{sys.executable} -m cohort.cli serve {name} --port {{port}}")
    assert {r.rule: r.status for r in results} == {rule: "pass" for rule in RULES}, [r for r in results if r.status != "pass"]


def test_reference_server_passes_every_rule():
    results = run_kit("127.0.0.1:0", "exact", load_cases(EXACT_CASES, "exact"), server_cmd=broken("none"))
    assert [r.rule for r in results] == list(RULES)
    assert {r.rule: r.status for r in results} == {name: "pass" for name in RULES}, [r for r in results if r.status != "pass"]


# defect of broken_server.py -> the rule that must catch it, and words its message must contain
DEFECTS = {
    "no_health": ("health", "no grpc.health.v1.Health"),
    "no_reflection": ("reflection", "no server reflection"),
    "no_version": ("list_verifiers", "empty version"),
    "wrong_answer": ("known_answers", "expected VERDICT_INCORRECT"),
    "missing_result": ("completeness", "missing indexes"),
    "wrong_order": ("order", "results in the order"),
    "nondeterministic": ("determinism", "serially"),
    "wrong_status": ("status_codes", "NOT_FOUND"),
    "racy": ("concurrency", "concurrent batches differ"),
    "hang": ("deadline", "keeps working on (or hangs in)"),
    "no_sigterm": ("sigterm", "exited with code -15"),
    "bad_steps": ("steps", "past the completion"),
    "small_receive": ("message_size", "RESOURCE_EXHAUSTED"),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_kit_fails_the_broken_rule(defect):
    rule, words = DEFECTS[defect]
    options = KitOptions(recovery_s=3.0, grace_s=10.0)
    # The hung server is not asked to drain: its stuck threads would only slow the test down.
    rules = [r for r in RULES if r != "sigterm"] if defect == "hang" else None
    results = by_rule(run_kit("127.0.0.1:0", "exact", load_cases(EXACT_CASES, "exact"), server_cmd=broken(defect),
                              rules=rules, options=options))
    assert results[rule].status == "fail", results[rule]
    assert words in results[rule].detail
    # The server is otherwise up and speaking the contract: the surface rules still pass.
    for other in {"health", "reflection", "list_verifiers"} - {rule}:
        assert results[other].status == "pass", results[other]


def test_a_server_that_never_answers_gets_its_verdict_within_the_deadline_budget():
    """VerifierService accepts calls and answers none: the first call's timeout is the only wait."""
    import time

    options = KitOptions(grace_s=5.0)  # defaults otherwise: 30 s calls, 15 s first calls, 10 s recovery
    budget = options.first_call_timeout_s
    assert budget <= 5.0 + options.recovery_s  # no more than the deadline rule may take by itself
    started = time.monotonic()
    results = run_kit("127.0.0.1:0", "exact", load_cases(EXACT_CASES, "exact"), server_cmd=broken("unresponsive"),
                      options=options)
    elapsed = time.monotonic() - started
    assert elapsed < budget + 8.0, f"{elapsed:.1f}s for a hung server"  # server start + one timed-out call
    by = by_rule(results)
    assert [r.rule for r in results] == list(RULES)
    assert by["health"].status == "pass" and by["reflection"].status == "pass"
    for name in RULES:
        if name not in ("health", "reflection"):
            assert by[name].status == "fail", by[name]
            assert "the server hangs" in by[name].detail, by[name]
            assert by[name].seconds < 1.0, by[name]  # reported at once, not waited for again
    assert "first ListVerifiers call got no answer within 15s" in by["list_verifiers"].detail


def test_a_hung_reflection_service_fails_its_rule_within_the_first_call_timeout():
    import time

    started = time.monotonic()
    results = by_rule(run_kit("127.0.0.1:0", "exact", load_cases(EXACT_CASES, "exact"), server_cmd=broken("reflection_hangs"),
                              rules=["reflection", "health"], options=KitOptions(first_call_timeout_s=2.0, grace_s=5.0)))
    assert results["reflection"].status == "fail" and "DEADLINE_EXCEEDED" in results["reflection"].detail
    assert results["reflection"].seconds < 2.0 + 2.0, results["reflection"]
    assert results["health"].status == "pass"
    assert time.monotonic() - started < 15


def test_cli_first_call_timeout_bounds_the_verdict_on_a_hung_server():
    import time

    started = time.monotonic()
    proc = cohort_cli("conformance", "127.0.0.1:0", "--verifier", "exact", "--cases", str(EXACT_CASES),
                      "--server-cmd", broken("unresponsive"), "--first-call-timeout", "2", "--grace", "5")
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the server hangs" in proc.stdout and "within 2s" in proc.stdout
    assert elapsed < 2 + 12, f"{elapsed:.1f}s"  # process start + server start + one 2 s wait


def test_cli_exits_non_zero_and_names_the_failed_rule():
    proc = cohort_cli("conformance", "127.0.0.1:0", "--verifier", "exact", "--cases", str(EXACT_CASES),
                      "--server-cmd", broken("wrong_status"), "--rule", "health", "--rule", "status_codes")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout and "NOT CONFORMANT" in proc.stdout and "status_codes" in proc.stdout


def test_sigterm_rule_is_skipped_without_a_server_command():
    from cohort.conformance.runner import ServerProcess

    port = free_port()
    server = ServerProcess(broken("none"), f"127.0.0.1:{port}")
    try:
        server.start(30)
        results = by_rule(run_kit(f"127.0.0.1:{port}", "exact", load_cases(EXACT_CASES, "exact"), rules=["health", "sigterm"]))
    finally:
        server.close()
    assert results["health"].status == "pass"
    assert results["sigterm"].status == "skip" and "--server-cmd" in results["sigterm"].detail


def test_cli_unreachable_endpoint_is_a_clear_error():
    port = free_port()
    proc = cohort_cli("conformance", f"127.0.0.1:{port}", "--verifier", "format", "--cases", str(FORMAT_CASES),
                      "--connect-timeout", "0.5")
    assert proc.returncode == 2
    assert f"cannot connect to 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_a_verifier_the_server_does_not_serve_is_one_line_and_exit_2():
    proc = cohort_cli("conformance", "127.0.0.1:0", "--verifier", "nosuch", "--cases", str(EXACT_CASES),
                      "--server-cmd", broken("none"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "serves 'exact', not 'nosuch'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "FAIL" not in proc.stdout  # no table of rows that all fail for the same reason


def test_message_size_passes_the_builtin_server_just_under_its_advertised_limit():
    results = by_rule(run_kit("127.0.0.1:0", "format", load_cases(FORMAT_CASES, "format"), rules=["list_verifiers", "message_size"],
                              server_cmd=f"{sys.executable} -m cohort.cli serve format --port {{port}}"))
    assert results["message_size"].status == "pass", results["message_size"]
    assert "8384512-byte batch" in results["message_size"].detail  # 8 MiB advertised, 4 KiB under it


def test_cli_rejects_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request": {"rollouts": []}, "expect": []}\n')
    proc = cohort_cli("conformance", "127.0.0.1:1", "--verifier", "format", "--cases", str(bad))
    assert proc.returncode == 2 and "bad.jsonl:1: request has no rollouts" in proc.stderr
    proc = cohort_cli("conformance", "nonsense", "--verifier", "format", "--cases", str(FORMAT_CASES))
    assert proc.returncode == 2 and "host:port" in proc.stderr
    proc = cohort_cli("conformance", "127.0.0.1:1", "--verifier", "format", "--cases", str(FORMAT_CASES), "--rule", "vibes")
    assert proc.returncode == 2 and "unknown rule" in proc.stderr


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        ('{"request": {"rollouts": [{"index": 0, "completion": "x"}]}}', "'request' and 'expect'"),
        ('{"request": {"rollouts": [{"index": 0}], "bogus": 1}, "expect": [{"index": 0}]}', "not a VerifyGroupRequest"),
        ('{"request": {"rollouts": [{"index": 0}]}, "expect": [{"index": 1}]}', "cover indexes [1]"),
        ('{"request": {"rollouts": [{"index": 0}]}, "expect": [{"index": 0, "verdict": "GREAT"}]}', "unknown Verdict 'GREAT'"),
        ('{"request": {"rollouts": [{"index": 0}]}, "expect": [{"index": 0, "status": "VERIFIER_TIMEOUT", "reward": 0}]}', "carries no reward"),
        ('{"request": {"verifier": "math", "rollouts": [{"index": 0}]}, "expect": [{"index": 0}]}', "for verifier 'math'"),
    ],
)
def test_cases_file_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "cases.jsonl"
    path.write_text("# comment\n\n" + line + "\n")
    with pytest.raises(CasesError, match=r"cases\.jsonl:3") as info:
        load_cases(path, "format")
    assert message in str(info.value)


def test_cases_file_round_trip(tmp_path):
    path = tmp_path / "cases.jsonl"
    case = {"name": "c", "request": {"reference": {"answer": "4"}, "options": {"mode": "soft"}, "rolloutTimeout": "1.5s",
                                      "rollouts": [{"index": 3, "completion": "a"}]},
            "expect": [{"index": 3, "verdict": "correct", "reward": 1, "components": {"x": 1}}]}
    path.write_text(json.dumps(case) + "\n")
    [loaded] = load_cases(path, "format")
    assert loaded.request.verifier == "format" and loaded.request.group_id == "c"
    assert loaded.request.reference.answer == "4" and dict(loaded.request.options) == {"mode": "soft"}
    assert loaded.request.rollout_timeout.ToNanoseconds() == 1_500_000_000
    [e] = loaded.expect
    assert (e.index, e.status, e.verdict, e.reward, e.components) == (3, "ROLLOUT_STATUS_OK", "VERDICT_CORRECT", 1.0, (("x", 1.0),))
