"""``bench/gpu_accept.sh --dry-run``: every stage of the GPU acceptance run end to end on the CPU at tiny sizes,
through the script a GPU session runs (its import root: the checkout as ``cohort``, nothing installed), so the
script cannot rot between GPU loans. Minutes on a busy 2-core machine: a ``bench`` test (.ci/run's bench step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.bench
def test_gpu_accept_dry_run_on_cpu(tmp_path):
    proc = subprocess.run([str(ROOT / "bench" / "gpu_accept.sh"), "--dry-run"], capture_output=True, text=True,
                          timeout=560, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable, "OUT": str(tmp_path)})
    result = json.loads((tmp_path / "gpu_accept.json").read_text())
    assert proc.returncode == 0, json.dumps(result, indent=1)[-3000:] + proc.stderr[-2000:]
    stages = result["stages"]
    assert set(stages) == {"tests", "precision", "memory", "ipc", "train"} and result["ok"]
    assert stages["ipc"]["ipc"].startswith("skipped") and "ipc: skipped" in proc.stdout  # no GPU: said, not faked
    assert [(r["kind"], r["equal"]) for r in stages["ipc"]["gloo"]] == [("full", True), ("delta", True), ("delta", True)]
    assert stages["precision"]["bfloat16"]["moved_share"] >= 0.99 > 0.10 > stages["precision"]["bfloat16-pure"]["moved_share"]
    assert stages["memory"]["peak_gib"] > 0 and stages["memory"]["plan_gib"] > 0
    assert stages["train"]["embedded"]["steps"] == 3 and stages["train"]["smollm2_geometry"]["steps"] == 2
    assert "model.dtype=float32" in stages["train"]["embedded"]["policy_line"]  # the CPU keeps float32
