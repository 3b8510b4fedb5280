"""Accuracy, false positives/negatives, throughput and latency: our ``math`` verifier vs Math-Verify.

Both run in this process on the same labelled cases, pinned to one CPU core (our worker pool has one
worker on the same core, so the comparison is one core against one core):

- ours: ``MathVerifier.verify_group`` (the real path: extraction, cheap pass, worker pool), one group
  per case, verdict cache disabled so every case is really checked.
- Math-Verify: its recommended reward configuration, ``parse`` of the gold (as ``\\boxed{gold}``) and of
  the response with ``[LatexExtractionConfig(), ExprExtractionConfig()]``, then ``verify(gold, answer)``.
  It runs on the main thread, where its SIGALRM timeouts work.

A case counts as correct when the verdict (CORRECT vs anything else) equals the label; a false positive
is CORRECT on a case labelled false. VERIFIER_TIMEOUT/ERROR are reported separately and count as
"not CORRECT" for accuracy.

    .venv/bin/python bench/math_bench.py [--data PATH] [--core N] [--repeat R] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "math" / "equivalence_dev.jsonl"


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_ours(cases: list[dict], repeat: int, timeout: float) -> tuple[list[bool], list[float], dict]:
    from verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
    from verifiers.math import MathVerifier

    verifier = MathVerifier(workers=1, cache_size=0)
    verifier.pool.start()
    statuses: dict[str, int] = defaultdict(int)
    try:
        # warm-up: the worker is started and has imported SymPy
        warm = GroupRequest("math", (Rollout(0, "\\boxed{x^2}"),), Reference(answer="x^2+0"), rollout_timeout_s=30)
        verifier.verify_group(warm, VerifyContext())
        verdicts: list[bool] = []
        latencies: list[float] = []
        for r in range(repeat):
            for case in cases:
                group = GroupRequest("math", (Rollout(0, case["output"]),), Reference(answer=case["gold"]), rollout_timeout_s=timeout)
                t0 = time.perf_counter()
                (result,) = verifier.verify_group(group, VerifyContext(deadline=time.monotonic() + timeout + 1))
                latencies.append(time.perf_counter() - t0)
                if r == 0:
                    statuses[result.status.value] += 1
                    verdicts.append(result.status is RolloutStatus.OK and result.verdict is Verdict.CORRECT)
        return verdicts, latencies, dict(statuses)
    finally:
        verifier.close()


def run_math_verify(cases: list[dict], repeat: int) -> tuple[list[bool], list[float], dict]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    verdicts: list[bool] = []
    latencies: list[float] = []
    errors = 0
    for r in range(repeat):
        for case in cases:
            t0 = time.perf_counter()
            try:
                gold = parse("\\boxed{" + case["gold"] + "}", extraction_config=config)
                answer = parse(case["output"], extraction_config=config)
                ok = bool(verify(gold, answer))
            except Exception:  # Math-Verify raising is a "not correct" for it
                ok = False
                errors += r == 0
            latencies.append(time.perf_counter() - t0)
            if r == 0:
                verdicts.append(ok)
    return verdicts, latencies, {"exceptions": errors}


def report(name: str, cases: list[dict], verdicts: list[bool]) -> dict:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # n, right, fp, fn
    for case, got in zip(cases, verdicts):
        row = per[case["category"]]
        row[0] += 1
        row[1] += got == case["expected"]
        row[2] += got and not case["expected"]
        row[3] += (not got) and case["expected"]
    total = [sum(v[i] for v in per.values()) for i in range(4)]
    return {"name": name, "per": dict(per), "total": total}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the cases")
    parser.add_argument("--timeout", type=float, default=5.0, help="our per-rollout timeout (s)")
    parser.add_argument("--show-errors", action="store_true", help="list the cases we get wrong")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    cases = load(args.data)
    print(f"{len(cases)} cases from {args.data}; pinned to core {args.core}; {args.repeat} timed passes")

    t0 = time.perf_counter()
    ours, ours_lat, ours_status = run_ours(cases, args.repeat, args.timeout)
    ours_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    mv, mv_lat, mv_info = run_math_verify(cases, args.repeat)
    mv_wall = time.perf_counter() - t0

    a, b = report("ours", cases, ours), report("math-verify", cases, mv)
    print(f"\n{'category':26s} {'n':>4s} | {'ours acc':>8s} {'FP':>3s} {'FN':>3s} | {'MV acc':>8s} {'FP':>3s} {'FN':>3s}")
    for cat in sorted(a["per"], key=lambda c: -a["per"][c][0]):
        x, y = a["per"][cat], b["per"][cat]
        print(f"{cat:26s} {x[0]:4d} | {x[1] / x[0]:8.3f} {x[2]:3d} {x[3]:3d} | {y[1] / y[0]:8.3f} {y[2]:3d} {y[3]:3d}")
    for res in (a, b):
        n, right, fp, fn = res["total"]
        print(f"TOTAL {res['name']:12s} accuracy {right / n:.3f} ({right}/{n})  false positives {fp}  false negatives {fn}")
    print(f"our statuses: {ours_status}; math-verify: {mv_info}")

    ours_rate = len(ours_lat) / sum(ours_lat)
    mv_rate = len(mv_lat) / sum(mv_lat)
    print(f"\nthroughput on one core: ours {ours_rate:.1f} verifications/s, math-verify {mv_rate:.1f} verifications/s, "
          f"ratio {ours_rate / mv_rate:.2f}x (wall: ours {ours_wall:.1f}s, math-verify {mv_wall:.1f}s)")
    for name, lat in (("ours", ours_lat), ("math-verify", mv_lat)):
        print(f"latency {name:12s} p50 {1000 * statistics.median(lat):8.2f} ms  p99 {1000 * pct(lat, 0.99):8.2f} ms  max {1000 * max(lat):8.2f} ms")
    if args.show_errors:
        for case, got in zip(cases, ours):
            if got != case["expected"]:
                print(f"  wrong: {case['id']} {case['category']} expected {case['expected']} gold {case['gold'][:60]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
