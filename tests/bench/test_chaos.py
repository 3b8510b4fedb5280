"""A one-minute chaos run (``bench/chaos.py``): ``cohort train`` on the embedded task against two replicas
per verifier on loopback while replicas are killed, drained, frozen past the client's deadline and the
sandbox restarts. Every rollout ends with a verdict or a masked status, no infrastructure failure is
scored, the faults were felt, and the reward curve does not collapse next to a fault-free run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_minute_chaos():
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "chaos.py"), "--steps", "40", "--fault-every", "0.8",
                             "--down-s", "2", "--timeout", "2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the bench stops its servers and the trainer on SIGTERM
        out, err = proc.communicate(timeout=60)
        pytest.fail("chaos bench over 300s: " + err[-3000:])
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    report = json.loads(out)
    free, chaos = report["runs"]["fault_free"], report["runs"]["chaos"]
    for label, run in report["runs"].items():
        assert run["rc"] == 0, (label, run.get("log_tail"))
        assert run["steps"] == 40, label  # the run finished
        # every rollout has a verdict or a masked status
        assert run["lost"] == 0 and run["recorded"] == run["generated"], (label, run)
        assert run["infra_scored"] == 0, (label, run["rescore_differ_examples"], run["steps_reward_not_ok_mean"])
        assert run["masked_logged"] == sum(run["masked"].values()), label  # metrics.jsonl agrees with the record
        assert run["rescored_distinct"] > 0
    assert free["masked"] == {} and free["client"]["retries"] == 0  # the fault-free run saw no faults
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
