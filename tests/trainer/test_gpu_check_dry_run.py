"""``bench/gpu_check.py --device cpu --size tiny``: the GPU check script runs end to end on a CPU.

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
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--device", "cpu", "--size", "tiny", "--steps", "1",
         "--prompts", "2", "--generations", "2", "--micro-batch", "2", "--prompt-len", "4", "--completion-len", "8",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["timed_steps"] == 1 and result["learner_step_s"] > 0
    assert [s["step"] for s in result["steps"]] == [0, 1]
    assert all(s["gen_tokens"] == 2 * 2 * 8 for s in result["steps"])  # EOS disabled: every row runs to the end
