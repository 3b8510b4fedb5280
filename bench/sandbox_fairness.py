"""Sandbox fairness: how long a ``print(1)``-class program takes while another tenant's programs all burn
CPU, fork busy children, fill memory or sleep to their deadline, with and without the fairness controls.

Controls (see ``sandbox/cgroup.py`` and ``sandbox/pool.py``): every slot is its own CPU cgroup (equal
weight, a quota of ``SandboxConfig.slot_cpu_quota`` CPUs) and one tenant holds at most half of each pool.
*Without* controls: ``SandboxConfig(cpu_cgroups=False)`` (serve config ``sandbox.cpu_cgroups``) and no per-tenant cap
(the memory+pids cgroups stay in both cases).

Three scenarios on an in-process :class:`Sandbox` (its slots are real bubblewrap sandboxes):
``alone`` (the simple programs, nothing else), ``neighbour_without`` and ``neighbour_with`` (the same
programs while ``2 x pool size`` threads of the hostile tenant keep every slot they can get busy).
Reported: latency (request to result, queueing for a slot included) p50/p95/max, the ratios to
``alone``, deadline misses (latency over ``--deadline``) and verdicts (status, exit code, stdout) that
differ from ``alone``.

    .venv/bin/python bench/sandbox_fairness.py [--runs 20] [--pool-size 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

from cohort.sandbox import cgroup, policy
from cohort.sandbox.pool import Sandbox, SandboxOptions, as_tenant

HOSTILE = {
    "burn": "while True:\n    pass\n",
    "fork": "import os\nfor _ in range(12):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n",
    "memory": ("import time\nb = []\ntry:\n    while True:\n        b.append(bytearray(8 << 20))\n"
               "except MemoryError:\n    pass\ntime.sleep(600)\n"),
    "sleep": "import time\ntime.sleep(600)\n",
}
HOSTILE_LIMITS = policy.Limits(wall_s=3.0, cpu_s=10.0, memory_bytes=256 << 20, max_processes=16)
SIMPLE = [  # small programs, each with one verdict (status, exit code, stdout)
    "print(1)\n",
    "print(sum(i * i for i in range(200000)))\n",  # ~20-40 ms of CPU: shows the CPU share
    "print(sum(range(10)))\n",
    "import sys\nprint('bye')\nsys.exit(3)\n",
]


def verdict(r) -> tuple:
    return (r.status.name, r.exit_code, r.stdout)


class Hostile:
    """``threads`` threads of tenant ``hostile``, each running the HOSTILE programs in turn until stopped."""

    def __init__(self, sandbox: Sandbox, threads: int, budget_s: float) -> None:
        self.sandbox, self.stop = sandbox, threading.Event()
        self.runs = 0
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(threads)]
        self.budget = threading.Timer(budget_s, self.stop.set)  # a starved simple program gets a slot after this
        self.budget.daemon = True

    def _loop(self, i: int) -> None:
        programs = list(HOSTILE.values())
        while not self.stop.is_set():
            as_tenant("hostile", self.sandbox.execute, programs[i % len(programs)], b"", HOSTILE_LIMITS)
            self.runs += 1
            i += 1

    def __enter__(self) -> Hostile:
        for t in self.threads:
            t.start()
        self.budget.start()
        time.sleep(1.5)  # every slot it can get is busy
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped_by_budget = self.stop.is_set()
        self.stop.set()
        self.budget.cancel()
        for t in self.threads:
            t.join(timeout=60)


def simple_runs(sandbox: Sandbox, runs: int, deadline_s: float) -> tuple[list[float], list[tuple]]:
    """``runs`` simple programs one after another (tenant ``simple``): latencies and verdicts."""
    latencies, verdicts = [], []
    limits = policy.Limits(wall_s=deadline_s)
    for i in range(runs):
        code = SIMPLE[i % len(SIMPLE)]
        started = time.monotonic()
        r = as_tenant("simple", sandbox.execute, code, b"", limits)
        latencies.append(time.monotonic() - started)
        verdicts.append(verdict(r))
    return latencies, verdicts


SCENARIOS = {  # label: (CPU cgroups, per-tenant cap, neighbour)
    "alone": (True, True, False),
    "neighbour_with": (True, True, True),
    "neighbour_cap_only": (False, True, True),
    "neighbour_cpu_only": (True, False, True),
    "neighbour_without": (False, False, True),
}


def scenario(cpu_cgroups: bool, cap: bool, neighbour: bool, runs: int, pool_size: int, deadline_s: float,
             budget_s: float) -> dict:
    sandbox = Sandbox(SandboxOptions(config=policy.SandboxConfig(cpu_cgroups=cpu_cgroups), pool_size=pool_size,
                                     max_per_tenant=0 if cap else pool_size))
    try:
        sandbox.execute("pass")  # the pools are up
        time.sleep(0.5)
        cpu = any((d / "cpu.shares").exists() or (d / "cpu.weight").exists()
                  for slot in list(sandbox.candidates._live) if slot.cgroup for d in slot.cgroup.dirs)
        hostile_runs, budget_hit = 0, False
        if neighbour:
            with Hostile(sandbox, 2 * pool_size, budget_s) as hostile:
                latencies, verdicts = simple_runs(sandbox, runs, deadline_s)
            hostile_runs, budget_hit = hostile.runs, hostile.stopped_by_budget
        else:
            latencies, verdicts = simple_runs(sandbox, runs, deadline_s)
    finally:
        sandbox.close()
    q = statistics.quantiles(latencies, n=20, method="inclusive") if len(latencies) > 1 else latencies * 19
    return {"cpu_cgroups_asked": cpu_cgroups, "slot_cpu_cgroups": cpu, "tenant_cap": cap, "neighbour": neighbour,
            "runs": runs, "hostile_runs": hostile_runs, "hostile_stopped_by_budget": budget_hit,
            "p50_s": round(statistics.median(latencies), 4), "p95_s": round(q[18], 4),
            "max_s": round(max(latencies), 4), "deadline_misses": sum(t > deadline_s for t in latencies),
            "_verdicts": verdicts}


def fairness(runs: int, pool_size: int, deadline_s: float, labels=tuple(SCENARIOS), budget_s: float = 60.0) -> dict:
    """The scenarios ``labels`` (``alone`` is always run first: the reference)."""
    report = {"pool_size": pool_size, "deadline_s": deadline_s, "cpus": os.cpu_count(), "budget_s": budget_s,
              "cpu_controls": cgroup.cpu_controls(policy.SandboxConfig().slot_cpu_quota),
              "hostile_limits": {"wall_s": HOSTILE_LIMITS.wall_s, "max_processes": HOSTILE_LIMITS.max_processes}}
    alone = scenario(*SCENARIOS["alone"], runs, pool_size, deadline_s, budget_s)
    report["alone"] = alone
    for label in labels:
        if label == "alone":
            continue
        r = scenario(*SCENARIOS[label], runs, pool_size, deadline_s, budget_s)
        r["verdicts_differ"] = sum(a != b for a, b in zip(r["_verdicts"], alone["_verdicts"]))
        r["ratio_p50"] = round(r["p50_s"] / alone["p50_s"], 2)
        r["ratio_p95"] = round(r["p95_s"] / alone["p95_s"], 2)
        report[label] = r
    for r in report.values():
        if isinstance(r, dict):
            r.pop("_verdicts", None)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="simple programs per scenario")
    parser.add_argument("--pool-size", type=int, default=4, help="slots per pool")
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds a simple program may take end to end")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds after which the hostile tenant stops (bounds a starved program's wait)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of: " + ", ".join(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = fairness(args.runs, args.pool_size, args.deadline, tuple(args.scenarios.split(",")), args.budget)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    controls = report["cpu_controls"] or "unavailable"
    print(f"pool {args.pool_size} slots, {report['cpus']} CPUs, CPU controls: {controls}")
    for label in SCENARIOS:
        if label not in report:
            continue
        r = report[label]
        extra = (f"  ratio p50 {r['ratio_p50']} p95 {r['ratio_p95']}  verdicts differ {r['verdicts_differ']}"
                 if label != "alone" else "")
        if r["hostile_stopped_by_budget"]:
            extra += f"  (hostile stopped after the {args.budget:.0f}s budget)"
        print(f"{label:18} p50 {r['p50_s']:.3f}s p95 {r['p95_s']:.3f}s max {r['max_s']:.3f}s  "
              f"misses {r['deadline_misses']}/{r['runs']}{extra}")


if __name__ == "__main__":
    main()
