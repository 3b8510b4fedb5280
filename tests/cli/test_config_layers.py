"""``-c`` may be repeated: files layer in order over the embedded default (later ones win), then the command
line's overrides; ``--print-config`` lists the layers. Overrides follow the files' rule for a section's
alternatives, so ``data.sources=[...]`` or ``model.path=DIR`` replaces the default's task or tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cohort.trainer.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def cohort(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


@pytest.fixture
def two_files(tmp_path):
    example = tmp_path / "example.yaml"  # an example: its task, its model, its run
    example.write_text("grpo: {beta: 0.04, num_generations: 4}\n"
                       "run: {output_dir: runs/example, max_steps: 7}\n"
                       "scoring: {timeout_s: 12}\n")
    remote = tmp_path / "remote.yaml"  # my endpoints, and one value of the example changed
    remote.write_text("scoring:\n  verifiers:\n    - {name: arith, endpoints: ['10.0.0.7:50051']}\n"
                      "run: {max_steps: 9}\n")
    return example, remote


def test_repeated_c_layers_in_order_and_the_command_line_wins(two_files):
    example, remote = two_files
    out = cohort("train", "-c", str(example), "-c", str(remote), "grpo.beta=0.1", "--print-config")
    assert out.returncode == 0, out.stderr
    header, _, body = out.stdout.partition("\n" + "model:")
    assert [line.split(". ", 1)[1] for line in header.splitlines()[1:]] == [
        "(embedded) trainer/default.yaml", str(example), str(remote), "command line: grpo.beta=0.1"]
    cfg = yaml.safe_load("model:" + body)
    assert cfg["run"]["max_steps"] == 9  # the later file wins
    assert cfg["run"]["output_dir"] == "runs/example"  # ... and keeps what it does not set (a deep merge)
    assert cfg["grpo"]["num_generations"] == 4 and cfg["scoring"]["timeout_s"] == 12
    assert cfg["grpo"]["beta"] == 0.1  # the command line over every file
    assert cfg["scoring"]["verifiers"] == [{**cfg["scoring"]["verifiers"][0], "name": "arith",
                                            "endpoints": ["10.0.0.7:50051"]}]  # a list replaces


def test_the_order_of_c_decides(two_files):
    example, remote = two_files
    assert load_config([example, remote]).run.max_steps == 9
    assert load_config([remote, example]).run.max_steps == 7
    assert load_config(example).run.max_steps == 7  # one file, as before


def test_a_missing_second_file_is_named(two_files, tmp_path):
    example, _ = two_files
    out = cohort("train", "-c", str(example), "-c", str(tmp_path / "nope.yaml"), "--print-config")
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: config file {tmp_path / 'nope.yaml'} does not exist"


def test_overrides_replace_a_sections_alternative_like_a_file_does(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1=", "reference": {"answer": "2"}}\n')
    cfg = load_config(None, [f"data.sources=[{{path: {rows}}}]"])  # the issue: this suggested data.path
    assert cfg.data.arithmetic is None and cfg.data.sources[0].path == str(rows)
    assert load_config(None, [f"data.path={rows}"]).data.arithmetic is None
    cfg = load_config(None, [f"model.path={tmp_path}"])
    assert cfg.model.tiny is None and cfg.model.path == str(tmp_path)
    # the old spelling still works: an alternative set to null drops nothing
    assert load_config(None, ["model.tiny=null", f"model.path={tmp_path}"]).model.path == str(tmp_path)


def test_one_layer_setting_two_alternatives_is_told_which(tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text("data: {path: a.jsonl, sources: [{path: b.jsonl}]}\n")
    out = cohort("train", "-c", str(both), "--print-config")
    assert out.returncode == 2
    assert "data: set exactly one of `path`" in out.stderr and "one layer sets path and sources: keep one" in out.stderr
    assert "data.arithmetic=null" not in out.stderr
    out = cohort("train", "model.tiny=null", "--print-config")
    assert out.returncode == 2 and "model: set exactly one of" in out.stderr and "none is set" in out.stderr
