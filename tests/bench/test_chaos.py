"""A one-minute chaos run (``bench/chaos.py``): ``cohort train`` on the embedded task against two replicas
per verifier on loopback while replicas are killed, drained, frozen past the client's deadline and the
sandbox restarts. Every rollout ends with a verdict or a masked status, no infrastructure failure is
scored, the faults were felt, and the reward curve does not collapse next to a fault-free run. That takes
minutes on a busy machine (marker ``bench``: .ci/run's bench step); the default suite runs a short one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


SCORING_TIMEOUT_S = 2.0
"""The client's deadline per batch on an idle machine; the run uses it times the machine's slowdown
(tests/conftest.py), so a loaded machine's slow batches are not masked in the fault-free run (it had 128
at load 4-5 with a flat 2 s), while a replica frozen past the deadline (SIGSTOP for deadline + 1 s) still is."""
MAX_SCORING_TIMEOUT_S = 4.0
"""At most this: the bench freezes a replica for the deadline + 1 s, and the trainer's start-up handshake
(``VerifierClient.handshake``, 10 s per endpoint) must outlast a frozen replica while faults start."""
WALL_S = 300.0


def run_chaos(steps: int, slowdown, deadline, subprocesses) -> dict:
    """``bench/chaos.py --steps steps``'s report (its process group ended with the test, whatever happens)."""
    factor = slowdown(0.5)
    timeout = min(SCORING_TIMEOUT_S * factor, MAX_SCORING_TIMEOUT_S)
    wall_s = deadline(max(120.0, WALL_S * steps / 40))
    try:
        proc = subprocesses.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--steps", str(steps),
                                 "--fault-every", "0.8", "--down-s", "2", "--timeout", f"{timeout:.2f}", "--json"],
                                timeout=wall_s, cwd=ROOT)  # on its timeout the bench gets SIGTERM: it stops its fleet
    except subprocess.TimeoutExpired:
        pytest.fail(f"chaos bench over {wall_s:.0f}s (slowdown {factor:.2f})")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_chaos_smoke(slowdown, deadline, subprocesses):
    """A short chaos run: both runs finish, every rollout has a verdict or a masked status, none scored from an
    infrastructure failure, faults were injected and every replica came back."""
    report = run_chaos(8, slowdown, deadline, subprocesses)
    for label, run in report["runs"].items():
        assert run["rc"] == 0 and run["steps"] == 8, (label, run.get("log_tail"))
        assert run["lost"] == 0 and run["recorded"] == run["generated"], (label, run)
        assert run["infra_scored"] == 0, (label, run["rescore_differ_examples"])
    assert report["runs"]["chaos"]["faults"] and report["runs"]["chaos"]["fault_errors"] == []


@pytest.mark.slow
@pytest.mark.bench
def test_one_minute_chaos(slowdown, deadline, subprocesses):
    report = run_chaos(40, slowdown, deadline, subprocesses)
    factor = slowdown(0.5)
    free, chaos = report["runs"]["fault_free"], report["runs"]["chaos"]
    for label, run in report["runs"].items():
        assert run["rc"] == 0, (label, factor, run.get("log_tail"))
        assert run["steps"] == 40, label  # the run finished
        # every rollout has a verdict or a masked status
        assert run["lost"] == 0 and run["recorded"] == run["generated"], (label, run)
        assert run["infra_scored"] == 0, (label, run["rescore_differ_examples"], run["steps_reward_not_ok_mean"])
        assert run["masked_logged"] == sum(run["masked"].values()), label  # metrics.jsonl agrees with the record
        assert run["rescored_distinct"] > 0
    # the fault-free run saw no faults (its deadline scaled with the machine's slowdown at the start)
    assert free["masked"] == {} and free["client"]["retries"] == 0, (factor, free["masked"], free["client"])
    kinds = {e["fault"] for e in chaos["faults"]}
    assert len(kinds) >= 2, chaos["faults"]  # several kinds of fault were injected
    assert chaos["fault_errors"] == [], chaos["fault_errors"]  # and every replica came back
    side = chaos["code_side_load"]
    assert side["differ"] == 0 and side["lost_calls"] == 0, side
    felt = (sum(chaos["masked"].values()) + chaos["client"]["retries"] + sum(side["masked"].values())
            + side["client"]["retries"])
    assert felt > 0, (chaos["client"], side)  # a fault actually hit a call
    assert free["steps_all_masked"] == 0 and None not in free["curve"]
    assert chaos["steps_all_masked"] <= 40 // 2, chaos["curve"]  # a fault may mask a whole step, not most of them
    start = sum(free["curve"][:5]) / 5
    assert chaos["final_reward"] > start + 0.05, chaos["curve"]  # it still learned
    assert chaos["final_reward"] >= 0.5 * free["final_reward"], (chaos["final_reward"], free["final_reward"])
