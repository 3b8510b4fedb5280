"""``bench/gpu_check.sh --device cpu --size tiny --overlap``: the GPU check runs end to end on a CPU, through
the shell script a GPU session runs (its import root: the checkout as ``cohort``, nothing installed).

The GPU machines are lent rarely and briefly; a script broken by a config change must fail here, not there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        [str(ROOT / "bench" / "gpu_check.sh"), "--device", "cpu", "--size", "tiny", "--steps", "2",
         "--prompts", "2", "--generations", "2", "--micro-batch", "2", "--prompt-len", "4", "--completion-len", "8",
         "--overlap", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,  # started from elsewhere: the script finds its tree
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["timed_steps"] == 2 and result["learner_step_s"] > 0
    assert [s["step"] for s in result["steps"]] == [0, 1, 2]
    assert all(s["gen_tokens"] == 2 * 2 * 8 for s in result["steps"])  # no stop token: every row runs to the end
    overlap = result["overlap"]
    assert [s["step"] for s in overlap["steps"]] == [0, 1, 2]
    staleness = [s["staleness"] for s in overlap["steps"]]
    assert staleness[0] == 0 and max(staleness) == overlap["staleness_max"] <= 1, staleness  # the bound of one version
    assert overlap["weight_bytes"] == result["params"] * 4  # float32 on the CPU: the whole model went to the worker
    assert overlap["step_s"] > 0 and overlap["lockstep_step_s"] == result["step_s"]


def test_gpu_check_tests_run_on_cpu(tmp_path):
    """``bench/gpu_check.sh --tests``: the device tests through the same import root; on a CPU the GPU ones skip."""
    proc = subprocess.run([str(ROOT / "bench" / "gpu_check.sh"), "--tests"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "passed" in proc.stdout and "failed" not in proc.stdout
