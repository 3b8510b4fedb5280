"""``bench/trainer_vs_trl.py --model smollm2`` at toy size, so the real-model comparison does not rot.

One step of each side on SmolLM2-135M-Instruct (2 GSM8K prompts x G=4, 8 completion tokens, micro-batches
of 4 rows): the real TRL 1.16 GRPOTrainer in ``.venv-peer`` with the Cohort TRL adapter, and ``cohort
train``, against the same math and format services. The TRL side asserts that its prompt token ids are
Cohort's. Timing figures are not checked here (bench scripts measure; tests don't time).

Needs trl (the TRL CI step, ``scripts/ci-trl``, runs it in ``.venv-peer``) and the project's ``.venv``
(the driver and the Cohort side run there: it has the model converter and the trainer extras).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.trl, pytest.mark.slow, pytest.mark.timeout(1800)]

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
COHORT_PY = ROOT / ".venv" / "bin" / "python"


def test_one_step_of_each_side_reports_every_phase(tmp_path):
    assert COHORT_PY.exists(), f"the project venv is missing at {COHORT_PY} (./scripts/setup)"
    out = tmp_path / "summary.json"
    cmd = [str(COHORT_PY), str(ROOT / "bench" / "trainer_vs_trl.py"), "--model", "smollm2", "--steps", "1",
           "--warmup", "0", "--prompts-per-step", "2", "--num-generations", "4", "--max-completion-length", "8",
           "--micro-batch", "4", "--rows", "16", "--cohort-python", str(COHORT_PY), "--keep", str(tmp_path / "logs"),
           "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1700)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Cohort/TRL" in proc.stdout and "differences between the sides" in proc.stdout
    (rep,) = json.loads(out.read_text())["repeats"]
    for side in ("trl", "cohort"):
        s = rep[side]
        assert s["rss_mib"] > 500, (side, s)  # a 135M-parameter float32 model alone is 540 MB
        assert s["generate_s"] > 0 and s["logprobs_s"] > 0, (side, s)  # beta > 0: reference log-probs
        # TRL always runs the update; Cohort skips it when no group has signal (likely at 8 tokens)
        assert s["update_s"] > 0 if side == "trl" else s["update_s"] >= 0, (side, s)
        assert s["wall_s"] >= s["generate_s"] + s["update_s"], (side, s)
        assert 0 < s["tok_per_s"] and s["tok_per_s"] <= s["tok_per_s_gen"], (side, s)
        assert math.isfinite(s["reward_mean"]) and 0.0 <= s["reward_mean"] <= 1.2, (side, s)  # math 1 + format 0.2
    print(proc.stdout[-2500:], file=sys.stderr)
