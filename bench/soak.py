"""Soak: math, code (through the sandbox service) and format servers on loopback, under a realistic
mix of calls at 1x and then 2x their measured capacity, for a bounded time.

Servers: ``cohort serve math``, ``cohort serve format``, ``cohort serve sandbox`` and ``cohort serve
code`` pointed at that sandbox (``COHORT_SANDBOX_ENDPOINT``), each in its own process on 127.0.0.1
with a bounded queue (``--max-queued-groups``) so that overload is shed, not queued without end.

The groups are the conformance kit's known-answer cases (``tests/conformance/cases/*.jsonl``), each
first scored once on the idle servers: those unloaded verdicts are the reference. Then:

1. capacity: ``--concurrency`` calls in a closed loop for ``--calibrate-seconds``; groups answered per
   second is the mix's capacity;
2. load: Poisson arrivals (seeded) of one ``BatchVerifyGroups`` of ``--batch`` groups each, the
   verifier drawn by ``MIX``, at 1x and then 2x that capacity, ``--seconds`` in all (half each), with
   no client retries, so every outcome is counted as it came.

Reported per phase: calls answered / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED / other errors, p50/p99
latency (answered and refused calls apart), rollouts masked under load (a non-OK status such as
VERIFIER_TIMEOUT: the learner masks them) and rollouts whose verdict or reward differs from the
unloaded one (must be none). Every ``--sample-s`` the RSS, open fds and threads of each server's
process tree. The servers must be alive and SERVING at the end.

    .venv/bin/python bench/soak.py [--seconds 600] [--out soak.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import grpc
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.conformance import load_cases
from cohort.rpc.launch import ServiceProcess, health_status

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "conformance" / "cases"
MIX = {"math": 0.4, "format": 0.4, "code": 0.2}
"""Share of calls per verifier: format is cheap, math waits on SymPy workers, code on the sandbox."""


# ---- resources -----------------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (worker pools, sandboxed programs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def resources(pid: int) -> dict[str, float]:
    """RSS (MiB), open fds and threads, summed over the process tree of ``pid``."""
    rss = fds = threads = 0
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            rss += int(fields.get("VmRSS", "0 kB").split()[0])
            threads += int(fields.get("Threads", "0"))
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except (OSError, ValueError):
            continue  # exited between the listing and the read
    return {"rss_mb": round(rss / 1024, 1), "fds": fds, "threads": threads}


# ---- servers -------------------------------------------------------------------------------------


class Servers:
    """The four servers on loopback; ``endpoints`` by verifier name, ``procs`` by server name."""

    def __init__(self, max_queued_groups: int) -> None:
        self.args = ["--max-queued-groups", str(max_queued_groups), "--log-level", "WARNING"]
        self.procs: dict[str, ServiceProcess] = {}

    def __enter__(self) -> Servers:
        try:
            sandbox = self.procs["sandbox"] = ServiceProcess(["sandbox"], extra_args=["--log-level", "WARNING"]).start()
            env = {"COHORT_SANDBOX_ENDPOINT": sandbox.endpoint}
            for name in MIX:
                self.procs[name] = ServiceProcess([name], extra_args=self.args, env=env if name == "code" else None).start()
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def endpoints(self) -> dict[str, str]:
        return {name: self.procs[name].endpoint for name in MIX}

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            proc.__exit__()


# ---- load ----------------------------------------------------------------------------------------


Outcome = tuple[str, str, float]  # status, verdict, reward


def _outcomes(resp: pb.VerifyGroupResponse) -> dict[int, Outcome]:
    return {r.index: (pb.RolloutStatus.Name(r.status), pb.Verdict.Name(r.verdict), round(r.reward, 9)) for r in resp.results}


class Load:
    def __init__(self, endpoints: dict[str, str], batch: int, deadline_s: float, seed: int) -> None:
        self.cases = {name: load_cases(CASES / f"{name}.jsonl", name) for name in MIX}
        self.batch, self.deadline_s = batch, deadline_s
        self.rng = random.Random(seed)
        self.channels = {name: grpc.aio.insecure_channel(ep, options=[("grpc.enable_retries", 0)]) for name, ep in endpoints.items()}
        self.stubs = {name: pb_grpc.VerifierServiceStub(ch) for name, ch in self.channels.items()}
        self.reference: dict[tuple[str, str], dict[int, Outcome]] = {}
        self.serial = 0

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in self.channels.values()))

    def request(self, name: str) -> pb.BatchVerifyGroupsRequest:
        out = pb.BatchVerifyGroupsRequest()
        for _ in range(self.batch):
            case = self.rng.choice(self.cases[name])
            req = out.requests.add()
            req.CopyFrom(case.request)
            self.serial += 1
            req.group_id = f"{case.name}#{self.serial}"
        return out

    async def unloaded(self) -> None:
        """The reference: every case scored once, one call at a time, on idle servers."""
        for name, cases in self.cases.items():
            for case in cases:
                resp = await self.stubs[name].VerifyGroup(case.request, timeout=120)
                self.reference[(name, case.name)] = _outcomes(resp)

    async def call(self, stats: dict) -> None:
        name = self.rng.choices(list(MIX), weights=list(MIX.values()))[0]
        request = self.request(name)
        started = time.monotonic()
        try:
            response = await self.stubs[name].BatchVerifyGroups(request, timeout=self.deadline_s)
        except grpc.aio.AioRpcError as exc:
            code = exc.code().name
            stats["codes"][code] += 1
            stats["by_verifier"][name][code] += 1
            stats["refused_s" if code == "RESOURCE_EXHAUSTED" else "failed_s"].append(time.monotonic() - started)
            if code not in ("RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"):
                stats["errors"].append(f"{name}: {code} {exc.details()}"[:200])
            return
        stats["latency_s"].append(time.monotonic() - started)
        stats["codes"]["OK"] += 1
        stats["by_verifier"][name]["OK"] += 1
        stats["groups"] += len(response.responses)
        for req, resp in zip(request.requests, response.responses):
            want = self.reference[(name, req.group_id.split("#")[0])]
            for index, (status, verdict, reward) in _outcomes(resp).items():
                ref = want.get(index)
                stats["rollouts"] += 1
                if status != "ROLLOUT_STATUS_OK" and (ref is None or ref[0] == "ROLLOUT_STATUS_OK"):
                    stats["masked"][status] += 1
                elif ref != (status, verdict, reward):
                    stats["differ"].append(f"{name} {req.group_id} rollout {index}: {status} {verdict} {reward}, unloaded {ref}")
        if len(response.responses) != len(request.requests):
            stats["errors"].append(f"{name}: {len(response.responses)} responses for {len(request.requests)} groups")


def _new_stats() -> dict:
    return {"codes": Counter(), "by_verifier": {name: Counter() for name in MIX}, "latency_s": [], "refused_s": [],
            "failed_s": [], "errors": [], "groups": 0, "rollouts": 0, "masked": Counter(), "differ": []}


async def closed_loop(load: Load, concurrency: int, seconds: float) -> tuple[float, dict]:
    """Groups answered per second with ``concurrency`` calls always in flight."""
    stats = _new_stats()
    stop = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < stop:
            await load.call(stats)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return stats["groups"] / (time.monotonic() - started), stats


async def open_loop(load: Load, groups_per_s: float, seconds: float) -> dict:
    """Poisson arrivals of calls for ``seconds``; then waits for the calls still in flight."""
    stats = _new_stats()
    calls_per_s = groups_per_s / load.batch
    tasks: set[asyncio.Task] = set()
    stop = time.monotonic() + seconds
    sent = 0
    while True:
        await asyncio.sleep(load.rng.expovariate(calls_per_s))
        if time.monotonic() >= stop:
            break
        task = asyncio.ensure_future(load.call(stats))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    if tasks:
        await asyncio.wait(tasks)
    return summarize(stats, sent, groups_per_s, seconds)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0], 4)


def summarize(stats: dict, sent: int, groups_per_s: float, seconds: float) -> dict:
    codes = stats["codes"]
    return {
        "offered_groups_per_s": round(groups_per_s, 2), "seconds": seconds, "calls_sent": sent,
        "answered": codes["OK"], "resource_exhausted": codes["RESOURCE_EXHAUSTED"],
        "deadline_exceeded": codes["DEADLINE_EXCEEDED"],
        "other_errors": sum(n for c, n in codes.items() if c not in ("OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED")),
        "answered_groups_per_s": round(stats["groups"] / seconds, 2),
        "latency_p50_s": _pct(stats["latency_s"], 50), "latency_p99_s": _pct(stats["latency_s"], 99),
        "refused_p99_s": _pct(stats["refused_s"], 99),
        "codes_by_verifier": {name: dict(c) for name, c in stats["by_verifier"].items()},
        "rollouts": stats["rollouts"], "masked": dict(stats["masked"]),
        "differ": len(stats["differ"]), "differ_examples": stats["differ"][:5], "errors": stats["errors"][:5],
    }


async def sample_resources(servers: Servers, every_s: float, into: dict[str, list], stop: asyncio.Event,
                           started: float) -> None:
    """A sample every ``every_s`` seconds (``t`` counted from ``started``), and a last one when ``stop`` is set."""
    while True:
        t = round(time.monotonic() - started, 1)
        for name, proc in servers.procs.items():
            into.setdefault(name, []).append({"t": t, **await asyncio.to_thread(resources, proc.proc.pid)})
        if stop.is_set():
            return
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except TimeoutError:
            pass


async def soak(args: argparse.Namespace) -> dict:
    with Servers(args.max_queued_groups) as servers:
        load = Load(servers.endpoints, args.batch, args.deadline, args.seed)
        samples: dict[str, list] = {}
        stop = asyncio.Event()
        try:
            await load.unloaded()
            started = time.monotonic()
            sampler = asyncio.ensure_future(sample_resources(servers, args.sample_s, samples, stop, started))
            capacity, calibration = await closed_loop(load, args.concurrency, args.calibrate_seconds)
            phases, windows = {}, {}
            for label, factor in (("1x", 1.0), ("2x", 2.0)):
                t0 = time.monotonic() - started
                phases[label] = await open_loop(load, factor * capacity, args.seconds / 2)
                windows[label] = (t0, time.monotonic() - started)
                print(json.dumps({label: phases[label]}), flush=True)
            await asyncio.sleep(min(args.sample_s, 5.0))  # idle a moment: the last sample shows what stays
            stop.set()
            await sampler
        finally:
            stop.set()
            await load.close()
        alive = {name: p.proc.poll() is None for name, p in servers.procs.items()}
        serving = {}
        for name, p in servers.procs.items():
            try:
                serving[name] = health_status(p.endpoint, timeout_s=5) == "SERVING"
            except grpc.RpcError:
                serving[name] = False
    calibration_summary = summarize(calibration, sum(calibration["codes"].values()), capacity, args.calibrate_seconds)
    return {
        "mix": MIX, "batch_groups": args.batch, "deadline_s": args.deadline, "max_queued_groups": args.max_queued_groups,
        "capacity_groups_per_s": round(capacity, 2), "calibration": calibration_summary, "phases": phases,
        "alive": alive, "serving": serving,
        "resources": {name: {"start": s[0], "max": {k: max(x[k] for x in s) for k in ("rss_mb", "fds", "threads")},
                             "end": s[-1], "series": s} for name, s in samples.items()},
        "phase_windows_s": {label: [round(t, 1) for t in window] for label, window in windows.items()},
        "rss_by_minute": {label: per_minute(samples, *window) for label, window in windows.items()},
    }


def per_minute(samples: dict[str, list], t0: float, t1: float) -> dict[str, dict]:
    """Each server's mean RSS (MiB) in each whole minute of the window [t0, t1) (one bucket if it is shorter), and the growth
    from the first minute to the last (the issue's leak criterion: under 5% at 1x)."""
    out = {}
    for name, series in samples.items():
        whole = max(1, int((t1 - t0) // 60))  # whole minutes only: a phase's last few seconds are not a minute
        minutes: dict[int, list[float]] = {}
        for x in series:
            if t0 <= x["t"] < t1 and int((x["t"] - t0) // 60) < whole:
                minutes.setdefault(int((x["t"] - t0) // 60), []).append(x["rss_mb"])
        means = [round(sum(v) / len(v), 1) for _, v in sorted(minutes.items())]
        growth = round(100 * (means[-1] - means[0]) / means[0], 2) if means else None
        out[name] = {"minutes": means, "growth_first_to_last_pct": growth}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="load time in all, half at 1x and half at 2x")
    parser.add_argument("--calibrate-seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight while measuring capacity")
    parser.add_argument("--batch", type=int, default=8, help="groups per call")
    parser.add_argument("--deadline", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--max-queued-groups", type=int, default=64, help="each server's queue (then RESOURCE_EXHAUSTED)")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between resource samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    report = asyncio.run(soak(args))
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    brief = {k: v for k, v in report.items() if k != "resources"}
    brief["resources"] = {n: {k: r[k] for k in ("start", "max", "end")} for n, r in report["resources"].items()}
    brief["rss_by_minute"] = report["rss_by_minute"]
    print(json.dumps(brief, indent=1))


if __name__ == "__main__":
    main()
