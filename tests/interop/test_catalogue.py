"""`cohort verifiers`: the catalogue of what is installed, read from the entry points (built-ins, the adapters of
other standards, another package's plugins, one that cannot load), with reference kinds and options."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PLUGIN = '''
from cohort.verifiers.base import RolloutResult, VerifierBase
from cohort.verifiers.options import VerifierOptions


class ShoutOptions(VerifierOptions):
    loud: bool = True
    """Whether to shout."""


class Shout(VerifierBase):
    name = "shout"
    version = "0.3.0"
    description = "rewards upper case"
    reference_kinds = ("answer",)
    Options = ShoutOptions

    def verify_group(self, group, ctx):
        return [RolloutResult.ok(r.index, float(r.completion.isupper())) for r in group.rollouts]
'''


def run_catalogue(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`cohort verifiers` with a third-party distribution on the path: `shout` (loads) and `broken` (does not)."""
    (tmp_path / "shout_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "shout_plugin-0.3.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shout-plugin\nVersion: 0.3.0\n")
    (dist / "entry_points.txt").write_text("[cohort.verifiers]\nshout = shout_plugin:Shout\n"
                                           "broken = shout_plugin_missing:Nothing\n")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "COLUMNS": "250",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-m", "cohort.cli", "verifiers", *args], env=env, capture_output=True,
                          text=True, timeout=180)


def test_the_catalogue_lists_built_ins_adapters_and_plugins(tmp_path):
    out = run_catalogue(tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_name = {v["name"]: v for v in data["verifiers"]}
    assert {"format", "math", "code", "arith", "steps", "judge"} <= set(by_name)
    assert {by_name[n]["kind"] for n in ("math", "code", "judge")} == {"built-in"}
    assert {by_name[n]["kind"] for n in ("nemo_gym", "ors", "openenv", "prime_verifiers", "reasoning_gym")} == {"adapter"}
    assert by_name["math"]["reference_kinds"] == ["answer"] and by_name["code"]["reference_kinds"] == ["code_tests"]
    assert "backend" in {o["name"] for o in by_name["judge"]["options"]}  # its options model's fields
    assert by_name["shout"]["kind"] == "plugin (shout-plugin 0.3.0)"
    assert by_name["shout"]["options"] == [{"name": "loud", "type": "bool", "required": False, "default": True,
                                            "doc": "Whether to shout."}]
    broken = by_name["broken"]
    assert broken["loadable"] is False and "shout_plugin_missing" in broken["error"]
    fronts = {f["run"]: f for f in data["fronts"]}
    assert "cohort serve front openenv" in fronts and "cohort serve front ors" in fronts


def test_the_table_names_a_plugin_that_cannot_load_and_still_exits_0(tmp_path):
    out = run_catalogue(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "not loadable" in out.stdout and "shout" in out.stdout and "Traceback" not in out.stderr
    assert "Cohort verifiers behind other trainers" in out.stdout
