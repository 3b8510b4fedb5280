"""What gRPC costs: the format verifier through a real server vs the same verifier called in-process.

Same rollouts both ways, at 1, 64 and 512 groups of 8 per call. The gRPC path is the one the trainer
uses (``VerifierClient.verify_groups``: domain -> proto -> loopback -> server -> proto -> domain);
the in-process path calls ``FormatVerifier.verify_group`` on each group. Prints rollouts/s for both
and the ratio. Goal: gRPC costs at most 20% at 64x8. Columns: wall-clock rollouts/s one call at a time
(latency cost), with ``--concurrency`` calls in flight (throughput, as the trainer uses it: it scores
while it generates), and total CPU seconds of client + server per call over in-process CPU seconds
(the figure least disturbed by other load on the machine).

    .venv/bin/python bench/verifier_overhead.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time

from cohort.launch import ServiceProcess
from verifiers.base import GroupRequest, Rollout, VerifyContext
from verifiers.client import VerifierClient
from verifiers.format import FormatVerifier

G = 8


def make_groups(n_groups: int, seed: int = 0) -> list[GroupRequest]:
    rng = random.Random(seed)
    words = "so we add the two numbers and carry the one then check the result twice".split()
    shapes = [
        lambda r, a: f"<think>{r}</think><answer>{a}</answer>",
        lambda r, a: f"<think>{r}</think>\n<answer>{a}</answer> done",
        lambda r, a: f"{r} the answer is {a}",
        lambda r, a: f"<think>{r}</think><answer>{a}</answer><answer>{a + 1}</answer>",
        lambda r, a: f"<think>{r}</think> \\boxed{{{a}}}",
    ]
    groups = []
    for g in range(n_groups):
        rollouts = []
        for i in range(G):
            reasoning = " ".join(rng.choice(words) for _ in range(rng.randint(20, 80)))
            rollouts.append(Rollout(i, rng.choice(shapes)(reasoning, rng.randint(0, 999))))
        groups.append(GroupRequest("format", tuple(rollouts), group_id=f"g{g}"))
    return groups


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_call(fn, calls: int, server_pid: int | None = None) -> float:
    """CPU seconds per call, this process plus the server's: robust on a machine shared with other work."""
    own, srv = time.process_time(), process_cpu_s(server_pid) if server_pid else 0.0
    for _ in range(calls):
        fn()
    used = time.process_time() - own
    if server_pid:
        used += process_cpu_s(server_pid) - srv
    return used / calls


def time_calls(fn, seconds: float) -> list[float]:
    """Per-call wall times, repeating for at least ``seconds`` (and at least 5 calls)."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def throughput(loop, client, groups, seconds: float, concurrency: int) -> float:
    """Rollouts/s with ``concurrency`` calls in flight (the trainer scores while it generates)."""

    async def worker(deadline: float) -> int:
        n = 0
        while time.perf_counter() < deadline or n == 0:
            await client.verify_groups(groups)
            n += 1
        return n

    async def run() -> float:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(worker(t0 + seconds) for _ in range(concurrency)))
        return sum(counts) * len(groups) * G / (time.perf_counter() - t0)

    return loop.run_until_complete(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per configuration and path")
    parser.add_argument("--workers", type=int, default=16, help="server scoring threads")
    parser.add_argument("--concurrency", type=int, default=2, help="calls in flight for the pipelined figure")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 512], help="groups per call")
    args = parser.parse_args()
    verifier = FormatVerifier()
    ctx = VerifyContext()
    with ServiceProcess(["format"], extra_args=["--log-level", "WARNING", "--workers", str(args.workers)]) as server:
        loop = asyncio.new_event_loop()
        client = VerifierClient({"format": [server.endpoint]}, timeout_s=120)
        loop.run_until_complete(client.handshake())
        print(f"format verifier, groups of {G}, server {server.endpoint}; median of >= {args.seconds}s per cell")
        print("sequential: one call at a time (latency cost); pipelined: "
              f"{args.concurrency} calls in flight (throughput, as the trainer uses it)")
        print(f"{'groups/call':>11} {'in-proc r/s':>12} {'seq gRPC r/s':>13} {'seq overhead':>13} "
              f"{'piped gRPC r/s':>15} {'piped/in-proc':>14} {'CPU gRPC/in-proc':>17}")
        for n in args.sizes:
            groups = make_groups(n)
            inproc = lambda: [verifier.verify_group(g, ctx) for g in groups]  # noqa: E731
            remote = lambda: loop.run_until_complete(client.verify_groups(groups))  # noqa: E731
            a, b = inproc(), remote()  # warm-up, and the same verdicts both ways
            assert [[r.reward for r in x] for x in a] == [[r.reward for r in x.results] for x in b]
            t_in = statistics.median(time_calls(inproc, args.seconds))
            t_rpc = statistics.median(time_calls(remote, args.seconds))
            piped = throughput(loop, client, groups, args.seconds, args.concurrency)
            calls = max(3, int(args.seconds / t_rpc))
            cpu_ratio = cpu_per_call(remote, calls, server.proc.pid) / cpu_per_call(inproc, calls)
            r_in = n * G / t_in
            print(f"{n:>11} {r_in:>12,.0f} {n * G / t_rpc:>13,.0f} {100 * (t_rpc / t_in - 1):>12.1f}% "
                  f"{piped:>15,.0f} {piped / r_in:>14.3f} {cpu_ratio:>17.3f}")
        loop.run_until_complete(client.close())
        loop.close()


if __name__ == "__main__":
    main()
