"""What gRPC costs: the format verifier through a real server vs the same verifier called in-process.

Same rollouts every way, at 1, 64 and 512 groups of 8 per call. The gRPC path is the one the trainer
uses (``VerifierClient.verify_groups``: domain -> proto -> loopback -> server -> proto -> domain); the
in-process path calls ``FormatVerifier.verify_group`` on each group, in this process, on one core.
Up to three services are measured: the default server (scoring in a thread), one started with
``--scoring-procs 2`` (each batch split over two scoring processes, as a server uses its cores), and,
with ``--replicas 2``, two default servers behind one client (the client's round robin across calls:
one call is scored by one replica, calls in flight by both). With ``--baseline DIR`` (the root of another
checkout, e.g. ``git worktree add DIR HEAD~1``), the threaded and the scoring-process servers are also
started from that code (``@base``), timed in the same rounds: a change to the server, measured against
the code before it in one run.

The paths are timed interleaved, one call of each in turn, so a load change on a shared machine
hits them all alike; each figure is a median over the rounds. Columns: rollouts/s one call at a
time (latency), with ``--concurrency`` calls in flight (throughput, as the trainer uses it: it
scores while it generates), their ratios to in-process, and the CPU seconds of client + server per
call over the in-process CPU seconds (what the service costs in cores). Goal: gRPC costs at most
20% at 64x8.

    .venv/bin/python bench/verifier_overhead.py [--seconds 3] [--scoring-procs 2] [--replicas 2] [--sizes 64]
                                                [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.base import GroupRequest, Rollout, VerifyContext
from cohort.verifiers.client import VerifierClient
from cohort.verifiers.format import FormatVerifier

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
    """utime + stime of one process, all its threads (its children are not included)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its live children (a server and its scoring processes)."""
    total = process_cpu_s(pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    total += process_cpu_s(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return total


def cpu_per_call(fn: Callable[[], object], calls: int, server_pids: tuple[int, ...] = ()) -> float:
    """CPU seconds per call, this process plus the servers': robust on a machine shared with other work."""
    own, srv = time.process_time(), sum(tree_cpu_s(p) for p in server_pids)
    for _ in range(calls):
        fn()
    used = time.process_time() - own
    used += sum(tree_cpu_s(p) for p in server_pids) - srv
    return used / calls


def interleaved(paths: dict[str, Callable[[], object]], seconds: float, min_rounds: int = 5) -> dict[str, float]:
    """Median seconds per call of each path, timing one call of each in turn."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    deadline = time.perf_counter() + seconds * len(paths)
    rounds = 0
    while time.perf_counter() < deadline or rounds < min_rounds:
        for name, fn in paths.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    return {name: statistics.median(ts) for name, ts in times.items()}


async def in_flight(client: VerifierClient, groups: list[GroupRequest], k: int) -> None:
    await asyncio.gather(*(client.verify_groups(groups) for _ in range(k)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per configuration and path")
    parser.add_argument("--workers", type=int, default=16, help="server scoring threads")
    parser.add_argument("--scoring-procs", type=int, default=2, help="scoring processes of the second server (0: skip it)")
    parser.add_argument("--replicas", type=int, default=0,
                        help="also measure this many default (thread) servers behind one client (0: skip)")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight for the pipelined figure")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="also serve from this checkout's root (the code before a change), same rounds")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 512], help="groups per call")
    args = parser.parse_args()
    verifier = FormatVerifier()
    ctx = VerifyContext()
    threads = ["--log-level", "WARNING", "--workers", str(args.workers)]
    servers = {"threads": [ServiceProcess(["format"], extra_args=threads)]}
    if args.scoring_procs:
        servers[f"{args.scoring_procs} procs"] = [ServiceProcess(
            ["format"], extra_args=["--log-level", "WARNING", "--scoring-procs", str(args.scoring_procs)])]
    if args.replicas:
        servers[f"{args.replicas} replicas"] = [ServiceProcess(["format"], extra_args=threads) for _ in range(args.replicas)]
    if args.baseline is not None:  # `cohort` imported from the other checkout: its root is the package
        shadow = Path(tempfile.mkdtemp(prefix="cohort-baseline-"))
        (shadow / "cohort").symlink_to(args.baseline.resolve(), target_is_directory=True)
        env = {"PYTHONPATH": str(shadow)}
        servers["threads@base"] = [ServiceProcess(["format"], extra_args=threads, env=env)]
        if args.scoring_procs:
            servers[f"{args.scoring_procs} procs@base"] = [ServiceProcess(
                ["format"], extra_args=["--log-level", "WARNING", "--scoring-procs", str(args.scoring_procs)], env=env)]
    loop = asyncio.new_event_loop()
    try:
        for group in servers.values():
            for server in group:
                server.start()
        clients = {name: VerifierClient({"format": [s.endpoint for s in group]}, timeout_s=120)
                   for name, group in servers.items()}
        for client in clients.values():
            loop.run_until_complete(client.handshake())
        print(f"format verifier, groups of {G}; servers: "
              + ", ".join(f"{n} @ {' '.join(s.endpoint for s in group)}" for n, group in servers.items()))
        print(f"interleaved medians over >= {args.seconds}s per path; seq: one call at a time; "
              f"piped: {args.concurrency} calls in flight; ratios are gRPC throughput / in-process")
        print(f"{'groups/call':>11} {'server':>13} {'in-proc r/s':>12} {'seq r/s':>9} {'seq ratio':>10} "
              f"{'piped r/s':>10} {'piped ratio':>12} {'CPU gRPC/in-proc':>17}")
        for n in args.sizes:
            groups = make_groups(n)
            inproc = lambda: [verifier.verify_group(g, ctx) for g in groups]  # noqa: E731
            paths: dict[str, Callable[[], object]] = {"in-proc": inproc}
            for name, client in clients.items():
                seq = lambda c=client: loop.run_until_complete(c.verify_groups(groups))  # noqa: E731
                piped = lambda c=client: loop.run_until_complete(in_flight(c, groups, args.concurrency))  # noqa: E731
                a, b = inproc(), seq()  # warm-up, and the same verdicts both ways
                assert [[r.reward for r in x] for x in a] == [[r.reward for r in x.results] for x in b]
                paths[f"{name} seq"], paths[f"{name} piped"] = seq, piped
            t = interleaved(paths, args.seconds)
            r_in = n * G / t["in-proc"]
            for name in clients:
                r_seq = n * G / t[f"{name} seq"]
                r_piped = n * G * args.concurrency / t[f"{name} piped"]
                calls = max(3, int(args.seconds / t[f"{name} seq"]))
                server_pids = tuple(s.proc.pid for s in servers[name])
                cpu_ratio = cpu_per_call(paths[f"{name} seq"], calls, server_pids) / cpu_per_call(inproc, calls)
                print(f"{n:>11} {name:>13} {r_in:>12,.0f} {r_seq:>9,.0f} {r_seq / r_in:>10.3f} "
                      f"{r_piped:>10,.0f} {r_piped / r_in:>12.3f} {cpu_ratio:>17.3f}", flush=True)
        for client in clients.values():
            loop.run_until_complete(client.close())
    finally:
        loop.close()
        for group in servers.values():
            for server in group:
                server.stop()


if __name__ == "__main__":
    main()
