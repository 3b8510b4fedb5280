"""What a user sees before and after: ``cohort serve`` says it is starting before its slow start, and ``cohort
verify`` into a pipe prints plain tab-separated lines (the table is for terminals: test_cli_rough_edges.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

COHORT = [sys.executable, "-m", "cohort.cli"]


def test_verify_into_a_pipe_is_plain_lines(format_server, tmp_path):
    path = tmp_path / "rollouts.jsonl"
    detail_maker = "<answer>1</answer><answer>2</answer> <think>x"  # a long detail (several format flags)
    path.write_text(json.dumps({"group_id": "q1", "answer": "4", "rollouts": [
        "<think>a</think><answer>4</answer>", detail_maker]}) + "\n")
    r = subprocess.run([*COHORT, "verify", str(path), "-e", f"format={format_server.endpoint}"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "40"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split("\t") == ["group", "idx", "format", "reward", "detail"]
    rows = [line.split("\t") for line in lines[1:3]]
    assert [row[:2] for row in rows] == [["q1", "0"], ["q1", "1"]]
    assert rows[0][2] == "1 correct" and rows[0][3] == "1"
    assert rows[1][4].startswith("format: ") and rows[1][4].endswith("unbalanced_tags")  # whole, on one line
    assert not any(ch in r.stdout for ch in "│┃━─")  # no box drawing
    assert lines[3].startswith("groups 1  rollouts 2  usable 2  mean reward")  # totals on one line, not wrapped at 40


def test_serve_says_it_is_starting_before_it_serves():
    proc = subprocess.Popen([*COHORT, "serve", "math", "--port", "0"], stderr=subprocess.PIPE, text=True,
                            stdout=subprocess.DEVNULL)
    try:
        first, second = proc.stderr.readline(), proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert "INFO cohort.grpc: starting math on 127.0.0.1 (a free port) ..." in first, first
    assert "serving math on 127.0.0.1:" in second, second  # after the starting line: the verifier loaded since
