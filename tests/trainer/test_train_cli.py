"""Issue 15's newcomer rough edges in `cohort train`: config layering, typos, re-runs of the same run,
progress when stdout is a file. The real CLI (typer's CliRunner, or a subprocess) against a real
arith server on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cohort.cli import _load_commands, app
from cohort.rpc.launch import ServiceProcess
from cohort.trainer.config import load_config

_load_commands()


@pytest.fixture(scope="module")
def arith():
    with ServiceProcess(["arith"]) as proc:
        yield proc


def tiny(tmp_path: Path, endpoint: str, *extra: str) -> list[str]:
    return [
        "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
        "data.arithmetic={num_prompts: 40, max_operand: 4}",
        f'scoring.verifiers=[{{name: arith, endpoints: ["{endpoint}"]}}]',
        "grpo.prompts_per_step=4", "grpo.num_generations=4", "rollout.max_completion_length=3",
        "run.torch_threads=1", "run.tensorboard=false", "run.plot=false", f"run.output_dir={tmp_path}", *extra,
    ]


def train(*args: str):
    return CliRunner().invoke(app, ["train", *args])


def test_partial_config_file_is_layered_over_the_default(tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text("grpo:\n  num_generations: 4\n  beta: 0.0\nrun:\n  max_steps: 7\n")
    r = train("--config", str(partial), "run.seed=3", "--print-config")
    assert r.exit_code == 0, r.output
    head = [line for line in r.output.splitlines() if line.startswith("#")]
    assert head == ["# resolved config; layers, later ones win:", "#   1. (embedded) trainer/default.yaml",
                    f"#   2. {partial}", "#   3. command line: run.seed=3"]
    cfg = yaml.safe_load(r.output)
    assert cfg["grpo"]["num_generations"] == 4 and cfg["grpo"]["beta"] == 0.0  # the file
    assert cfg["grpo"]["epsilon_high"] == 0.28 and cfg["model"]["tiny"]["hidden_size"] == 64  # the default
    assert cfg["run"] == {**cfg["run"], "max_steps": 7, "seed": 3, "output_dir": "runs/embedded"}
    assert [v["name"] for v in cfg["scoring"]["verifiers"]] == ["math", "arith"]


def test_layering_replaces_lists_and_alternatives(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text("model: {path: /ckpt}\ndata: {path: /data.jsonl}\nscoring: {verifiers: [{name: math}]}\n")
    cfg = load_config(own)
    assert cfg.model.path == "/ckpt" and cfg.model.tiny is None  # not "set exactly one of path or tiny"
    assert cfg.data.path == "/data.jsonl" and cfg.data.arithmetic is None
    assert [v.name for v in cfg.scoring.verifiers] == ["math"]  # a list replaces, it does not append
    assert cfg.grpo.num_generations == 32  # everything else from the default


@pytest.mark.parametrize("where", ["command line", "file"])
def test_a_typo_names_the_closest_key_in_one_line(tmp_path, where):
    if where == "file":
        bad = tmp_path / "bad.yaml"
        bad.write_text("grpo:\n  bta: 0.1\n")
        r = train("--config", str(bad))
    else:
        r = train("grpo.bta=0.1")
    assert r.exit_code == 2
    assert r.output.splitlines() == ["error: invalid config: unknown key grpo.bta (did you mean grpo.beta?)"]
    r = train("gpro.beta=0.1")
    assert r.exit_code == 2 and "unknown key gpro (did you mean grpo?)" in r.output
    r = train("rollout.vllm.sync_methd=auto", "scoring.verifiers=[{nme: math}]")  # nested sections, list items
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1
    assert "unknown key rollout.vllm.sync_methd (did you mean rollout.vllm.sync_method?)" in r.output
    assert "unknown key scoring.verifiers.0.nme (did you mean scoring.verifiers.0.name?)" in r.output


def test_bad_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo: [\n")
    r = train("--config", str(bad))
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1 and "is not valid YAML: line 2" in r.output


def test_rerunning_a_run_says_what_it_does(tmp_path, arith):
    args = tiny(tmp_path, arith.endpoint)
    first = train(*args, "run.max_steps=2")
    assert first.exit_code == 0, first.output
    assert "resuming" not in first.output and "done: step 2" in first.output

    again = train(*args, "run.max_steps=2")  # the quickstart run twice
    assert again.exit_code == 0, again.output
    assert again.output.splitlines() == [
        f"run {tmp_path} already reached run.max_steps=2 (raise it to train on): nothing to train (to start "
        "fresh: run.resume=false, which deletes its checkpoints, or another run.output_dir)"]

    more = train(*args, "run.max_steps=3")
    assert more.output.splitlines()[0] == (
        f"resuming run {tmp_path} from step 2 of 3 (to start fresh: run.resume=false, which deletes its "
        "checkpoints, or another run.output_dir)")
    assert "done: step 3" in more.output

    fresh = train(*args, "run.max_steps=1", "run.resume=false")  # the flag the message names
    assert fresh.exit_code == 0, fresh.output
    assert "afresh" in fresh.output and "done: step 1" in fresh.output
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]  # no stale step 3


def test_a_run_that_reached_its_target_does_not_train_on(tmp_path, arith):
    args = tiny(tmp_path, arith.endpoint, "run.target_reward=0.0", "run.target_window=2", "run.max_steps=10")
    first = train(*args)
    assert first.exit_code == 0 and "done: step 2" in first.output  # reward >= 0 over 2 steps
    again = train(*args)
    assert again.exit_code == 0
    assert "already reached run.target_reward=0.0 by step 2" in again.output and "done:" not in again.output


def test_progress_lines_reach_a_redirected_stdout_while_training(tmp_path, arith):
    """stdout is a file: a plain line per `run.log_every` steps, flushed as it happens (the process is
    killed mid-run, so nothing printed at exit can pass this)."""
    log = tmp_path / "train.log"
    cmd = [sys.executable, "-m", "cohort.cli", "train",
           *tiny(tmp_path / "run", arith.endpoint, "run.max_steps=100000", "run.log_every=2",
                 "run.log_every_s=1000")]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while "step 3/100000" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
        finally:
            proc.kill()
            proc.wait()
    lines = [line for line in log.read_text().splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines[:2]] == ["1/100000", "3/100000"], log.read_text()  # first, then every 2
    assert all(" reward " in line and " elapsed " in line and " eta " in line for line in lines)


def test_a_checkpoint_in_the_old_layout_is_refused_in_one_line_not_skipped(tmp_path, arith):
    """A step folder of the older single-file layout is never passed over (that restarted the run at step 0,
    truncating its metrics): the run stops before training, in one line, naming the way out."""
    old = tmp_path / "checkpoints" / "step_000004"
    old.mkdir(parents=True)
    (old / "state.pt").write_bytes(b"")
    (tmp_path / "metrics.jsonl").write_text('{"step": 4, "reward/mean": 0.5}\n')
    r = train(*tiny(tmp_path, arith.endpoint))  # a reachable verifier: an unreachable one is reported first
    assert r.exit_code == 1
    assert r.output.splitlines() == [
        f"error: {old} is a checkpoint in the old single-file layout (state.pt), which this version cannot "
        "resume: run.resume=false starts afresh (deleting the old checkpoints), or choose another run.output_dir"]
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 4, "reward/mean": 0.5}\n'  # untouched


def test_a_checkpoint_that_cannot_be_written_is_one_line(tmp_path, arith):
    """A write the run needs failing (here a file where the checkpoints folder goes; a full disk fails the same
    way, inside torch's distributed checkpoint) ends the run in one line naming the folder, exit 1."""
    (tmp_path / "checkpoints").write_text("not a folder")
    r = train(*tiny(tmp_path, arith.endpoint), "run.max_steps=2", "run.save_every=1")
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    last = r.output.splitlines()[-1]
    assert last.startswith(f"error: could not write the checkpoint {tmp_path / 'checkpoints' / 'step_000001'} ("), \
        r.output
    assert "GB free there" in last and "Traceback" not in r.output


@pytest.mark.parametrize("servers,expected", [
    ("[]", "rollout.engine=vllm-server needs rollout.vllm.servers (vllm serve base URLs)"),
    ("[http://127.0.0.1:PORT]", "vLLM server http://127.0.0.1:PORT did not answer within "
                                "rollout.weight_sync_timeout_s=2s"),
])
def test_a_vllm_server_that_is_missing_or_not_answering_is_one_line(tmp_path, arith, servers, expected):
    """rollout.engine=vllm-server (no vLLM needed on this side): no server named, or nothing listening at the
    one named, ends the run within the deadline in one line naming it, never a hang or a traceback."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])  # closed again: nothing listens there
    r = train(*tiny(tmp_path, arith.endpoint, "rollout.engine=vllm-server", "rollout.weight_sync_timeout_s=2",
                    f"rollout.vllm.servers={servers.replace('PORT', port)}"))
    assert r.exit_code == 1, r.output
    # the engine starts with the round source, after the run's start lines (policy, verifiers): the error is the
    # last line and the only one
    lines = r.output.splitlines()
    assert lines[-1] == f"error: {expected.replace('PORT', port)}", r.output
    assert [ln for ln in lines if ln.startswith("error")] == lines[-1:] and "Traceback" not in r.output, r.output
