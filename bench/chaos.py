"""Chaos: a real ``cohort train`` run (the embedded default task) while replicas die, drain, freeze and
come back, next to a fault-free run with the same seed.

Fleet, all ``cohort serve`` processes on 127.0.0.1 started by the bench: two replicas each of ``math``
and ``arith`` (the embedded task's verifiers, given to the trainer as endpoints with
``scoring.local_services=false``), the sandbox as its own service, and two ``code`` replicas pointed at
it. The embedded task (``a+b=``) has no tests to run, so the code path is exercised by a side load:
the conformance kit's code cases scored through :class:`VerifierClient` (failover across the two code
replicas) in a loop during the run, each answer compared with the one the idle fleet gave.

Faults (a seeded driver, at exponential intervals of mean ``--fault-every`` seconds, the kinds in a
seeded shuffled cycle): SIGKILL a replica (restarted on its port ``--down-s`` later), SIGTERM a
replica (it drains; restarted likewise), SIGSTOP a replica for ``scoring.timeout_s + 1`` seconds (past
the client's deadline) then SIGCONT, restart the sandbox service (SIGTERM, then a new one on its port).

The trainer writes every scored batch to ``scoring.record_path``. From it and ``metrics.jsonl``:

- *scored*: rollouts with status OK; *masked*: rollouts with another status, by status;
- *lost*: rollouts the trainer generated (steps x P x G) without a recorded status: must be 0;
- *infra scored*: an OK rollout whose reward differs from a fault-free re-score of the same completion,
  plus steps whose logged ``reward/mean`` is not the mean over that step's OK rollouts (a masked rollout
  counted as 0 would show there), plus side-load answers that differ from the idle ones: must be 0;
- the reward curve (``reward/mean`` per step) of both runs and the mean over the last 10 steps.

    .venv/bin/python bench/chaos.py [--steps 150] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

from cohort.rpc.launch import ServiceProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench, also under PYTHONSAFEPATH (scripts/test)
from soak import CASES, _tree  # noqa: E402  (case files and the process-tree walk)

ROOT = Path(__file__).resolve().parents[1]
TRAIN_VERIFIERS = ("math", "arith")
REPLICAS = 2
SERVE_ARGS = ["--log-level", "WARNING"]
FAULTS = ("kill", "term", "stop", "sandbox")


# ---- the fleet -----------------------------------------------------------------------------------


class Fleet:
    """Replicas by verifier name, plus the sandbox; a replica is restarted on the port it had."""

    def __init__(self, code: bool = True) -> None:
        self.names = [*TRAIN_VERIFIERS, *(["code"] if code else [])]
        self.replicas: dict[str, list[ServiceProcess]] = {}
        self.sandbox: ServiceProcess | None = None
        self.retired: list[ServiceProcess] = []
        self.lock = threading.Lock()

    def __enter__(self) -> Fleet:
        try:
            if "code" in self.names:
                self.sandbox = ServiceProcess(["sandbox"], extra_args=SERVE_ARGS).start()
            for name in self.names:
                self.replicas[name] = [self._new(name).start() for _ in range(REPLICAS)]
        except BaseException:
            self.__exit__()
            raise
        return self

    def _new(self, name: str, port: int = 0) -> ServiceProcess:
        env = {"COHORT_SANDBOX_ENDPOINT": self.sandbox.endpoint} if name == "code" else None
        return ServiceProcess([name], extra_args=SERVE_ARGS, env=env, port=port)

    def endpoints(self, name: str) -> list[str]:
        return [p.endpoint for p in self.replicas[name]]

    def restart(self, name: str, index: int) -> None:
        """A fresh server where replica ``index`` of ``name`` was (the old one is stopped first)."""
        with self.lock:
            old = self.replicas[name][index] if name != "sandbox" else self.sandbox
            old.stop(grace_s=5)
            self.retired.append(old)
            new = (ServiceProcess(["sandbox"], extra_args=SERVE_ARGS, port=old.port) if name == "sandbox"
                   else self._new(name, old.port))
            for attempt in range(20):  # the port may take a moment to be free again
                try:
                    new.start(timeout_s=30)
                    break
                except Exception:
                    if attempt == 19:
                        raise
                    new = (ServiceProcess(["sandbox"], extra_args=SERVE_ARGS, port=old.port) if name == "sandbox"
                           else self._new(name, old.port))
                    time.sleep(0.25)
            if name == "sandbox":
                self.sandbox = new
            else:
                self.replicas[name][index] = new

    def all(self) -> list[ServiceProcess]:
        return [*(p for ps in self.replicas.values() for p in ps), *([self.sandbox] if self.sandbox else [])]

    def __exit__(self, *exc: object) -> None:
        for proc in [*self.all(), *self.retired]:
            if proc.proc is not None and proc.proc.poll() is None:
                try:
                    os.killpg(proc.proc.pid, signal.SIGCONT)  # a frozen server cannot drain
                except ProcessLookupError:
                    pass
            proc.__exit__()


# ---- faults --------------------------------------------------------------------------------------


class Chaos(threading.Thread):
    """The seeded fault driver; ``events`` is what it did and when (seconds since it started)."""

    def __init__(self, fleet: Fleet, seed: int, every_s: float, down_s: float, pause_s: float) -> None:
        super().__init__(name="chaos", daemon=True)
        self.fleet, self.every_s, self.down_s, self.pause_s = fleet, every_s, down_s, pause_s
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.events: list[dict] = []
        self.errors: list[str] = []
        self.pending: list[threading.Timer] = []

    def _log(self, what: str, target: str) -> None:
        self.events.append({"t": round(time.monotonic() - self.started, 2), "fault": what, "target": target})

    def run(self) -> None:
        self.started = time.monotonic()
        cycle: list[str] = []
        down: set[tuple[str, int]] = set()
        while not self.stop_event.wait(self.rng.expovariate(1 / self.every_s)):
            if not cycle:
                cycle = list(FAULTS)
                self.rng.shuffle(cycle)
            fault = cycle.pop()
            try:
                if fault == "sandbox":
                    if self.fleet.sandbox is None:
                        continue
                    self._log("sandbox-restart", "sandbox")
                    self.fleet.restart("sandbox", 0)
                    continue
                name = self.rng.choice(self.fleet.names)
                up = [i for i in range(REPLICAS) if (name, i) not in down]
                if not up:
                    continue
                index = self.rng.choice(up)
                proc = self.fleet.replicas[name][index]
                self._log(fault, f"{name}[{index}]@{proc.endpoint}")
                if fault == "stop":
                    os.killpg(proc.proc.pid, signal.SIGSTOP)
                    self._later(self.pause_s, lambda p=proc: _signal_group(p, signal.SIGCONT), down, (name, index))
                else:
                    proc.kill() if fault == "kill" else proc.terminate()
                    self._later(self.down_s, lambda n=name, i=index: self.fleet.restart(n, i), down, (name, index))
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                self.errors.append(f"{fault}: {exc!r}"[:300])

    def _later(self, delay_s: float, action, down: set, key: tuple[str, int]) -> None:
        down.add(key)

        def fire() -> None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"recover {key}: {exc!r}"[:300])
            finally:
                down.discard(key)

        timer = threading.Timer(delay_s, fire)
        timer.daemon = True
        self.pending.append(timer)
        timer.start()

    def finish(self) -> None:
        """Stop injecting; let every pending recovery (SIGCONT, restart) happen now."""
        self.stop_event.set()
        self.join()
        for timer in self.pending:
            if timer.is_alive():
                timer.cancel()
                timer.function()


def _signal_group(proc: ServiceProcess, sig: int) -> None:
    try:
        os.killpg(proc.proc.pid, sig)
    except ProcessLookupError:
        pass


# ---- the code side load --------------------------------------------------------------------------


class CodeLoad(threading.Thread):
    """Code cases scored in a loop through the real client (two replicas, failover), compared with idle."""

    def __init__(self, endpoints: list[str], timeout_s: float, retries: int) -> None:
        super().__init__(name="code-load", daemon=True)
        from cohort.conformance import load_cases

        self.cases = load_cases(CASES / "code.jsonl", "code")
        self.endpoints, self.timeout_s, self.retries = endpoints, timeout_s, retries
        self.stop_event = threading.Event()
        self.stats = {"calls": 0, "rollouts": 0, "scored": 0, "masked": Counter(), "differ": [], "errors": [],
                      "client": {}}
        self.reference: dict[str, list[tuple[str, float]]] = {}

    async def _score(self, client, case) -> list[tuple[str, float]]:
        from cohort.verifiers import convert

        [result] = await client.verify_groups([convert.group_from_pb(case.request)])
        return [(r.status.name, round(r.reward, 9)) for r in result.results]

    def run(self) -> None:

        asyncio.run(self._run())

    async def _run(self) -> None:
        from cohort.verifiers.client import VerifierClient

        async with VerifierClient({"code": self.endpoints}, timeout_s=self.timeout_s, retries=self.retries) as client:
            for case in self.cases:  # idle reference
                self.reference[case.name] = await self._score(client, case)
            self.ready.set()
            i = 0
            while not self.stop_event.is_set():
                case = self.cases[i % len(self.cases)]
                i += 1
                try:
                    got = await self._score(client, case)
                except Exception as exc:  # noqa: BLE001 - an exception is a lost answer: counted
                    self.stats["errors"].append(repr(exc)[:200])
                    continue
                self.stats["calls"] += 1
                for k, (status, reward) in enumerate(got):
                    self.stats["rollouts"] += 1
                    if status != "OK":
                        self.stats["masked"][status] += 1
                    elif (status, reward) != self.reference[case.name][k]:
                        self.stats["differ"].append(f"{case.name}[{k}]: {reward}, idle {self.reference[case.name][k]}")
                    else:
                        self.stats["scored"] += 1
                await asyncio.sleep(0.05)
            self.stats["client"] = dict(client.stats)

    def start(self) -> None:
        self.ready = threading.Event()
        super().start()
        if not self.ready.wait(120):
            raise RuntimeError("code side load: no idle reference after 120s")


# ---- the training run ----------------------------------------------------------------------------


def train_config(fleet: Fleet, out: Path, steps: int, seed: int, timeout_s: float, retries: int,
                 staleness: int = 0) -> Path:
    """The embedded default with the fleet's endpoints, no local services, a record file, no early stop;
    ``staleness`` > 0: the asynchronous pipeline (``rollout.max_staleness``, one rollout worker)."""
    default = yaml.safe_load((ROOT / "trainer" / "default.yaml").read_text())
    verifiers = [{**v, "endpoints": fleet.endpoints(v["name"])} for v in default["scoring"]["verifiers"]]
    layer = {
        "scoring": {"verifiers": verifiers, "local_services": False, "timeout_s": timeout_s, "retries": retries,
                    "record_path": str(out / "record.jsonl")},
        "run": {"output_dir": str(out / "run"), "max_steps": steps, "seed": seed, "target_reward": None,
                "resume": False, "tensorboard": False, "plot": False, "log_every": 25},
        "rollout": {"max_staleness": staleness, "workers": 1},
    }
    path = out / "chaos.yaml"
    path.write_text(yaml.safe_dump(layer))
    return path


def run_trainer(config: Path, log: Path, timeout_s: float) -> tuple[int, float]:
    """``cohort train --config`` in its own process group; killed (with its children) on timeout."""
    started = time.monotonic()
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "cohort.cli", "train", "--config", str(config)],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except BaseException:
            for pid in reversed(_tree(proc.pid)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
            raise
    return rc, time.monotonic() - started


# ---- the audit -----------------------------------------------------------------------------------


def audit(out: Path, chunks: int, batch_size: int) -> dict:
    """Counts from the record and metrics.jsonl of one run (see the module docstring)."""
    metrics = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    batches = [json.loads(line) for line in (out / "record.jsonl").read_text().splitlines()]
    by_submission = {b["submission"]: b for b in batches}
    statuses: Counter = Counter()
    mismatched_steps = []
    for rec in metrics:
        # a round whose every rollout was masked is not a step: the step's round comes after those before it
        rnd = rec["step"] - 1 + int(rec.get("verify/masked_rounds", 0))
        groups = [g for s in range(rnd * chunks, (rnd + 1) * chunks) if s in by_submission
                  for g in by_submission[s]["groups"]]
        ok = [r for g in groups for st, r in zip(g["status"], g["reward"]) if st == "OK"]
        masked = sum(st != "OK" for g in groups for st in g["status"])
        logged_masked = round(rec["verify/unusable_frac"] * batch_size)
        if ok and abs(statistics.fmean(ok) - (rec["reward/mean"] or 0.0)) > 1e-6 or masked != logged_masked:
            mismatched_steps.append(rec["step"])
    for b in batches:
        for g in b["groups"]:
            statuses.update(g["status"])
    recorded = sum(statuses.values())
    masked_rounds = int(metrics[-1].get("verify/masked_rounds", 0)) if metrics else 0
    # a round whose every rollout was masked is not a step (and has no line in metrics.jsonl); a step
    # without a reward (null) is None in the curve, left out of the final mean, never counted as 0
    curve = [round(r["reward/mean"], 4) if r["reward/mean"] is not None and math.isfinite(r["reward/mean"]) else None
             for r in metrics]
    tail = [c for c in curve[-10:] if c is not None]
    return {
        "steps": len(metrics), "masked_rounds": masked_rounds,
        "generated": (len(metrics) + masked_rounds) * batch_size, "recorded": recorded,
        "scored": statuses["OK"], "masked": {k: v for k, v in statuses.items() if k != "OK"},
        # masked rollouts in metrics.jsonl: those of the steps, plus every rollout of the rounds that were not steps
        "masked_logged": round(sum(r["verify/unusable_frac"] for r in metrics) * batch_size) + masked_rounds * batch_size,
        "lost": (len(metrics) + masked_rounds) * batch_size - recorded, "steps_reward_not_ok_mean": mismatched_steps,
        "client": batches[-1]["client"] if batches else {},
        "final_reward": round(statistics.fmean(tail), 4) if tail else None,
        "final_reward_std": round(statistics.pstdev(tail), 4) if len(tail) > 1 else None,
        "steps_all_masked": sum(c is None for c in curve),
        "curve": curve, "_batches": batches,
    }


def audit_async(out: Path, num_generations: int) -> dict:
    """:func:`audit` for the asynchronous pipeline: groups are scored as they arrive, not per step, so a
    step's rollouts are not one submission range. *lost*: rollouts sent to the verifiers (the trainer's
    ``async/submitted_groups`` at its last step) without a recorded status; *infra scored* comes from the
    re-score (every OK reward equal to the idle fleet's) and the code side load. The per-step check of
    :func:`audit` (logged reward = mean over the step's OK rollouts) has no counterpart here: the round is
    built by the same code as the lock-step loop's from the same ``Scores``."""
    metrics = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    batches = [json.loads(line) for line in (out / "record.jsonl").read_text().splitlines()]
    statuses: Counter = Counter(st for b in batches for g in b["groups"] for st in g["status"])
    submitted = int(metrics[-1]["async/submitted_groups"]) * num_generations if metrics else 0
    curve = [round(r["reward/mean"], 4) if r["reward/mean"] is not None and math.isfinite(r["reward/mean"]) else None
             for r in metrics]
    tail = [c for c in curve[-10:] if c is not None]
    recorded = sum(statuses.values())
    return {
        "steps": len(metrics), "masked_rounds": int(metrics[-1].get("verify/masked_rounds", 0)) if metrics else 0,
        "generated": submitted, "recorded": recorded, "scored": statuses["OK"],
        "masked": {k: v for k, v in statuses.items() if k != "OK"},
        "masked_logged": "n/a (async: groups are consumed apart from their submissions)",
        "lost": max(0, submitted - recorded), "steps_reward_not_ok_mean": [],
        "staleness_max": max((r["async/staleness_max"] for r in metrics), default=None),
        "dropped_stale": int(metrics[-1]["async/dropped_stale"]) if metrics else 0,
        "client": batches[-1]["client"] if batches else {},
        "final_reward": round(statistics.fmean(tail), 4) if tail else None,
        "final_reward_std": round(statistics.pstdev(tail), 4) if len(tail) > 1 else None,
        "steps_all_masked": sum(c is None for c in curve), "curve": curve, "_batches": batches,
    }


def rescore(fleet: Fleet, batches: list[dict]) -> tuple[int, int, list[str]]:
    """Re-score every distinct OK completion on the (healthy) fleet; (checked, differing, examples)."""
    from cohort.trainer.config import load_config
    from cohort.verifiers.base import Reference, Rollout
    from cohort.verifiers.client import VerifierClient, WeightedVerifier
    from cohort.verifiers.records import Record, Task

    specs = load_config().scoring.verifiers  # the embedded default: names, weights, options
    seen: dict[tuple[str, str, bool], float] = {}
    for b in batches:
        for g in b["groups"]:
            for text, trunc, st, reward in zip(g["texts"], g["truncated"], g["status"], g["reward"]):
                if st == "OK":
                    seen.setdefault((g["answer"], text, trunc), reward)
    keys = list(seen)

    async def go() -> list[float]:
        verifiers = [WeightedVerifier(v.name, v.weight, tuple(fleet.endpoints(v.name)), dict(v.options)) for v in specs]
        async with VerifierClient(verifiers, timeout_s=120, retries=3) as client:
            reqs = [Record(Task(f"r{i}", "", Reference(answer=answer)), (Rollout(0, text, trunc),))
                    for i, (answer, text, trunc) in enumerate(keys)]
            out = []
            for i in range(0, len(reqs), 256):
                out += [group[0] for group in await client.score(reqs[i : i + 256])]
            return out

    fresh = asyncio.run(go())
    differ = [f"{k}: {seen[k]} in the run, {r.reward} ({r.status.name}) re-scored" for k, r in zip(keys, fresh)
              if r.status.name != "OK" or abs(r.reward - seen[k]) > 1e-9]
    return len(keys), len(differ), differ[:5]


# ---- main ----------------------------------------------------------------------------------------


def chaos(args: argparse.Namespace) -> dict:
    from cohort.trainer.config import load_config

    cfg = load_config()
    chunks, batch_size = cfg.rollout.generation_chunks, cfg.batch_size
    work = Path(tempfile.mkdtemp(prefix="cohort-chaos-"))
    report: dict = {"steps_asked": args.steps, "seed": args.seed, "scoring_timeout_s": args.timeout,
                    "replicas": REPLICAS, "work_dir": str(work)}
    with Fleet(code=not args.no_code) as fleet:
        runs = {}
        for label in ("fault_free", "chaos"):
            out = work / label
            out.mkdir()
            config = train_config(fleet, out, args.steps, args.seed, args.timeout, args.retries, args.staleness)
            driver = None
            if label == "chaos":
                driver = Chaos(fleet, args.seed, args.fault_every, args.down_s, args.timeout + 1.0)
            load = None
            if label == "chaos" and not args.no_code:
                load = CodeLoad(fleet.endpoints("code"), args.timeout, args.retries)
                load.start()
            try:
                if driver:
                    driver.start()
                rc, wall = run_trainer(config, out / "train.log", args.train_timeout)
            finally:
                if driver:
                    driver.finish()
                if load:
                    load.stop_event.set()
                    load.join(timeout=60)
            result = {"rc": rc, "wall_s": round(wall, 1)}
            if rc != 0:
                result["log_tail"] = (out / "train.log").read_text(errors="replace").splitlines()[-20:]
                runs[label] = result
                continue
            result |= audit(out, chunks, batch_size) if not args.staleness else audit_async(out, cfg.grpo.num_generations)
            checked, differ, examples = rescore(fleet, result.pop("_batches"))
            result |= {"rescored_distinct": checked, "infra_scored": differ + len(result["steps_reward_not_ok_mean"]),
                       "rescore_differ_examples": examples}
            if driver:
                result |= {"faults": driver.events, "fault_errors": driver.errors}
            if load:
                side = load.stats
                result["code_side_load"] = {"calls": side["calls"], "rollouts": side["rollouts"],
                                            "scored": side["scored"],
                                            "masked": dict(side["masked"]), "differ": len(side["differ"]),
                                            "differ_examples": side["differ"][:5], "lost_calls": len(side["errors"]),
                                            "errors": side["errors"][:5], "client": side["client"]}
                result["infra_scored"] += len(side["differ"])
            runs[label] = result
        report["runs"] = runs
    return report


def summary(report: dict) -> str:
    lines = []
    for label, r in report["runs"].items():
        if r["rc"] != 0:
            lines.append(f"{label}: cohort train exited {r['rc']}")
            continue
        lines.append(f"{label}: {r['steps']} steps in {r['wall_s']}s, {r['scored']} scored, masked {r['masked']} "
                     f"(metrics.jsonl: {r['masked_logged']}), lost {r['lost']}, infra scored {r['infra_scored']}, "
                     f"client {r['client']}, final reward {r['final_reward']} (std {r['final_reward_std']})")
        if "faults" in r:
            kinds = Counter(e["fault"] for e in r["faults"])
            lines.append(f"  faults: {dict(kinds)}, driver errors {len(r['fault_errors'])}")
        if "code_side_load" in r:
            c = r["code_side_load"]
            lines.append(f"  code side load: {c['rollouts']} rollouts, {c['scored']} as idle, masked {c['masked']}, "
                         f"differ {c['differ']}, lost calls {c['lost_calls']}, client {c['client']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="run.max_steps of each run")
    parser.add_argument("--seed", type=int, default=0, help="run.seed and the fault driver's seed")
    parser.add_argument("--fault-every", type=float, default=1.0, help="mean seconds between faults")
    parser.add_argument("--down-s", type=float, default=3.0,
                        help="seconds before a killed/drained replica is restarted")
    parser.add_argument("--timeout", type=float, default=3.0,
                        help="scoring.timeout_s (the client's deadline per batch)")
    parser.add_argument("--retries", type=int, default=3, help="scoring.retries")
    parser.add_argument("--train-timeout", type=float, default=1800.0, help="seconds before a run is killed")
    parser.add_argument("--no-code", action="store_true", help="no sandbox, code replicas or code side load")
    parser.add_argument("--staleness", type=int, default=0,
                        help="rollout.max_staleness of both runs (> 0: the asynchronous pipeline)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the client's failover warnings are counted, not printed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SIGTERM unwinds: the fleet and trainer are stopped
    report = chaos(args)
    print(json.dumps(report, indent=1) if args.json else summary(report))


if __name__ == "__main__":
    main()
