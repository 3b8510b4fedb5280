"""Asynchronous pipeline vs the lock-step loop on the embedded task: same seed, same steps, side by side.

``--config FILE`` trains another task instead of the embedded one (``examples/smollm2-add.yaml``: SmolLM2-135M,
where generating is most of a step); its verifiers are the ones wrapped in the ``slow`` scenario.

Modes: ``sync`` is ``rollout.max_staleness=0`` (generate, score, update in one process); ``async`` is
``rollout.max_staleness=1 rollout.workers=1`` (one rollout worker process generates while the learner
updates; groups at most one weight version old; ``--staleness K`` for K). Scenarios:

1. ``instant``: the embedded default's verifiers (``cohort serve math`` and ``cohort serve arith``, started
   by ``cohort train`` itself on loopback);
2. ``slow``: the same two verifiers (the real :class:`MathVerifier` and :class:`ArithVerifier`) wrapped so
   that ``verify_group`` first sleeps ``--verifier-latency-s``, served by this bench from two small
   server processes on 127.0.0.1 and given to the trainer as ``endpoints``. A call's groups are scored in
   parallel threads, so one scoring call takes about the latency. Default latency: the ``instant`` sync
   run's mean generation time per generate call (``time/generate_s / rollout.generation_chunks``), i.e. a
   verifier as slow as the generator;
3. ``code`` (``--scenarios ... code``): code rows through the sandbox. The embedded task's rows plus the
   generated ``code_functions`` rows (``examples/data/code-functions/train.jsonl``, as plain prompts: the tiny
   model has no chat template), scored by ``cohort serve code`` (the real sandbox, started by ``cohort train``)
   beside the embedded ``math`` and ``arith``. The tiny model writes no working code, so those rows score 0 and
   teach nothing: what they add is the sandbox's latency and CPU on every step that draws one.

Before the runs the verifiers of each scenario are timed with the trainer's own client (one chunk-sized
call, ``P / generation_chunks`` prompts x G completions, median of 7), printed next to the generation time.

Reported per scenario and mode: wall-clock (the last record's ``time/elapsed_s``; ``start-up`` is the part
before the first step began: the rollout worker's spawn and model build), mean ``time/step_s``, final reward
(mean ``reward/mean`` of the last 5 steps), the 1-minute load average before and after the run (``load``:
other jobs on the machine show there), idle fractions (sync: ``verify/idle_frac``; async:
``async/learner_idle_frac`` and ``async/generator_idle_frac``), staleness mean/max, groups dropped as too
stale, and the key ratio: the wall-clock at which async's reward, smoothed over 5 steps, first reaches the
sync run's final reward, over the sync run's total wall-clock (also without either run's start-up). The
smoothed reward curves are printed every ``--curve-every`` steps; everything goes to ``<out>/report.json``.
Two floors bound that ratio from below: the *learner floor* (the share of the sync run's seconds per step left
without its generation, ``time/generate_s``, its wait for the verifiers, ``verify/idle_s``, and, when the async
run's rollout workers compute the reference's log-probs, its ``time/logprobs_s``: the learner's own work of
update, advantages and logging, which both modes do one step after another) and the *CPU
floor* (the machine's busy CPU-seconds during the sync run, from ``/proc/stat``, over its CPUs times the run's
seconds: the same CPU work cannot finish sooner, however it is overlapped). ``CPU s`` per run is that
machine-wide figure, so other jobs show there too.
With ``--seeds A B ...`` each mode runs once per seed and every figure is the mean over the seeds (the curve:
the per-step mean reward, smoothed; the wall-clock: the per-step mean elapsed time), since one seed's
reward on the embedded task moves by several hundredths from step to step.
It is a report, not a test: exit 0 when every run succeeded, else 1 with a one-line error.

    .venv/bin/python bench/async_vs_sync.py [--steps 60] [--seed 0] [--verifier-latency-s S] [--staleness K]
        [--scenarios instant slow code] [--config FILE] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 5  # steps in the final reward and in the smoothed curve
CPUS = os.cpu_count() or 1
MODES = {"sync": {"max_staleness": 0}, "async": {"max_staleness": 1, "workers": 1}}
PROBE_CALLS = 7
BASE: Path | None = None  # --config: the task under the runs (None: the embedded default)


def base_config():
    """The task the runs train (``--config`` over the embedded default), as the trainer reads it."""
    from cohort.trainer.config import load_config

    return load_config(BASE)


def base_tree() -> dict:
    """``--config``'s YAML with its data paths made absolute (the runs start in their own folders)."""
    if BASE is None:
        return {}
    tree = yaml.safe_load(BASE.read_text()) or {}
    for source in tree.get("data", {}).get("sources", []):
        if "path" in source and not Path(source["path"]).is_absolute():
            source["path"] = str(Path(source["path"]).resolve())
    return tree

# The slow verifier's server: one real verifier, its verify_group delayed. argv: name latency_s port_file.
# Health, drain on SIGTERM and on the launcher's exit (COHORT_PARENT_FD) are the real server's.
SLOW_SERVER = """
import asyncio, sys, time
from pathlib import Path
from cohort.rpc.runtime import RuntimeOptions, configure_logging
from cohort.verifiers.arith import ArithVerifier
from cohort.verifiers.math import MathVerifier
from cohort.verifiers.hosting.server import serve

from cohort.verifiers.base import VerifierBase

class Slow(VerifierBase):
    def __init__(self, inner, latency_s):
        self.inner, self.latency_s = inner, latency_s
        self.max_concurrency, self.options = inner.max_concurrency, inner.options
        self.name, self.version = inner.name, inner.version
        self.description = f"{inner.description} (after sleeping {latency_s:g} s)"
        self.reference_kinds = inner.reference_kinds

    def verify_group(self, group, ctx):
        time.sleep(self.latency_s)
        return self.inner.verify_group(group, ctx)

    def ready(self):
        return self.inner.ready()

    def close(self):
        self.inner.close()

name, latency_s, port_file = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
configure_logging("WARNING")
inner = {"math": MathVerifier, "arith": ArithVerifier}[name]()
asyncio.run(serve({name: Slow(inner, latency_s)}, RuntimeOptions(host="127.0.0.1", port=0, port_file=port_file)))
"""


class BenchError(RuntimeError):
    """A run or a server that failed: reported as one line, exit code 1."""


# ---- the slow verifiers --------------------------------------------------------------------------


class SlowVerifiers:
    """One SLOW_SERVER process per verifier name on 127.0.0.1; ``endpoints`` once entered; stopped on exit
    (SIGTERM, then SIGKILL of its process group), and by themselves when this process dies (a lifeline pipe)."""

    def __init__(self, names: list[str], latency_s: float, log_dir: Path) -> None:
        self.names, self.latency_s, self.log_dir = names, latency_s, log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.endpoints: dict[str, str] = {}
        self._lifelines: list[int] = []
        self._logs: list = []

    def __enter__(self) -> SlowVerifiers:
        try:
            for name in self.names:
                self._start(name)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, name: str, timeout_s: float = 120.0) -> None:
        from cohort.rpc.health import SERVING, health_status
        from cohort.rpc.runtime import PARENT_FD_ENV

        port_file = self.log_dir / f"slow-{name}.port"
        port_file.unlink(missing_ok=True)
        log_path = self.log_dir / f"slow-{name}.log"
        log = open(log_path, "ab")
        self._logs.append(log)
        watch, lifeline = os.pipe()  # the server drains once this process is gone, however it died
        self._lifelines.append(lifeline)
        env = {**os.environ, "PYTHONSAFEPATH": "1", PARENT_FD_ENV: str(watch)}
        proc = subprocess.Popen([sys.executable, "-c", SLOW_SERVER, name, repr(self.latency_s), str(port_file)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                pass_fds=(watch,), cwd=self.log_dir)
        os.close(watch)
        self.procs[name] = proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BenchError(f"slow {name} server exited with {proc.returncode}: {_last_line(log_path)} "
                                 f"(log {log_path})")
            if port_file.exists() and port_file.read_text().strip():
                endpoint = f"127.0.0.1:{int(port_file.read_text())}"
                try:
                    if health_status(endpoint, timeout_s=1.0) == SERVING:
                        self.endpoints[name] = endpoint
                        return
                except Exception:  # noqa: BLE001 - not up yet
                    pass
            time.sleep(0.05)
        raise BenchError(f"slow {name} server not SERVING after {timeout_s:.0f}s (log {log_path})")

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # drain
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc.pid)  # and whatever it started (the math worker pool)
            proc.wait()
        for fd in self._lifelines:
            os.close(fd)
        for log in self._logs:
            log.close()
        self.procs, self._lifelines, self._logs = {}, [], []


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


# ---- probing a scenario's verifiers ----------------------------------------------------------------


def probe_latency(endpoints: dict[str, list[str]] | None) -> float:
    """Median seconds of one chunk-sized scoring call through the trainer's :class:`Scorer` (the embedded
    default's verifiers, weights and options); ``endpoints`` None: ``cohort serve`` processes started here."""
    from cohort.trainer.scoring import Scorer
    from cohort.verifiers.records import Task

    cfg = base_config()
    p, g = -(-cfg.grpo.prompts_per_step // cfg.rollout.generation_chunks), cfg.grpo.num_generations
    tasks = [Task.with_answer(f"{i}+2=", str(i + 2)) for i in range(p)]
    texts = [["3", "4", "12", "x", "5 ", "", "6", "-1"][j % 8] for j in range(p * g)]

    def timed(eps: dict[str, list[str]]) -> float:
        scorer = Scorer(cfg.scoring, eps)
        try:
            scorer.submit(tasks, texts, [False] * len(texts)).result()  # warm-up (connections, math pool)
            seconds = []
            for _ in range(PROBE_CALLS):
                t = time.perf_counter()
                scorer.submit(tasks, texts, [False] * len(texts)).result()
                seconds.append(time.perf_counter() - t)
            return statistics.median(seconds)
        finally:
            scorer.close()

    if endpoints is not None:
        return timed(endpoints)
    from cohort.rpc.launch import LocalServices

    names = [v.name for v in cfg.scoring.verifiers]
    with LocalServices(names, extra_args={n: ["--log-level", "WARNING"] for n in names}) as started:
        return timed({n: [e] for n, e in started.items()})


# ---- the runs --------------------------------------------------------------------------------------


def write_config(path: Path, out_dir: Path, mode: str, steps: int, seed: int,
                 endpoints: dict[str, str] | None, extra: dict | None = None) -> Path:
    """The embedded default (or ``--config``), layered: the mode's rollout keys, no early stop, no plot/TensorBoard,
    and (slow scenario) the task's verifiers with the bench's endpoints, or (code scenario) ``extra``."""
    from cohort.trainer.config import layer as layered

    layer: dict = {
        "rollout": dict(MODES[mode]),
        "run": {"output_dir": str(out_dir), "max_steps": steps, "seed": seed, "target_reward": None,
                "resume": False, "tensorboard": False, "plot": False, "progress": True, "log_every": 25},
    }
    if endpoints is not None:
        specs = base_config().scoring.verifiers  # names, weights, options as the task has them
        layer["scoring"] = {"local_services": False, "verifiers": [
            {"name": v.name, "weight": v.weight, "kind": v.kind, "options": dict(v.options),
             "endpoints": [endpoints[v.name]]} for v in specs]}
    layer |= extra or {}
    path.write_text(yaml.safe_dump(layered(base_tree(), layer), sort_keys=False))
    return path


def busy_cpu_s() -> float | None:
    """CPU-seconds this machine has spent busy since boot, all CPUs together (``/proc/stat``: every column but
    idle and iowait); None where there is no ``/proc/stat``. Machine-wide, so that a run's verifier servers,
    sandbox processes and rollout workers count however they were reaped; other jobs count too (see ``load``)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def run_trainer(label: str, config: Path, log_path: Path, timeout_s: float, metrics: Path, steps: int) -> dict:
    """``cohort train --config`` in its own process group (killed with its children on error or timeout).
    Returns the seconds the process ran (``process_s``), the machine's busy CPU-seconds meanwhile (``cpu_s``,
    :func:`busy_cpu_s`), and the same over its training only (``train_cpu_s`` over ``train_s``: from the first
    step's record in ``metrics`` to the last one's, so start-up and shut-down are left out; None where
    ``/proc/stat`` is missing). A non-zero exit is a :class:`BenchError`."""
    metrics.unlink(missing_ok=True)  # an earlier run's records into the same --out would open the window early
    started, cpu_before = time.monotonic(), busy_cpu_s()
    env = {**os.environ, "PYTHONSAFEPATH": "1", "HF_HUB_OFFLINE": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cohort.cli", "train", "--config", str(config)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                cwd=config.parent)
        try:
            window = _watch_training(proc, metrics, steps, started + timeout_s)
            rc = proc.wait(timeout=max(0.0, started + timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            raise BenchError(f"{label}: cohort train still running after {timeout_s:.0f}s (log {log_path})") from None
        except BaseException:
            _stop_group(proc)
            raise
    if rc != 0:
        raise BenchError(f"{label}: cohort train exited {rc}: {_last_line(log_path)} (log {log_path})")
    cpu_after = busy_cpu_s()
    out = {"process_s": time.monotonic() - started,
           "cpu_s": None if cpu_before is None or cpu_after is None else cpu_after - cpu_before,
           "train_s": None, "train_cpu_s": None}
    if window is not None:
        (t0, c0), (t1, c1) = window
        out |= {"train_s": t1 - t0, "train_cpu_s": c1 - c0}
    return out


def _watch_training(proc: subprocess.Popen, metrics: Path, steps: int, deadline: float):
    """Polls ``metrics`` (flushed every step) while ``proc`` runs: (monotonic time, busy CPU-seconds) when its
    first record appears and when its ``steps``-th does, or None when either is missed (the process ended
    first, no ``/proc/stat``). Every 20 ms: a step of the embedded task takes 60-70 ms, a run thousands of
    them, so the window's ends are off by well under 1 %."""
    seen, offset, first = 0, 0, None
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with open(metrics, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        seen += chunk.count(b"\n")
        if seen >= steps:  # a window opened at an earlier poll, or none (every step written between two polls)
            last = (time.monotonic(), busy_cpu_s())
            return None if first is None or first[1] is None or last[1] is None else (first, last)
        if seen >= 1 and first is None:
            first = (time.monotonic(), busy_cpu_s())
        time.sleep(0.02)
    return None


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the trainer's process group (its rollout workers), then SIGKILL; its local verifier
    services watch its lifeline and stop by themselves."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    _kill_group(proc.pid)
    proc.wait()


# ---- the figures -------------------------------------------------------------------------------------


def combine(runs: list[dict]) -> dict:
    """Several seeds of one mode as one run: per-step mean rewards and elapsed times (the curve and the
    wall-clock the comparison reads), means of the other figures, the largest staleness, the load range."""
    if len(runs) == 1:
        return runs[0]
    out: dict = {"mode": runs[0]["mode"], "steps": runs[0]["steps"], "seeds": runs}
    for key in runs[0]:
        if key in out or key in ("rewards", "smoothed", "elapsed_s", "load_avg_1min"):
            continue
        values = [r.get(key) for r in runs]
        out[key] = max((v for v in values if _finite(v)), default=None) if key == "staleness_max" else _mean(values)
    out["rewards"] = [_mean(step) for step in zip(*(r["rewards"] for r in runs))]
    out["smoothed"] = smoothed(out["rewards"])
    out["elapsed_s"] = [statistics.fmean(step) for step in zip(*(r["elapsed_s"] for r in runs))]
    out["wall_s"] = out["elapsed_s"][-1]
    out["final_reward"] = _mean(out["rewards"][-WINDOW:])
    out["final_rewards"] = [r["final_reward"] for r in runs]
    out["load_avg_1min"] = [min(r["load_avg_1min"][0] for r in runs), max(r["load_avg_1min"][1] for r in runs)]
    return out


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _mean(xs) -> float | None:
    xs = [x for x in xs if _finite(x)]
    return statistics.fmean(xs) if xs else None


def smoothed(rewards: list[float | None]) -> list[float | None]:
    """Trailing mean over WINDOW steps (fewer at the start; steps without a reward left out)."""
    return [_mean(rewards[max(0, i - WINDOW + 1) : i + 1]) for i in range(len(rewards))]


def first_reaching(records: list[dict], curve: list[float | None], target: float | None) -> dict | None:
    """The first step whose smoothed reward (a full window) is at least ``target``: step and elapsed seconds."""
    if target is None:
        return None
    for i, value in enumerate(curve):
        if i >= WINDOW - 1 and value is not None and value >= target - 1e-12:
            return {"step": records[i]["step"], "elapsed_s": records[i]["time/elapsed_s"]}
    return None


def summarise(mode: str, records: list[dict], chunks: int, process: dict) -> dict:
    """One run's figures from its records and :func:`run_trainer`'s ``process`` (seconds and CPU-seconds)."""
    # NaN (no usable rollout that step): None, left out of every mean
    rewards = [r.get("reward/mean") if _finite(r.get("reward/mean")) else None for r in records]
    first = records[0]
    cpu_s, train_cpu_s = process.get("cpu_s"), process.get("train_cpu_s")
    out = {
        "mode": mode, "steps": len(records), "process_s": round(process["process_s"], 2),
        "cpu_s": None if cpu_s is None else round(cpu_s, 2),
        "cpu_busy_frac": None if cpu_s is None else cpu_s / (CPUS * process["process_s"]),
        # the same over the training only (first record to last): what the CPU floor reads
        "train_busy_frac": None if train_cpu_s is None else train_cpu_s / (CPUS * process["train_s"]),
        "wall_s": records[-1]["time/elapsed_s"],
        "startup_s": max(0.0, first["time/elapsed_s"] - first["time/step_s"]),
        "s_per_step": _mean(r["time/step_s"] for r in records),
        "final_reward": _mean(rewards[-WINDOW:]),
        "verify_idle_frac": _mean(r.get("verify/idle_frac") for r in records),
        "verify_idle_s": _mean(r.get("verify/idle_s") for r in records),
        "generate_s": _mean(r.get("time/generate_s") for r in records),
        "update_s": _mean(r.get("time/update_s") for r in records),
        "logprobs_s": _mean(r.get("time/logprobs_s") for r in records),
        "rewards": rewards, "smoothed": smoothed(rewards),
        "elapsed_s": [r["time/elapsed_s"] for r in records],
    }
    if mode == "sync":
        later = records[1:] or records  # the first step also warms up
        out["generate_call_s"] = _mean(r.get("time/generate_s", 0.0) / chunks for r in later)
    else:
        out |= {
            "learner_idle_frac": _mean(r.get("async/learner_idle_frac") for r in records),
            "generator_idle_frac": _mean(r.get("async/generator_idle_frac") for r in records),
            "staleness_mean": _mean(r.get("async/staleness_mean") for r in records),
            "staleness_max": max((r["async/staleness_max"] for r in records if _finite(r.get("async/staleness_max"))),
                                 default=None),
            "dropped_stale": records[-1].get("async/dropped_stale"),
        }
    return out


def compare(sync: dict, other: dict) -> dict:
    """When ``other`` first reaches the sync run's final reward (smoothed), as a share of sync's wall-clock."""
    target = sync["final_reward"]
    records = [{"step": i + 1, "time/elapsed_s": t} for i, t in enumerate(other["elapsed_s"])]
    own = [{"step": i + 1, "time/elapsed_s": t} for i, t in enumerate(sync["elapsed_s"])]
    hit = first_reaching(records, other["smoothed"], target)
    sync_hit = first_reaching(own, sync["smoothed"], target)
    out = {"target_reward": target, "async_reaches_at": hit, "sync_reaches_at": sync_hit,
           "ratio": None, "ratio_without_startup": None, "speedup_s_per_step": None}
    if hit is not None and sync["wall_s"] > 0:
        out["ratio"] = hit["elapsed_s"] / sync["wall_s"]
        busy = sync["wall_s"] - sync["startup_s"]
        if busy > 0:
            out["ratio_without_startup"] = (hit["elapsed_s"] - other["startup_s"]) / busy
    if sync["s_per_step"] and other["s_per_step"]:
        out["speedup_s_per_step"] = sync["s_per_step"] / other["s_per_step"]
    # A pipeline hides waiting, not CPU work: doing sync's CPU-seconds of training on this machine's CPUs takes
    # at least this share of sync's own training, however the work is overlapped (the whole process's share,
    # start-up included, where the training's own was not measured)
    busy = sync.get("train_busy_frac")
    out["cpu_floor"] = busy if busy is not None else sync.get("cpu_busy_frac")
    out["cpu_floor_over"] = "training" if busy is not None else "whole process"
    # What the pipeline can hide of a sync step is its generation and its wait for the verifiers, and its reference
    # log-probs when the async run's workers compute them (its learner then times none); the rest is the learner's
    # own work (update, advantages, logging, other log-probs), done in both modes one step after another.
    hideable = (sync.get("generate_s") or 0.0) + (sync.get("verify_idle_s") or 0.0)
    out["reference_on_workers"] = other.get("logprobs_s") == 0.0 and bool(sync.get("logprobs_s"))
    if out["reference_on_workers"]:
        hideable += sync["logprobs_s"]
    out["learner_floor"] = 1.0 - hideable / sync["s_per_step"] if hideable and sync["s_per_step"] else None
    return out


def _f(x, fmt: str = ".3f", none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def table(scenario: dict) -> list[str]:
    head = (f"{'mode':<10}{'steps':>6}{'wall s':>9}{'start-up s':>11}{'s/step':>8}{'final reward':>13}"
            f"{'verify idle':>12}{'learner idle':>13}{'gen idle':>9}{'stale mean/max':>15}{'dropped':>8}{'load':>11}"
            f"{'CPU s':>8}{'CPU busy':>9}{'train busy':>11}")
    lines = [head]
    for mode in MODES:
        r = scenario["runs"][mode]
        stale = "-" if mode == "sync" else f"{_f(r['staleness_mean'], '.2f')}/{_f(r['staleness_max'], '.0f')}"
        label = "sync" if mode == "sync" else f"async k={MODES[mode]['max_staleness']}"
        lines.append(
            f"{label:<10}{r['steps']:>6}{_f(r['wall_s'], '.1f'):>9}{_f(r['startup_s'], '.1f'):>11}"
            f"{_f(r['s_per_step']):>8}{_f(r['final_reward'], '.4f'):>13}{_f(r['verify_idle_frac'], '.2f'):>12}"
            f"{_f(r.get('learner_idle_frac'), '.2f'):>13}{_f(r.get('generator_idle_frac'), '.2f'):>9}"
            f"{stale:>15}{_f(r.get('dropped_stale'), '.0f'):>8}"
            f"{'%.1f-%.1f' % tuple(r['load_avg_1min']):>11}{_f(r.get('cpu_s'), '.1f'):>8}"
            f"{_f(r.get('cpu_busy_frac'), '.2f'):>9}{_f(r.get('train_busy_frac'), '.2f'):>11}")
    for mode in MODES:
        r = scenario["runs"][mode]
        if "final_rewards" in r:
            lines.append(f"  {mode} per seed: final reward " + ", ".join(_f(x, ".4f") for x in r["final_rewards"]) +
                         "; wall s " + ", ".join(_f(x["wall_s"], ".1f") for x in r["seeds"]))
    c = scenario["comparison"]
    target = _f(c["target_reward"], ".4f")
    if c["async_reaches_at"] is None:
        lines.append(f"async reaches sync's final reward {target} (smoothed over {WINDOW} steps): not reached")
    else:
        at = c["async_reaches_at"]
        lines.append(f"async reaches sync's final reward {target} (smoothed over {WINDOW} steps) at step {at['step']}, "
                     f"{at['elapsed_s']:.1f} s: {c['ratio']:.2f} x sync's wall-clock "
                     f"({_f(c['ratio_without_startup'], '.2f')} x without either run's start-up)")
    if c.get("learner_floor") is not None:
        moved = ", and its reference log-probs (async's workers compute them)" if c.get("reference_on_workers") else ""
        lines.append(f"  learner floor: {c['learner_floor']:.2f} x sync's s/step is what is left of its step without its "
                     f"generation and its wait for the verifiers{moved}: the learner's own work, which no overlap hides")
    if c.get("cpu_floor") is not None:
        lines.append(f"  CPU floor: sync's {c['cpu_floor_over']} kept the {CPUS} CPUs {c['cpu_floor']:.0%} busy, so its CPU work cannot "
                     f"take less than {c['cpu_floor']:.2f} x its wall-clock on this machine, however it is overlapped")
    s = c["sync_reaches_at"]
    lines.append(f"  (sync itself first reaches it at step {s['step']}, {s['elapsed_s']:.1f} s; "
                 f"s/step sync / async = {_f(c['speedup_s_per_step'], '.2f')})" if s else
                 f"  (s/step sync / async = {_f(c['speedup_s_per_step'], '.2f')})")
    return lines


def curves(scenario: dict, every: int) -> list[str]:
    n = max(len(r["smoothed"]) for r in scenario["runs"].values())
    steps = list(range(every, n + 1, every)) or [n]
    if steps[-1] != n:
        steps.append(n)
    lines = [f"smoothed reward (mean of {WINDOW}) at step " + " ".join(f"{s:>6}" for s in steps)]
    for mode, r in scenario["runs"].items():
        values = [r["smoothed"][s - 1] if s <= len(r["smoothed"]) else None for s in steps]
        lines.append(f"{mode:>35} " + " ".join(f"{_f(v, '.3f'):>6}" for v in values))
    return lines


# ---- main ----------------------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> dict:
    cfg = base_config()
    chunks = cfg.rollout.generation_chunks
    names = [v.name for v in cfg.scoring.verifiers]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "steps": args.steps, "seeds": args.seeds,
        "config": str(BASE) if BASE else "(embedded)",
        "cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg(), "out": str(out),
        "modes": {m: {f"rollout.{k}": v for k, v in kv.items()} for m, kv in MODES.items()}, "scenarios": {},
    }

    def run_scenario(name: str, endpoints: dict[str, str] | None, note: str, extra: dict | None = None) -> dict:
        scenario: dict = {"note": note, "runs": {}}
        for mode in MODES:
            per_seed = []
            for seed in args.seeds:
                run_dir = out / name / mode / f"seed{seed}" if len(args.seeds) > 1 else out / name / mode
                run_dir.mkdir(parents=True, exist_ok=True)
                config = write_config(run_dir / "config.yaml", run_dir / "run", mode, args.steps, seed, endpoints,
                                      extra)
                print(f"[{name}/{mode}/seed {seed}] cohort train --config {config}", flush=True)
                load_before = os.getloadavg()[0]
                process = run_trainer(f"{name}/{mode}", config, run_dir / "train.log", args.run_timeout,
                                      run_dir / "run" / "metrics.jsonl", args.steps)
                load_after = os.getloadavg()[0]
                metrics = run_dir / "run" / "metrics.jsonl"
                records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
                if len(records) != args.steps:
                    raise BenchError(f"{name}/{mode}: {len(records)} steps in {metrics}, not {args.steps}")
                per_seed.append(summarise(mode, records, chunks, process) | {
                    "seed": seed, "load_avg_1min": [round(load_before, 2), round(load_after, 2)]})
            scenario["runs"][mode] = combine(per_seed)
        scenario["comparison"] = compare(scenario["runs"]["sync"], scenario["runs"]["async"])
        return scenario

    report["generate_call_s"] = report["verifier_latency_s"] = None
    if "instant" in args.scenarios:
        instant_probe = probe_latency(None)
        report["scenarios"]["instant"] = run_scenario(
            "instant", None, "the embedded default's verifiers, started by cohort train")
        report["scenarios"]["instant"]["verify_call_s"] = instant_probe
        report["generate_call_s"] = report["scenarios"]["instant"]["runs"]["sync"]["generate_call_s"]
    if "slow" in args.scenarios:
        latency = args.verifier_latency_s if args.verifier_latency_s is not None else \
            round(report["generate_call_s"], 4)
        report["verifier_latency_s"] = latency
        report["verifier_latency_source"] = "given" if args.verifier_latency_s is not None else \
            "measured: the instant sync run's mean time/generate_s per generate call"
        with SlowVerifiers(names, latency, out) as slow:
            slow_probe = probe_latency({n: [e] for n, e in slow.endpoints.items()})
            report["scenarios"]["slow"] = run_scenario(
                "slow", slow.endpoints, f"{' and '.join(names)} each sleeping {latency:g} s per verify_group, served by "
                "the bench")
            report["scenarios"]["slow"]["verify_call_s"] = slow_probe
    if "code" in args.scenarios:
        report["scenarios"]["code"] = run_scenario(
            "code", None, "the embedded rows and code rows through the sandbox (cohort serve code)",
            code_layer(out, cfg))
        report["scenarios"]["code"]["verify_call_s"] = None
    return report


def code_layer(out: Path, cfg) -> dict:
    """The ``code`` scenario's data and verifiers: the embedded task's rows and the code rows as plain prompts."""
    from cohort.trainer.data import arithmetic_task

    arith, code = out / "arithmetic.jsonl", out / "code-functions.jsonl"
    with open(arith, "w") as f:
        for ex in arithmetic_task(cfg.data.arithmetic):
            f.write(json.dumps({"prompt": ex.prompt, "answer": ex.reference.answer}) + "\n")
    with open(code, "w") as f:
        for line in (ROOT / "examples" / "data" / "code-functions" / "train.jsonl").read_text().splitlines():
            row = json.loads(line)
            f.write(json.dumps({"id": row["id"], "prompt": row["messages"][-1]["content"],
                                "code_tests": row["code_tests"]}) + "\n")
    verifiers = [{"name": v.name, "weight": v.weight, "options": dict(v.options)} for v in cfg.scoring.verifiers]
    return {"data": {"arithmetic": None, "sources": [
                {"path": str(arith), "name": "arithmetic"},
                {"path": str(code), "name": "code", "verifiers": ["code"]}]},
            "scoring": {"verifiers": [*verifiers, {"name": "code", "weight": 1.0}]}}


def print_report(report: dict, every: int) -> None:
    print(f"\n{report['steps']} steps per run, seeds {report['seeds']} (figures: means over them), {report['cpus']} CPUs "
          f"(load average at start {report['load_avg_at_start'][0]:.2f}); runs under {report['out']}")
    if report["verifier_latency_s"] is not None:
        print(f"generation: {_f(report['generate_call_s'])} s per generate call (instant sync run, steps 2..); "
              f"slow verifier latency {report['verifier_latency_s']:g} s ({report['verifier_latency_source']})")
    for name, scenario in report["scenarios"].items():
        print(f"\n== {name}: {scenario['note']}; one chunk-sized scoring call takes {_f(scenario['verify_call_s'])} s "
              f"(median of {PROBE_CALLS}, before the runs), one generate call "
              f"{scenario['runs']['sync']['generate_call_s']:.3f} s (its sync run)")
        for line in table(scenario):
            print(line)
        for line in curves(scenario, every):
            print(line)
    print(f"\nreport: {report['out']}/report.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (6 steps per run)")
    parser.add_argument("--steps", type=int, default=None, help="run.max_steps of every run (default 60; --quick 6)")
    parser.add_argument("--seed", type=int, default=0, help="run.seed of every run")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="several run.seed values: each mode runs once per seed, and the comparison reads the "
                             "mean reward curve and the mean elapsed time per step over them (one seed's curve "
                             "is noisy; default: --seed alone)")
    parser.add_argument("--verifier-latency-s", type=float, default=None,
                        help="seconds the slow verifiers sleep per group (default: the instant sync run's mean "
                             "generation time per generate call)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "async_vs_sync",
                        help="folder of the runs and report.json (default /tmp/async_vs_sync)")
    parser.add_argument("--curve-every", type=int, default=None, help="steps between printed curve points "
                        "(default 10; --quick 1)")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="seconds before a run is killed")
    parser.add_argument("--scenarios", nargs="+", choices=["instant", "slow", "code"], default=["instant", "slow"],
                        help="which scenarios to run (default: instant slow; slow without instant needs "
                             "--verifier-latency-s)")
    parser.add_argument("--config", type=Path, default=None,
                        help="the task to train (a cohort train config, e.g. examples/smollm2-add.yaml; default: the "
                             "embedded tiny task); the code scenario needs the embedded one")
    parser.add_argument("--staleness", type=int, default=1,
                        help="rollout.max_staleness of the async runs (default 1): how many weight versions "
                             "generation may run ahead, so how many steps' scoring calls can be in flight")
    args = parser.parse_args()
    args.steps = args.steps or (6 if args.quick else 60)
    args.seeds = args.seeds or [args.seed]
    every = args.curve_every or (1 if args.quick else 10)
    if args.steps < 1 or every < 1:
        parser.error("--steps and --curve-every must be at least 1")
    if args.verifier_latency_s is not None and args.verifier_latency_s < 0:
        parser.error("--verifier-latency-s must be >= 0")
    if "slow" in args.scenarios and "instant" not in args.scenarios and args.verifier_latency_s is None:
        parser.error("--scenarios slow without instant needs --verifier-latency-s (the default is instant's "
                     "generation time)")
    if args.staleness < 1:
        parser.error("--staleness must be at least 1 (0 is the sync run)")
    if args.config is not None and not args.config.is_file():
        parser.error(f"--config {args.config}: no such file")
    if args.config is not None and "code" in args.scenarios:
        parser.error("--scenarios code trains the embedded task's rows; leave --config out")
    global BASE
    BASE = args.config.resolve() if args.config is not None else None
    MODES["async"]["max_staleness"] = args.staleness
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: trainer and servers are stopped
    try:
        report = bench(args)
    except BenchError as exc:
        print(f"async_vs_sync: error: {exc}", file=sys.stderr)
        return 1
    (Path(report["out"]) / "report.json").write_text(json.dumps(report, indent=1))
    print_report(report, every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
