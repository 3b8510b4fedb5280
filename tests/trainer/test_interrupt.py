"""An interrupted `cohort train` keeps its work (trainer/interrupt.py): SIGINT (a terminal's Ctrl-C, sent to the
whole foreground process group) or SIGTERM (Kubernetes, sent to the process) finishes the step in flight, saves
it, says in one line where and how to resume, and exits 130 / 143, leaving no process behind; the same command
then resumes from that checkpoint with the rewards of a run never interrupted. A second signal stops at once.

The real command on the embedded task (smaller groups), against real verifier servers on loopback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cohort.rpc.launch import ServiceProcess
from cohort.trainer.checkpoint import Saver
from cohort.trainer.config import RunSection

STEPS = 12


@pytest.fixture(scope="module")
def verifiers():
    with ServiceProcess(["math", "arith"]) as proc:
        yield proc.endpoint


def command(out: Path, endpoint: str, *extra: str) -> list[str]:
    """`cohort train` on the embedded task, its two verifiers (as the default weighs them) at ``endpoint``."""
    return [sys.executable, "-m", "cohort.cli", "train", f"run.output_dir={out}", f"run.max_steps={STEPS}",
            "run.target_reward=null", "run.progress=false", "run.tensorboard=false", "run.plot=false",
            "grpo.num_generations=8",
            f'scoring.verifiers=[{{name: math, weight: 0.8, endpoints: ["{endpoint}"]}}, {{name: arith, weight: 0.2, '
            f'endpoints: ["{endpoint}"], options: {{correct_weight: "0", format_weight: "1", require_eos: "1"}}}}]',
            *extra]


def start(subprocesses, cmd: list[str], marker: str) -> subprocess.Popen:
    """In a session of its own (a terminal's foreground group: tests/conftest.py's ``subprocesses``); ``marker``
    in the environment of it and of everything it starts, to find what is left behind."""
    return subprocesses.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONSAFEPATH": "1", "COHORT_TEST_RUN": marker})


def left_behind(marker: str, wait_s: float = 10.0) -> list[str]:
    """Processes still carrying ``marker`` after up to ``wait_s`` (what a stopped run started stops with it)."""
    needle = f"COHORT_TEST_RUN={marker}".encode()
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and needle in (proc / "environ").read_bytes().split(b"\0"):
                    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    alive.append(f"{proc.name} {cmdline[:120]}")
            except OSError:  # gone, or not ours to read
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def rewards(out: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["reward/mean"]) for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]


def interrupt(proc: subprocess.Popen, out: Path, signum: int, wait_s: float, after_steps: int = 3,
              times: int = 1) -> str:
    """Signal the run ``times`` times once ``after_steps`` steps are logged (SIGINT to its process group, as a
    terminal does; SIGTERM to the process, as Kubernetes does); its output once it exits."""
    metrics = out / "metrics.jsonl"
    until = time.monotonic() + wait_s
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= after_steps):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < until, "the run logged no steps"
        time.sleep(0.02)
    lines = []
    for i in range(times):
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        while i + 1 < times and "finishing the step in flight" not in (lines[-1] if lines else ""):
            lines.append(proc.stdout.readline())  # the first is acknowledged (two at once would count as one)
            assert lines[-1], "".join(lines)
    return "".join(lines) + proc.communicate(timeout=wait_s)[0]


@pytest.fixture(scope="module")
def uninterrupted(verifiers, tmp_path_factory) -> list[tuple[int, float]]:
    out = tmp_path_factory.mktemp("uninterrupted")
    r = subprocess.run(command(out, verifiers), capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert [s for s, _ in rewards(out)] == list(range(1, STEPS + 1))
    return rewards(out)


def stopped(output: str, signum: int, out: Path) -> int:
    """The step the run stopped after, from its last line; checks that line and the rest of what it said."""
    name = signal.Signals(signum).name
    assert f"{name}: finishing the step in flight, then saving a checkpoint and stopping" in output
    assert "Traceback" not in output
    m = re.fullmatch(rf"stopped by {name} after step (\d+) of {STEPS}, saved in (\S+): run the same command again "
                     "to resume from there", output.strip().splitlines()[-1])
    assert m, output
    step = int(m.group(1))
    assert Path(m.group(2)) == out / "checkpoints" / f"step_{step:06d}"
    assert (out / "checkpoints" / f"step_{step:06d}" / "COMPLETE").exists()
    assert [s for s, _ in rewards(out)] == list(range(1, step + 1))
    assert not (out / "final").exists()  # not the end of the run
    return step


def test_an_interrupted_run_saves_its_step_and_resumes_with_the_same_rewards(tmp_path, verifiers, uninterrupted,
                                                                             subprocesses, deadline):
    """Ctrl-C (SIGINT to the process group) mid-run, the same command again, SIGTERM (to the process) mid-run,
    the same command again: every step's rewards are those of the run never interrupted."""
    cmd = command(tmp_path, verifiers)
    stops = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        marker = uuid.uuid4().hex
        proc = start(subprocesses, cmd, marker)
        output = interrupt(proc, tmp_path, signum, deadline(60), after_steps=(stops[-1] if stops else 0) + 3)
        assert proc.returncode == 128 + signum, output  # 130, 143
        stops.append(stopped(output, signum, tmp_path))
        assert stops[-1] < STEPS, output
        assert left_behind(marker) == []
        if len(stops) == 2:
            assert f"resuming run {tmp_path} from step {stops[0]} of {STEPS}" in output
    again = subprocesses.run(cmd, timeout=deadline(60), env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming run {tmp_path} from step {stops[1]} of {STEPS}" in again.stdout
    assert rewards(tmp_path) == uninterrupted  # the same rewards, step for step, as a run never interrupted


def test_an_interrupted_pipelined_run_stops_its_rollout_workers(tmp_path, verifiers, subprocesses, deadline):
    """rollout.max_staleness=1: the learner's rollout workers are processes of their own (a terminal's Ctrl-C
    does not reach them); the learner finishes its step, saves, and stops them. (Resuming a pipelined run:
    tests/trainer/test_pipeline.py.)"""
    marker = uuid.uuid4().hex
    proc = start(subprocesses, command(tmp_path, verifiers, "rollout.max_staleness=1"), marker)
    output = interrupt(proc, tmp_path, signal.SIGINT, deadline(60))
    assert proc.returncode == 130, output
    stopped(output, signal.SIGINT, tmp_path)
    assert left_behind(marker) == []


def test_a_second_interrupt_stops_at_once(tmp_path, verifiers, subprocesses, deadline):
    """Two Ctrl-Cs: the second, sent once the first is acknowledged, stops the run in the step in flight (steps
    of longer completions here, so that the step is still in flight), without a traceback or a process left."""
    marker = uuid.uuid4().hex
    proc = start(subprocesses, command(tmp_path, verifiers, "rollout.max_completion_length=32",
                                       "grpo.num_generations=32"), marker)
    output = interrupt(proc, tmp_path, signal.SIGINT, deadline(60), after_steps=1, times=2)
    assert proc.returncode == 130, output
    assert "SIGINT again: stopping now; the step in flight is not saved" in output
    assert "Traceback" not in output and "stopped by SIGINT after step" not in output
    assert left_behind(marker) == []


def test_checkpoints_are_timed_by_default():
    """With no step interval, a checkpoint is due once run.save_every_s (600 s by default) has passed."""
    run = RunSection()
    assert run.save_every == 0 and run.save_every_s == 600
    saver = Saver(run)
    assert not saver.due(1)
    saver.since -= 601
    assert saver.due(2)
    assert Saver(RunSection(save_every=5, save_every_s=0)).due(5)
    assert not Saver(RunSection(save_every=5, save_every_s=0)).due(6)
