"""README.md stays true: its client example runs as written, its links resolve inside the repository,
and every ``cohort`` command line in its shell blocks names a real subcommand with real flags."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
COHORT = [sys.executable, "-m", "cohort.cli"]


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def test_client_example_prints_what_it_says():
    from cohort.rpc.launch import ServiceProcess

    (code,) = [b for b in blocks("python") if "VerifierClient" in b]
    expected = [line[2:].split()[:4] for line in code.splitlines() if re.match(r"# \d", line)]
    assert len(expected) == 2
    with ServiceProcess(["format", "math"]) as proc:
        run = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:50051", proc.endpoint)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert [line.split() for line in run.stdout.splitlines()] == expected


def test_links_resolve_inside_the_repository():
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", README)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    for target in local:
        path = (ROOT / target).resolve()
        assert path.is_relative_to(ROOT), f"README links outside the repository: {target}"
        assert path.exists(), f"README links to a missing file: {target}"


TOP = ("bench", "cli", "conformance", "integrations", "rpc", "deploy", "docs", "examples", "proto", "sandbox", "scripts", "tests", "trainer", "verifiers", ".ci")


def test_paths_it_names_exist_inside_the_repository():
    """Every backticked repository path exists (globs allowed); nothing points outside the checkout."""
    named = set(re.findall(r"`(\.{0,2}/?[\w.*-]+(?:/[\w.*-]+)+/?)`", README))
    outside = sorted(p for p in named if p.startswith("../"))  # absolute paths are system paths (/etc/...)
    assert outside == [], f"README names files outside the repository: {outside}"
    generated = {"bench/wheels/"}  # filled by `bench/gpu_check.sh --fetch-wheels`, not committed
    # a path is a folder (`trainer/`) or a file with an extension; `cohort/unusable_frac` is a metric name
    paths = {p for p in named - generated if p.split("/")[0] in TOP and (p.endswith("/") or "." in p.rsplit("/", 1)[1])}
    missing = sorted(p for p in paths if not list(ROOT.glob(p.rstrip("/"))))
    assert missing == [], f"README names missing files: {missing}"
    for doc in set(re.findall(r"\b([A-Z]+\.md)\b", README)) - {"WORKLOAD.md"}:  # WORKLOAD.md: of the shared TRL workload
        assert (ROOT / doc).exists() or list(ROOT.glob(f"*/{doc}")), f"README mentions {doc}, which does not exist"


def _cohort_lines() -> list[list[str]]:
    lines = []
    for block in blocks("bash"):
        for raw in block.replace("\\\n", " ").splitlines():
            words, command = [], []
            for word in shlex.split(raw, comments=True) + [";"]:
                if word in ("&&", "||", ";", "|") or word.endswith(";"):
                    if command and command[0].lstrip("(").endswith("cohort") and len(command) > 1:
                        words.append(command)
                    command = []
                else:
                    command.append(word.lstrip("(") if not command else word.rstrip(")"))
            lines.extend(words)
    return lines


def _help(path: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*COHORT, *path, "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "TERM": "dumb"})


@pytest.mark.parametrize("words", _cohort_lines(), ids=lambda w: " ".join(w[:3]))
def test_cohort_command_lines_use_real_subcommands_and_flags(words):
    path = [words[1]]
    helptext = _help(path)
    assert helptext.returncode == 0, f"`cohort {path[0]}` is not a command: {helptext.stderr[-300:]}"
    if "Commands" in helptext.stdout and len(words) > 2:  # a command group: the next word is its command
        path.append(words[2])
        helptext = _help(path)
        assert helptext.returncode == 0, f"`cohort {' '.join(path)}` is not a command"
    for flag in (w.split("=", 1)[0] for w in words[1 + len(path):] if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helptext.stdout), \
            f"`cohort {' '.join(path)}` has no option {flag}"
