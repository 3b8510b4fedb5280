"""`cohort sandbox exec` as people debugging rewards run it: a real subprocess, one JSON object out."""

from __future__ import annotations

import json
import subprocess
import sys


def cohort(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort.cli", *args], capture_output=True, text=True, timeout=120)


def test_exec_asserts_prints_json_and_exits_zero(tmp_path) -> None:
    code = tmp_path / "sol.py"
    code.write_text("def f(x):\n    print('PASS')\n    return x + 1\n")
    r = cohort("sandbox", "exec", "--code-file", str(code), "--tests-json", '["assert f(1) == 2", "assert f(2) == 4"]',
               "--timeout", "5")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "partial" and out["reward"] == 0.5
    assert out["stdout"] == "PASS\nPASS\n" and out["stderr"] == ""
    assert [t["passed"] for t in out["tests"]] == [True, False]


def test_exec_exits_zero_on_failing_verdicts(tmp_path) -> None:
    code = tmp_path / "bad.py"
    code.write_text("import os\nos._exit(0)\n")
    r = cohort("sandbox", "exec", "--code-file", str(code), "--tests-json", '["assert f(1) == 2"]', "--timeout", "2")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["reward"] == 0.0 and out["verdict"] == "runtime_error"
    spin = tmp_path / "spin.py"
    spin.write_text("def f(x):\n    while True: pass\n")
    out = json.loads(cohort("sandbox", "exec", "--code-file", str(spin), "--tests-json", '["assert f(1) == 2"]',
                            "--timeout", "0.5").stdout)
    assert (out["reward"], out["verdict"]) == (0.0, "resource_limit_exceeded")


def test_exec_program_mode(tmp_path) -> None:
    code = tmp_path / "prog.py"
    code.write_text("import os\nprint(input()[::-1], os.getuid())\n")
    r = cohort("sandbox", "exec", "--code-file", str(code), "--stdin", "abc\n")
    out = json.loads(r.stdout)
    assert out["verdict"] == "exited" and out["stdout"] == "cba 65534\n" and out["exit_code"] == 0


def test_bad_input_is_a_clear_error(tmp_path) -> None:
    code = tmp_path / "sol.py"
    code.write_text("x = 1\n")
    for tests in ("not json", "[]", '{"a": 1}', "[1, 2]"):
        r = cohort("sandbox", "exec", "--code-file", str(code), "--tests-json", tests)
        assert r.returncode == 2 and "error" in r.stderr.lower() and r.stdout == ""
    r = cohort("sandbox", "exec", "--code-file", str(tmp_path / "missing.py"), "--tests-json", '["assert 1"]')
    assert r.returncode != 0 and r.stdout == ""
