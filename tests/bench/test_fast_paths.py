"""bench/fast_paths.py on the shared TRL workload's tiny model (the main job's own without it), one round:
every pair is reported with its ratio and gain, and every log-prob back-end gives the module's log-probs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("fast_paths", ROOT / "bench" / "fast_paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fast_paths_smoke_on_the_tiny_workload():
    fp = bench()
    # the shared TRL workload lives beside the checkout; a clean clone has the main job's own tiny model
    model = "tiny" if (fp.WORKLOAD / "WORKLOAD.md").exists() else "embedded"
    lines: list[str] = []
    result = fp.run(model, rounds=1, warmup=0, threads=2, log=lines.append)
    assert set(result["pairs"]) == set(fp.PAIRS)
    for path, row in result["pairs"].items():
        assert (row["fast"], row["plain"]) == fp.PAIRS[path]
        if row["applied"]:
            assert row["fast_s"] > 0 and row["plain_s"] > 0, path
            assert row["ratio"] == pytest.approx(row["fast_s"] / row["plain_s"]) and row["paired_ratio"] > 0
        assert row["gain"] == pytest.approx(1 - row["ratio"])
        assert any(line.startswith(path) for line in lines), path
    assert result["packed"]  # the tiny workload's groups pack: every pair is measured
    assert all(len(v) == 1 for kind in result["times"].values() for v in kind.values())
    assert all(n > 0 for counts in result["generated_tokens"].values() for n in counts)
    diffs = result["logprob_max_abs_diff"]
    assert set(diffs) == {"module", "llama_cpu", "llama_cpu_cost0"}
    assert max(diffs.values()) < 1e-4, diffs
