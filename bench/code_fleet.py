"""The code verifier against a sandbox fleet: programs in flight at this host's CPU count vs at the fleet's size.

Starts ``--services`` sandbox services (``cohort serve sandbox``, ``COHORT_SANDBOX_POOL_SIZE=--pool-size``) on
127.0.0.1 and scores ``--groups`` groups of 8 programs through one :class:`CodeVerifier` with a
:class:`GrpcBackend` to all of them, the groups in parallel as a verifier server scores a batch. Every program
sleeps ``--sleep-s`` (a test waiting on I/O: latency, not CPU) and then passes its one assert. Two verifiers,
same run, same fleet:

- *baseline*: one thread per program in flight, 2 x this host's CPUs (what the code verifier kept before);
- *fleet*: the backend's ``concurrency``, 16 per sandbox service.

Prints seconds for all programs, programs per second and the ratio; exit 1 if any program is not scored 1.0.

    .venv/bin/python bench/code_fleet.py [--services 2] [--pool-size 8] [--groups 8] [--sleep-s 0.2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cohort.verifiers.base import CodeTests, GroupRequest, Reference, Rollout, VerifyContext
from cohort.verifiers.code import CodeVerifier, GrpcBackend

START_TIMEOUT_S = 120.0


def start_services(n: int, pool_size: int, folder: Path) -> tuple[list[subprocess.Popen], list[str]]:
    env = {**os.environ, "COHORT_SANDBOX_POOL_SIZE": str(pool_size)}
    procs, endpoints = [], []
    for i in range(n):
        port_file = folder / f"port{i}"
        procs.append(subprocess.Popen([sys.executable, "-m", "cohort.cli", "serve", "sandbox", "--port", "0",
                                       "--port-file", str(port_file)], env=env, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and port_file.read_text().strip()):
            if procs[-1].poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"code_fleet: error: sandbox service {i} did not start")
            time.sleep(0.1)
        endpoints.append(f"127.0.0.1:{port_file.read_text().strip()}")
    return procs, endpoints


def score_all(verifier: CodeVerifier, groups: list[GroupRequest]) -> tuple[float, int]:
    started = time.perf_counter()
    with ThreadPoolExecutor(len(groups)) as pool:
        results = list(pool.map(lambda g: verifier.verify_group(g, VerifyContext()), groups))
    return time.perf_counter() - started, sum(r.reward == 1.0 for group in results for r in group)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=2, help="sandbox services in the fleet")
    ap.add_argument("--pool-size", type=int, default=8, help="slots per pool of each service")
    ap.add_argument("--groups", type=int, default=8, help="groups of 8 programs, scored in parallel")
    ap.add_argument("--sleep-s", type=float, default=0.2, help="seconds each program sleeps")
    ap.add_argument("--rounds", type=int, default=3, help="measurements per verifier (median reported)")
    args = ap.parse_args()
    code = f"import time\ntime.sleep({args.sleep_s!r})\ndef add(a, b):\n    return a + b\n"
    tests = CodeTests("asserts", asserts=("assert add(1, 2) == 3",))
    groups = [GroupRequest("code", tuple(Rollout(i, code) for i in range(8)), Reference(code_tests=tests),
                           group_id=f"g{k}") for k in range(args.groups)]
    n = 8 * args.groups
    with tempfile.TemporaryDirectory() as folder:
        procs, endpoints = start_services(args.services, args.pool_size, Path(folder))
        try:
            figures = {}
            for label, threads in (("baseline", 2 * (os.cpu_count() or 1)), ("fleet", None)):
                verifier = CodeVerifier(backend=GrpcBackend(",".join(endpoints), tls=None), max_parallel=threads)
                score_all(verifier, groups[:1])  # warm: channels, slots
                runs = [score_all(verifier, groups) for _ in range(args.rounds)]
                if any(ok != n for _, ok in runs):
                    print(f"code_fleet: error: {label}: {[ok for _, ok in runs]} of {n} programs scored 1.0", file=sys.stderr)
                    return 1
                seconds = statistics.median(s for s, _ in runs)
                figures[label] = seconds
                print(f"{label:<9} {verifier._executor._max_workers:>3} in flight: {n} programs sleeping {args.sleep_s:g} s "
                      f"in {seconds:.2f} s ({n / seconds:.0f}/s; rounds {', '.join(f'{s:.2f}' for s, _ in runs)})")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait()
    print(f"fleet / baseline seconds = {figures['fleet'] / figures['baseline']:.2f} "
          f"({args.services} services x {args.pool_size} slots, {os.cpu_count()} CPUs here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
