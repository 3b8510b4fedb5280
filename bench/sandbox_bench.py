"""Sandbox speed vs a plain ``python3 -c 'print(1)'`` subprocess, measured in the same run.

    python bench/sandbox_bench.py --rounds 5 --n 200 --threads 4

For each round (baseline and sandbox interleaved, so machine load hits both alike):

- latency: ``n`` sequential executions of ``print(1)``; median per execution
- throughput: ``threads`` concurrent callers for ``n`` executions in total; executions per second

Targets (issue #4): sandbox latency <= baseline latency (ratio <= 1.0) and >= 150 exec/s.
Prints every round, then best-of and median over rounds, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CODE = "print(1)"


def baseline_once(python: str) -> None:
    r = subprocess.run([python, "-c", CODE], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert r.stdout == b"1\n", r


def sandbox_once(sb) -> None:
    r = sb.execute(CODE)
    assert r.stdout == b"1\n", r


def latency_ms(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e3


def throughput(fn, n: int, threads: int) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda _: fn(), range(n)))
    return n / (time.perf_counter() - t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200, help="executions per measurement")
    ap.add_argument("--threads", type=int, default=4, help="concurrent callers in the throughput runs (both sides)")
    ap.add_argument("--pool-size", type=int, default=0, help="sandbox slots per pool (0 = max(4, 2 * CPUs))")
    ap.add_argument("--python", default="/usr/bin/python3", help="baseline interpreter (the sandbox's)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ns = ap.parse_args(argv)

    from cohort.sandbox.pool import Sandbox, SandboxOptions
    from cohort.sandbox.policy import SandboxConfig

    sb = Sandbox(SandboxOptions(config=SandboxConfig(interpreter=ns.python), pool_size=ns.pool_size))
    for _ in range(20):  # warm: every slot started, caches hot
        sandbox_once(sb)
        baseline_once(ns.python)
    rows = []
    for i in range(ns.rounds):
        row = {
            "baseline_latency_ms": latency_ms(lambda: baseline_once(ns.python), ns.n),
            "sandbox_latency_ms": latency_ms(lambda: sandbox_once(sb), ns.n),
            "baseline_exec_per_s": throughput(lambda: baseline_once(ns.python), ns.n, ns.threads),
            "sandbox_exec_per_s": throughput(lambda: sandbox_once(sb), ns.n, ns.threads),
        }
        rows.append(row)
        print(f"round {i + 1}: " + "  ".join(f"{k}={v:.1f}" for k, v in row.items()), flush=True)
    sb.close()

    def agg(key: str, best) -> dict:
        values = [r[key] for r in rows]
        return {"best": best(values), "median": statistics.median(values)}

    summary = {
        "baseline_latency_ms": agg("baseline_latency_ms", min),
        "sandbox_latency_ms": agg("sandbox_latency_ms", min),
        "baseline_exec_per_s": agg("baseline_exec_per_s", max),
        "sandbox_exec_per_s": agg("sandbox_exec_per_s", max),
    }
    ratios = {
        "latency_ratio_sandbox_over_baseline": {
            "best": summary["sandbox_latency_ms"]["best"] / summary["baseline_latency_ms"]["best"],
            "median": statistics.median(r["sandbox_latency_ms"] / r["baseline_latency_ms"] for r in rows),
        },
        "throughput_ratio_sandbox_over_baseline": {
            "best": summary["sandbox_exec_per_s"]["best"] / summary["baseline_exec_per_s"]["best"],
            "median": statistics.median(r["sandbox_exec_per_s"] / r["baseline_exec_per_s"] for r in rows),
        },
    }
    print()
    print(f"{'metric':40s} {'best':>10s} {'median':>10s}")
    for k, v in {**summary, **ratios}.items():
        print(f"{k:40s} {v['best']:10.2f} {v['median']:10.2f}")
    ok_latency = ratios["latency_ratio_sandbox_over_baseline"]["median"] <= 1.0
    ok_rate = summary["sandbox_exec_per_s"]["median"] >= 150
    print(f"\ntarget latency ratio <= 1.0: {'met' if ok_latency else 'NOT met'} (median)")
    print(f"target >= 150 exec/s: {'met' if ok_rate else 'NOT met'} (median)")
    if ns.json:
        ns.json.write_text(json.dumps({"rounds": rows, "summary": summary, "ratios": ratios, "args": vars(ns)},
                                      default=str, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
