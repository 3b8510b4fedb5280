"""The README's first command: `cohort train` on the embedded default learns from scratch to a mean
reward of 0.9 (real math and arith services on loopback, real tiny Llama)."""

from __future__ import annotations

import json
import sys
import time

import pytest


@pytest.mark.slow
def test_embedded_default_reaches_target_reward(tmp_path, deadline, subprocesses):
    started = time.monotonic()
    proc = subprocesses.run([sys.executable, "-m", "cohort.cli", "train", f"run.output_dir={tmp_path}",
                             "run.progress=false"], timeout=deadline(600))  # about 40 s idle
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last5 = [r["reward/mean"] for r in records[-5:]]
    assert sum(last5) / 5 >= 0.9, [round(r["reward/mean"], 3) for r in records[-20:]]
    assert records[0]["reward/mean"] < 0.2  # it really starts from scratch
    assert all(r["verify/unusable_frac"] == 0.0 for r in records)
    assert (tmp_path / "reward_curve.png").exists() and (tmp_path / "final" / "config.json").exists()
    assert elapsed < 600, f"took {elapsed:.0f}s"
