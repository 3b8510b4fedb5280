"""Accuracy, false positives/negatives, throughput and latency: our ``math`` verifier vs Math-Verify.

Both run in this process on the same labelled cases, interleaved case by case, pinned to one CPU core (our worker pool has one
worker on the same core, so the comparison is one core against one core):

- ours: ``MathVerifier.verify_group`` (the real path: extraction, cheap pass, worker pool), one group
  per case, verdict cache disabled so every case is really checked.
- Math-Verify: its recommended reward configuration, ``parse`` of the gold (as ``\\boxed{gold}``) and of
  the response with ``[LatexExtractionConfig(), ExprExtractionConfig()]``, then ``verify(gold, answer)``.
  It runs on the main thread, where its SIGALRM timeouts work.

A case may carry ``prompt`` (passed as the request's prompt, where a rounding request lives) and ``options``
(the request's options map); Math-Verify sees neither.

A case counts as correct when the verdict (CORRECT vs anything else) equals the label; a false positive
is CORRECT on a case labelled false. VERIFIER_TIMEOUT/ERROR are reported separately and count as
"not CORRECT" for accuracy.

    .venv/bin/python bench/math_bench.py [--cases PATH] [--core N] [--repeat R] [--timeout S]
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


class Ours:
    """Our verifier through ``MathVerifier.verify_group``: one worker, verdict cache off."""

    def __init__(self, timeout: float):
        from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
        from cohort.verifiers.math import MathVerifier

        self._types = (GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext)
        self.timeout = timeout
        self.verifier = MathVerifier(workers=1, cache_size=0)
        self.verifier.pool.start()
        self.statuses: dict[str, int] = defaultdict(int)
        self.check("x^2+0", "\\boxed{x^2}")  # warm-up: the worker is up and has imported SymPy
        self.statuses.clear()

    def check(self, gold: str, output: str, prompt: str = "", options: dict | None = None) -> bool:
        GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext = self._types
        group = GroupRequest("math", (Rollout(0, output),), Reference(answer=gold), prompt=prompt, rollout_timeout_s=self.timeout, options=dict(options or {}))
        (result,) = self.verifier.verify_group(group, VerifyContext(deadline=time.monotonic() + self.timeout + 1))
        self.statuses[result.status.value] += 1
        return result.status is RolloutStatus.OK and result.verdict is Verdict.CORRECT

    def close(self) -> None:
        self.verifier.close()


class MathVerify:
    """Math-Verify's recommended reward configuration, on the main thread."""

    def __init__(self):
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        self._parse, self._verify = parse, verify
        self.config = [LatexExtractionConfig(), ExprExtractionConfig()]
        self.statuses: dict[str, int] = defaultdict(int)

    def check(self, gold: str, output: str, prompt: str = "", options: dict | None = None) -> bool:
        try:  # Math-Verify has no prompt or options: it gets the same gold and response
            g = self._parse("\\boxed{" + gold + "}", extraction_config=self.config)
            a = self._parse(output, extraction_config=self.config)
            return bool(self._verify(g, a))
        except Exception:  # Math-Verify raising is a "not correct" for it
            self.statuses["exception"] += 1
            return False


def run_both(cases: list[dict], repeat: int, timeout: float):
    """Interleaved case by case, so that load from other processes hits both alike."""
    ours, mv = Ours(timeout), MathVerify()
    verdicts = {"ours": [], "mv": []}
    latencies = {"ours": [], "mv": []}
    try:
        for r in range(repeat):
            for case in cases:
                for name, impl in (("ours", ours), ("mv", mv)):
                    t0 = time.perf_counter()
                    ok = impl.check(case["gold"], case["output"], case.get("prompt", ""), case.get("options"))
                    latencies[name].append(time.perf_counter() - t0)
                    if r == 0:
                        verdicts[name].append(ok)
        return verdicts, latencies, dict(ours.statuses), dict(mv.statuses)
    finally:
        ours.close()


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
    parser.add_argument("--cases", "--data", dest="data", type=Path, default=DEFAULT_DATA,
                        help="labelled cases (JSON lines: gold, output, expected, category; optional prompt, options); default: the development set")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the cases")
    parser.add_argument("--timeout", type=float, default=5.0, help="our per-rollout timeout (s)")
    parser.add_argument("--show-errors", action="store_true", help="list the cases we get wrong")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    try:
        import math_verify  # noqa: F401  (the baseline; the `bench` extra)
    except ImportError:
        print("math-verify is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    if not args.data.exists():
        print(f"no such data file: {args.data}", file=sys.stderr)
        return 2
    cases = load(args.data)
    print(f"{len(cases)} cases from {args.data}; pinned to core {args.core}; {args.repeat} timed passes")

    verdicts, latencies, ours_status, mv_info = run_both(cases, args.repeat, args.timeout)
    ours, mv = verdicts["ours"], verdicts["mv"]
    ours_lat, mv_lat = latencies["ours"], latencies["mv"]
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
          f"ratio {ours_rate / mv_rate:.2f}x ({len(ours_lat)} verifications each; load average {os.getloadavg()[0]:.1f})")
    for name, lat in (("ours", ours_lat), ("math-verify", mv_lat)):
        print(f"latency {name:12s} p50 {1000 * statistics.median(lat):8.2f} ms  p99 {1000 * pct(lat, 0.99):8.2f} ms  max {1000 * max(lat):8.2f} ms")
    if args.show_errors:
        for case, got in zip(cases, ours):
            if got != case["expected"]:
                print(f"  wrong: {case['id']} {case['category']} expected {case['expected']} gold {case['gold'][:60]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
