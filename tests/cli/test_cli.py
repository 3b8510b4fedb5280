"""The `cohort` command: help everywhere, `verify` against a real server, clear errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

COHORT = [sys.executable, "-m", "cohort.cli"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*COHORT, *args], capture_output=True, text=True, timeout=timeout)


def _command_paths() -> list[list[str]]:
    import typer

    from cohort.cli import _load_commands, app

    _load_commands()
    paths = []

    def walk(cmd, path: list[str]) -> None:
        paths.append(path)
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def test_help_on_every_command():
    paths = _command_paths()
    assert {"serve", "verify", "health", "list-verifiers"} <= {p[0] for p in paths if p}
    for path in paths:
        r = run(*path, "--help")
        assert r.returncode == 0, (path, r.stderr)
        assert "Usage" in r.stdout


@pytest.fixture()
def records(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    rows = [
        {"group_id": "q1", "prompt": "2+2", "answer": "4", "rollouts": ["<think>a</think><answer>4</answer>", "4"]},
        {"group_id": "q2", "rollouts": [{"completion": "<think>a</think><answer>1</answer><answer>2</answer>", "truncated": True}],
         "options": {"format": {"mode": "soft"}}},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_verify_prints_table_and_totals(format_server, records):
    r = run("verify", str(records), "--endpoint", f"format={format_server.endpoint}")
    assert r.returncode == 0, r.stderr
    assert "q1" in r.stdout and "correct" in r.stdout and "no_answer" in r.stdout
    assert "groups 2  rollouts 3  usable 3  mean reward 0.4444" in r.stdout


def test_verify_json(format_server, records):
    r = run("verify", str(records), "-e", f"format={format_server.endpoint}", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["group_id"], x["index"], x["reward"]) for x in rows] == [("q1", 0, 1.0), ("q1", 1, 0.0), ("q2", 0, pytest.approx(1 / 3))]
    assert rows[2]["verifiers"]["format"]["flags"] == ["multiple_answers"]


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "bad.jsonl:1: not JSON"),
        ('{"rollouts": []}', "rollouts"),
        ('{"rollouts": ["a"], "surprise": 1}', "surprise"),
        ('{"rollouts": ["a"], "answer": "1", "code_tests": {"asserts": []}}', "either answer or code_tests"),
        ("", "holds no records"),
    ],
)
def test_verify_bad_input_exits_2(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    r = run("verify", str(path), "-e", "format=127.0.0.1:9")
    assert r.returncode == 2
    assert message in r.stderr


def test_verify_missing_file_and_bad_flags(tmp_path):
    r = run("verify", str(tmp_path / "nope.jsonl"), "-e", "format=127.0.0.1:9")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run("verify", str(tmp_path / "nope.jsonl"), "-e", "format")
    assert r.returncode == 2 and "expected NAME=VALUE" in r.stderr


def test_verify_unreachable_exits_3(records):
    r = run("verify", str(records), "-e", "format=127.0.0.1:9", "--timeout", "2")
    assert r.returncode == 3
    assert "no endpoint serves verifier 'format'" in r.stderr


def test_health_command(format_server):
    ok = run("health", format_server.endpoint, "--service", "format")
    assert ok.returncode == 0 and "SERVING" in ok.stdout
    bad = run("health", "127.0.0.1:9", "--timeout", "0.5")
    assert bad.returncode == 1


def test_service_code_never_imports_torch():
    """Verifier and sandbox images have no torch: importing the serving path with torch blocked must work."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import cohort.verifiers.hosting.server, cohort.verifiers.client, cohort.verifiers.format, cohort.cli, cohort.cli.serve, cohort.cli.verify\n"
        "from cohort.verifiers import registry\n"
        "for name in ('format', 'math', 'code'):\n"
        "    registry.load(name)\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_generated_stubs_are_current():
    from cohort.protogen import stale_files

    assert stale_files() == []
