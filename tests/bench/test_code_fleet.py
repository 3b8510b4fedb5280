"""A short run of ``bench/code_fleet.py`` against one real sandbox service: both verifiers score every
program 1.0, and each keeps the number of programs in flight the bench says (2 x CPUs, then 16 per service)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WALL_S = 120.0
"""One sandbox service's start and 2 x 16 programs of 0.05 s took 4 s here; the limit, scaled by the machine's
measured slowdown, leaves room for far worse."""


def test_code_fleet_bench_scores_every_program_at_both_widths(tmp_path, deadline, subprocesses) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "code_fleet.py"), "--services", "1", "--pool-size", "4",
           "--groups", "2", "--rounds", "1", "--sleep-s", "0.05"]
    proc = subprocesses.run(cmd, timeout=deadline(WALL_S, 0.5), cwd=tmp_path, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["baseline", str(2 * os.cpu_count()), "in"], lines
    assert lines[1].split()[:3] == ["fleet", "16", "in"], lines
    assert "16 programs sleeping 0.05 s" in lines[0] and lines[2].startswith("fleet / baseline seconds = "), lines
