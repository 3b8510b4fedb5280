"""A one-minute soak (``bench/soak.py``): math, code (through the sandbox service) and format servers on
loopback under a realistic mix at 1x and 2x measured capacity. No verdict may change under load, every
call ends with an answer or a shed status, refusals are immediate, and nothing leaks. Marker ``bench``
(.ci/run's bench step); the default suite runs a few seconds of it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_soak_smoke(tmp_path, deadline, subprocesses):
    """A few seconds at 1x and 2x: every call ends with a status, no verdict changes, the servers stay up."""
    out = tmp_path / "soak.json"
    proc = subprocesses.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--seconds", "6", "--calibrate-seconds",
                             "2", "--sample-s", "1", "--out", str(out)], timeout=deadline(60), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for label, phase in report["phases"].items():
        ended = phase["answered"] + phase["resource_exhausted"] + phase["deadline_exceeded"] + phase["other_errors"]
        assert phase["answered"] > 0 and ended == phase["calls_sent"], (label, phase)
        assert phase["differ"] == 0, (label, phase["differ_examples"])
    assert all(report["alive"].values()) and all(report["serving"].values()), (report["alive"], report["serving"])


@pytest.mark.slow
@pytest.mark.bench
def test_one_minute_soak(tmp_path, deadline, subprocesses):
    out = tmp_path / "soak.json"
    proc = subprocesses.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--seconds", "40", "--calibrate-seconds",
                             "6", "--sample-s", "2", "--out", str(out)], timeout=deadline(240), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["capacity_groups_per_s"] > 0
    one, two = report["phases"]["1x"], report["phases"]["2x"]
    assert two["offered_groups_per_s"] == pytest.approx(2 * one["offered_groups_per_s"], rel=1e-3)
    for label, phase in report["phases"].items():
        assert phase["answered"] > 0, label
        ended = phase["answered"] + phase["resource_exhausted"] + phase["deadline_exceeded"] + phase["other_errors"]
        assert ended == phase["calls_sent"], (label, phase)  # every call ended with a status
        assert phase["other_errors"] == 0, (label, phase["errors"])
        assert phase["differ"] == 0, (label, phase["differ_examples"])  # no verdict changes under load
        assert phase["rollouts"] > 0
        if phase["resource_exhausted"]:
            assert phase["refused_p99_s"] < 1.0, (label, phase["refused_p99_s"])  # shed at once, not queued
        for name, codes in phase["codes_by_verifier"].items():
            assert codes.get("OK", 0) > 0, (label, name, codes)  # every server kept answering
    assert all(report["alive"].values()) and all(report["serving"].values()), (report["alive"], report["serving"])
    for name, res in report["resources"].items():
        start, end = res["start"], res["end"]
        assert len(res["series"]) >= 10, name
        assert end["fds"] <= start["fds"] + 100, (name, start, end)
        assert end["threads"] <= start["threads"] + 100, (name, start, end)
        assert end["rss_mb"] <= 2 * start["rss_mb"] + 200, (name, start, end)
    for label, by_server in report["rss_by_minute"].items():  # a per-minute series per phase and server
        assert set(by_server) == set(report["resources"]), label
        for name, row in by_server.items():
            assert row["minutes"] and all(m > 0 for m in row["minutes"]), (label, name, row)
            assert row["growth_first_to_last_pct"] is not None
