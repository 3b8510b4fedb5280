"""Issue 15's newcomer rough edges in serve / health / verify / --help: real commands in subprocesses,
real servers on loopback. Each error is one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

COHORT = [sys.executable, "-m", "cohort.cli"]


def run(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*COHORT, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def errors(r: subprocess.CompletedProcess) -> list[str]:
    """stderr without the server's log lines (``... INFO cohort.grpc: starting format on ...``)."""
    return [line for line in r.stderr.splitlines() if " INFO cohort." not in line]


@pytest.fixture()
def taken_port():
    """A loopback port with a listener on it (what `cohort serve` finds when another server runs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("what", ["format", "sandbox", "metrics"])
def test_serve_on_a_port_in_use_says_so_in_one_line(taken_port, what):
    args = {"format": ["format", "--port", str(taken_port)],
            "sandbox": ["sandbox", "--port", str(taken_port)],
            "metrics": ["format", "--port", "0", "--metrics-port", str(taken_port)]}[what]
    r = run("serve", *args)
    assert r.returncode == 1, r.stderr
    where = f"127.0.0.1:{taken_port}" + (" (--metrics-port)" if what == "metrics" else "")
    assert errors(r) == [f"cohort serve: cannot bind {where}: address in use "
                                     "(pick another port; 0 picks a free one)"], r.stderr


def test_serve_on_an_address_not_of_this_machine():
    r = run("serve", "format", "--host", "192.0.2.1", "--port", "50051")  # TEST-NET-1: never local
    assert r.returncode == 1
    assert errors(r) == ["cohort serve: cannot bind 192.0.2.1:50051: not an address of this machine"]


def test_health_of_an_unknown_service_names_what_the_server_serves(format_server):
    r = run("health", format_server.endpoint, "--service", "nope")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"{format_server.endpoint}: service 'nope' is unknown to this server "
        "(it serves: format, grpo.verifier.v1.VerifierService)"]
    assert "2 the server does not know SERVICE" in " ".join(run("health", "--help").stdout.split())


def _all_help() -> dict[str, tuple[str, set[str]]]:
    """Every command's help text (docstring and parameter help) and its option names, by command path."""
    import typer

    from cohort.cli import _load_commands, app

    _load_commands()
    found = {}

    def walk(cmd, path: str) -> None:
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        found[path] = (" ".join(texts), {o for p in cmd.params for o in p.opts if o.startswith("-")})
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def test_help_only_mentions_commands_and_options_that_exist():
    helps = _all_help()
    assert "cohort list-verifiers" in helps["serve"][0]
    mentions = 0
    for path, (text, _) in helps.items():
        for m in re.finditer(r"cohort ([a-z][a-z-]*(?: [a-z][a-z-]*)*)((?: --[a-z-]+)*)", text):
            words = m.group(1).split()
            prefixes = [" ".join(words[:n]) for n in range(len(words), 0, -1)]
            command = next((p for p in prefixes if p in helps), None)
            assert command is not None, f"`cohort {path}` help mentions `{m.group(0)}`: no such command"
            for option in m.group(2).split():
                assert option in helps[command][1], f"`cohort {path}` help mentions `{m.group(0)}`: no {option}"
            mentions += 1
    assert mentions >= 2  # the check did look at something


def on_terminal(*args: str, columns: int) -> tuple[int, str]:
    """``cohort ARGS`` with its stdout on a pseudo-terminal ``columns`` wide (what a user at one sees; TERM=dumb:
    no colour codes); its exit code and that text."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([*COHORT, *args], stdout=follower, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb"})
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=120), b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize("columns", [80, 200])
def test_verify_table_keeps_whole_words_of_long_details(format_server, tmp_path, columns):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps({"group_id": "q1", "answer": "4", "rollouts": [
        "<think>a</think><answer>4</answer>", "<answer>1</answer><answer>2</answer> <think>x"]}) + "\n")
    as_json = run("verify", str(path), "-e", f"format={format_server.endpoint}", "--json")
    full = json.loads(as_json.stdout.splitlines()[1])
    detail = "format: " + full["verifiers"]["format"]["detail"]
    assert len(detail) > 80 and detail.endswith("unbalanced_tags")  # longer than the old cut
    code, stdout = on_terminal("verify", str(path), "-e", f"format={format_server.endpoint}", columns=columns)
    assert code == 0, stdout
    body = [line for line in stdout.splitlines() if line.startswith("│")]
    assert body and all(len(line) <= columns for line in stdout.splitlines())
    cells = [line.split("│")[-2].strip() for line in body]  # the detail column, wrapped rows in order
    shown = " ".join(c for c in cells if c)
    assert shown.endswith(detail), shown  # every word, none cut, none lost


def test_serve_rejects_an_unknown_log_level_in_one_line():
    r = run("serve", "format", "--log-level", "chatty")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["cohort serve: --log-level 'chatty' is not one of DEBUG, INFO, WARNING, ERROR"]


def test_train_finds_its_embedded_default_outside_the_checkout(tmp_path):
    """The default config is package data of cohort.trainer, not a `trainer` folder in the working directory."""
    r = subprocess.run([*COHORT, "train", "--print-config"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(embedded) trainer/default.yaml" in r.stdout and "output_dir: runs/embedded" in r.stdout
