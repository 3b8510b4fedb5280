"""The asynchronous pipeline (``rollout.max_staleness > 0``) against real verifier servers on loopback, with
real rollout worker processes joined over torch.distributed (gloo)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cohort.rpc.launch import ServiceProcess
from cohort.trainer.config import load_config
from cohort.trainer.data import PromptSampler
from cohort.trainer.learner import Learner
from cohort.trainer.metrics import deterministic
from cohort.trainer.rounds.pipeline import Pipeline
from cohort.trainer.train import train



def _sibling(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"pipeline_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


small_config = _sibling("test_train").small_config  # the loop's own tests' tiny task


@pytest.fixture(scope="module")
def arith():
    with ServiceProcess(["arith"]) as proc:
        yield proc


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "final" / "model.safetensors")


def test_max_staleness_0_is_the_lock_step_loop_exactly(tmp_path, arith):
    """0 is today's loop, bit for bit: the same metrics and the same final weights as a config without the keys."""
    eps = {"arith": [arith.endpoint]}
    plain = train(small_config(tmp_path / "a", arith.endpoint, "run.max_steps=3"), eps)
    zero = train(small_config(tmp_path / "b", arith.endpoint, "run.max_steps=3", "rollout.max_staleness=0",
                              "rollout.workers=2"), eps)
    assert [deterministic(r) for r in zero] == [deterministic(r) for r in plain]
    assert not any(k.startswith("async/") for k in zero[0])
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _slow_learner(monkeypatch, seconds: float) -> None:
    update = Learner.update

    def slow(self, batch, iterations):
        time.sleep(seconds)
        return update(self, batch, iterations)

    monkeypatch.setattr(Learner, "update", slow)


def _kept(monkeypatch) -> list[Pipeline]:
    """The run's Pipeline, kept for inspection after train() returns."""
    kept, close = [], Pipeline.close

    def keep(self):
        if self not in kept:  # closed by the loop, then once more by train() (a no-op)
            kept.append(self)
        close(self)

    monkeypatch.setattr(Pipeline, "close", keep)
    return kept


def test_a_slow_learner_consumes_nothing_older_than_the_bound(tmp_path, arith, monkeypatch):
    """Admission: with the learner the slow side, the worker waits (generator idle) instead of running ahead,
    and every consumed group is at most max_staleness versions old."""
    _slow_learner(monkeypatch, 0.5)
    pipes = _kept(monkeypatch)
    records = train(small_config(tmp_path, arith.endpoint, "run.max_steps=6", "rollout.max_staleness=1"),
                    {"arith": [arith.endpoint]})
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert max(r["async/staleness_max"] for r in records) <= 1
    assert records[-1]["async/dropped_stale"] == 0  # admission wastes nothing in the steady state
    assert any(r["async/staleness_mean"] > 0 for r in records)  # it did run ahead of the learner
    later = records[2:]
    assert sum(r["async/generator_idle_frac"] for r in later) / len(later) > 0.3  # waiting for the slow learner
    (pipe,) = pipes
    assert all(len(idx) == 4 for idx in pipe.consumed)


@pytest.mark.parametrize("k", [1, 2])
def test_groups_past_the_bound_are_dropped_and_their_prompts_generated_again(tmp_path, arith, monkeypatch, k):
    """Rejection: with admission defeated (orders 3 rounds further ahead than it allows, as a design without
    admission would) and a slow learner, groups arrive more than k versions old. None is consumed, each is
    counted, and its prompt is generated again: every prompt drawn is consumed or still pending."""
    _slow_learner(monkeypatch, 0.3)
    pipes = _kept(monkeypatch)
    top_up = Pipeline._top_up
    monkeypatch.setattr(Pipeline, "_top_up", lambda self, remaining: top_up(self, remaining + 3 * 4))
    cfg = small_config(tmp_path, arith.endpoint, "run.max_steps=6", f"rollout.max_staleness={k}")
    records = train(cfg, {"arith": [arith.endpoint]})
    assert max(r["async/staleness_max"] for r in records) <= k
    assert records[-1]["async/dropped_stale"] > 0
    (pipe,) = pipes
    consumed = [i for idx in pipe.consumed for i in idx]
    pending = pipe.state_dict()["pending_prompts"]
    sampler = PromptSampler(40, 4, cfg.data.shuffle_seed)
    drawn = sampler.next(pipe.src.sampler.position)
    assert collections.Counter(consumed) + collections.Counter(pending) == collections.Counter(drawn)


def test_a_restart_loses_no_prompt_and_uses_none_twice(tmp_path, arith, monkeypatch):
    """The worker is killed while orders are out: after the restart every prompt drawn is consumed once or
    still pending (the dead worker's orders are ordered again; groups that had come back are kept)."""
    pipes = _kept(monkeypatch)
    publish = Pipeline.publish

    def kill_at_version_3(self, policy):
        if self.version == 2:
            os.kill(self.workers.procs[0].pid, signal.SIGKILL)
            self.workers.procs[0].join(10)
        publish(self, policy)

    monkeypatch.setattr(Pipeline, "publish", kill_at_version_3)
    cfg = small_config(tmp_path, arith.endpoint, "run.max_steps=6", "rollout.max_staleness=2")
    records = train(cfg, {"arith": [arith.endpoint]})
    assert [r["step"] for r in records] == list(range(1, 7)) and records[-1]["async/worker_restarts"] == 1.0
    assert max(r["async/staleness_max"] for r in records) <= 2
    (pipe,) = pipes
    consumed = [i for idx in pipe.consumed for i in idx]
    pending = pipe.state_dict()["pending_prompts"]
    drawn = PromptSampler(40, 4, cfg.data.shuffle_seed).next(pipe.src.sampler.position)
    assert collections.Counter(consumed) + collections.Counter(pending) == collections.Counter(drawn)
    assert len(consumed) == 6 * 4 and len(set(consumed)) == len(consumed)  # 40 rows: no prompt twice in 24


def test_dynamic_sampling_refills_groups_without_signal_from_the_pipeline(tmp_path, arith, monkeypatch):
    """Groups without signal are left out and replaced by further groups; each round still has P groups, and
    every prompt drawn is consumed, left out for lack of signal, or pending."""
    pipes = _kept(monkeypatch)
    cfg = small_config(tmp_path, arith.endpoint, "run.max_steps=4", "rollout.max_staleness=1",
                       "grpo.dynamic_sampling=true", "grpo.max_resample_rounds=2")
    records = train(cfg, {"arith": [arith.endpoint]})
    (pipe,) = pipes
    assert all(len(idx) == 4 for idx in pipe.consumed)
    assert sum(r["group/resampled_prompts"] for r in records) == len(pipe.left_out) > 0
    assert max(r["async/staleness_max"] for r in records) <= 1
    drawn = PromptSampler(40, 4, cfg.data.shuffle_seed).next(pipe.src.sampler.position)
    accounted = [i for idx in pipe.consumed for i in idx] + pipe.left_out + pipe.state_dict()["pending_prompts"]
    assert collections.Counter(accounted) == collections.Counter(drawn)


def test_resume_orders_the_pending_prompts_first(tmp_path, arith):
    eps = {"arith": [arith.endpoint]}
    cfg = small_config(tmp_path, arith.endpoint, "run.max_steps=2", "rollout.max_staleness=1")
    train(cfg, eps)
    state = torch.load(tmp_path / "checkpoints" / "step_000002" / "rank_0.pt", weights_only=False)
    pending = state["engine"]["pending_prompts"]
    assert len(pending) == 4  # k * P groups were ordered for the next round
    resumed = train(small_config(tmp_path, arith.endpoint, "run.max_steps=3", "rollout.max_staleness=1"), eps)
    assert [r["step"] for r in resumed] == [3]


def test_the_workers_send_the_reference_log_probs_the_learner_would_compute(tmp_path, arith, monkeypatch):
    """With beta > 0 the rollout workers compute the frozen reference's log-probs of their rows: the learner
    spends no time on them, and they equal the learner's own forward over the round (padding aside), at every
    step of a run whose policy moves (the reference does not)."""
    next_round, diffs = Pipeline.next_round, []

    def checked(self, timer):
        rnd = next_round(self, timer)
        b = rnd.batch
        mine = self.src.ref_logprobs(b.input_ids, b.attention_mask, b.completion_ids.shape[1])
        diffs.append(float((rnd.ref_logprobs - mine).abs()[b.loss_mask].max()))
        return rnd

    monkeypatch.setattr(Pipeline, "next_round", checked)
    records = train(small_config(tmp_path, arith.endpoint, "run.max_steps=4", "rollout.max_staleness=1",
                                 "grpo.beta=0.04"), {"arith": [arith.endpoint]})
    assert len(diffs) == 4 and max(diffs) < 1e-5, diffs
    assert all(r["time/logprobs_s"] == 0.0 and r["async/reference_s"] > 0 for r in records)
    assert records[-1]["policy/kl"] > 0  # the policy moved away from the reference the workers hold

def _cohort() -> str:
    return str(Path(sys.executable).parent / "cohort")


COMMON = ["rollout.max_staleness=1", "grpo.prompts_per_step=4", "grpo.num_generations=8", "run.progress=false",
          "run.tensorboard=false", "run.plot=false", "run.torch_threads=1", "run.target_reward=null"]


@pytest.mark.distributed
def test_learner_and_one_rollout_worker_under_torchrun(tmp_path, deadline):
    """Two processes under torchrun (rank 0 the learner, rank 1 the worker), weights broadcast over gloo."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--no-python",
           _cohort(), "train", *COMMON, "rollout.workers=1", "run.max_steps=3", f"run.output_dir={tmp_path}",
           "run.progress=true", "run.log_every=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=deadline(300), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["async/weight_version"] for r in records] == [1, 2, 3]
    assert max(r["async/staleness_max"] for r in records) <= 1
    assert "done: step 3" in proc.stdout
    assert proc.stdout.count("  stale ") == 3 and "idle learner" in proc.stdout  # the progress line shows the pipeline


def _kill_a_worker_after(tmp_path: Path, steps: int, *overrides: str) -> tuple[subprocess.Popen, int, str, str]:
    """Start ``cohort train`` on the pipeline, SIGKILL its rollout worker after ``steps`` steps, let it end."""
    cmd = [_cohort(), "train", *COMMON, f"run.output_dir={tmp_path}", *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, start_new_session=True)
    try:
        metrics = tmp_path / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= steps):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        worker = _rollout_worker_of(proc.pid)
        os.kill(worker, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, worker, out, err


def test_a_killed_rollout_worker_ends_the_run_with_its_name(tmp_path):
    """Without restarts, a worker that dies is a one-line error naming it and exit code 1, soon after; never a hang."""
    proc, worker, _, err = _kill_a_worker_after(tmp_path, 2, "run.max_steps=400", "rollout.worker_restarts=0")
    assert proc.returncode == 1, err[-2000:]
    assert f"rollout worker 1 (pid {worker})" in err and "Traceback" not in err, err[-2000:]


# the worker is killed after step 2; the run must still need it then. A step takes ~0.06 s at load 0, so at 8
# steps the learner could hold every group it needed before the kill landed on a busy machine (the run ended
# without noticing the death); 60 steps leave tens of poll intervals of margin at several times that load
RESTART_STEPS = 60


def test_a_killed_rollout_worker_is_started_again_and_the_run_finishes(tmp_path):
    """The default (rollout.worker_restarts=1): the workers start again with the current weights, the prompts
    the dead one held are ordered again, and the run trains every step; a second death ends it."""
    proc, worker, out, err = _kill_a_worker_after(tmp_path, 2, f"run.max_steps={RESTART_STEPS}")
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert f"rollout worker 1 (pid {worker}) exited with code -9; starting the rollout workers again (restart 1 " \
           "of rollout.worker_restarts=1)" in out, out[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, RESTART_STEPS + 1))
    assert records[-1]["async/worker_restarts"] == 1.0 and records[0]["async/worker_restarts"] == 0.0
    assert max(r["async/staleness_max"] for r in records) <= 1  # the bound holds across the restart
    assert [r["async/weight_version"] for r in records] == [float(s) for s in range(1, RESTART_STEPS + 1)]
    time.sleep(1)
    assert not _in_session(proc.pid)  # every worker reaped, the dead one's and the new one


def _rollout_worker_of(pid: int) -> int:
    """The rollout worker spawned by ``pid``, by the name it gives itself: the embedded verifiers' scoring
    processes are spawn children too, and pids wrap on a busy machine, so neither command line nor pid order
    tells them apart."""
    found = [child for child in _children_with(pid, "multiprocessing.spawn") if _comm(child).startswith("cohort-rollout")]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} rollout workers among the children of {pid}")
    return found[0]


def _comm(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text()
    except OSError:  # it exited since it was listed
        return ""


def _in_session(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the run was started in a session of its own)."""
    alive = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(stat[3]) == sid and stat[0] != "Z":
            alive.append(int(entry.name))
    return alive


def _children_with(pid: int, text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[1]) == pid and text in cmdline:
            found.append(int(entry.name))
    return found


def test_the_broadcast_weights_are_a_snapshot_the_update_does_not_change():
    """The learner goes on updating while a version's broadcast is in flight: the flat tensor it sends must
    be its own memory, for one parameter as for many; a buffer handed back is written in place (the pipeline
    alternates two, so the one on the wire is never written)."""
    from cohort.trainer import wire

    for model in (torch.nn.Linear(3, 1, bias=False), torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))):
        flat = wire.flat_parameters(model)
        before = flat.clone()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        assert torch.equal(flat, before)
        assert all(flat.data_ptr() != p.data_ptr() for p in model.parameters())
        again = wire.flat_parameters(model, flat)  # the caller's buffer, reused: written in place
        assert again.data_ptr() == flat.data_ptr()
        assert torch.equal(again, torch.nn.utils.parameters_to_vector(model.parameters()))
        assert not torch.equal(again, before)
        other = wire.flat_parameters(torch.nn.Linear(4, 4), flat)  # does not fit: a buffer of its own
        assert other.data_ptr() != flat.data_ptr() and other.numel() == 20


@pytest.mark.distributed
@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_two_learners_each_with_its_own_rollout_worker(tmp_path, parallel, deadline):
    """DDP/FSDP2 learners under torchrun, each spawning its own worker: every learner consumes P / 2 groups a
    round within the bound, the learners never consume the same draw's prompts, and every prompt drawn is
    consumed or pending in the checkpoint (each rank's own, the sampler at one position for both)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).with_name("pipeline_learners.py")), str(tmp_path), *COMMON, "rollout.workers=1",
           f"distributed.parallel={parallel}", "run.max_steps=4", "run.save_every=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=deadline(450), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert [r["async/weight_version"] for r in records] == [1, 2, 3, 4]
    assert max(r["async/staleness_max"] for r in records) <= 1
    assert records[0]["rollout/logp_abs_diff_max"] < 1e-4  # version 0 sampled by the workers is the learners' weights
    runs = [json.loads((tmp_path / f"consumed_{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["p"] for r in runs] == [2, 2] and all(len(idx) == 2 for r in runs for idx in r["consumed"])
    consumed = [[i for idx in r["consumed"] for i in idx] for r in runs]
    assert not set(consumed[0]) & set(consumed[1])  # 512 rows, 16 consumed: a shared prompt is a shared draw
    meta = torch.load(tmp_path / "checkpoints" / "step_000004" / "meta.pt", weights_only=False)
    pending = [torch.load(tmp_path / "checkpoints" / "step_000004" / f"rank_{rank}.pt", weights_only=False)
               ["engine"]["pending_prompts"] for rank in (0, 1)]
    drawn = PromptSampler(512, 4, load_config(None, COMMON).data.shuffle_seed).next(meta["sampler_position"])
    assert collections.Counter(consumed[0] + consumed[1] + pending[0] + pending[1]) == collections.Counter(drawn)
    assert _weights(tmp_path)  # rank 0 saved the final model


@pytest.mark.distributed
def test_a_killed_worker_of_one_ddp_learner_is_started_again_by_it(tmp_path):
    """Two DDP learners: the worker of learner rank 1 is killed mid-run; that learner starts its workers again
    (its message names it), the other waits in the next collective, and the run trains every step."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).with_name("pipeline_learners.py")), str(tmp_path), *COMMON, "rollout.workers=1",
           "distributed.parallel=ddp", "run.max_steps=60"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                            start_new_session=True)
    try:
        metrics = tmp_path / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        learner = next(pid for pid in _children_with(proc.pid, "pipeline_learners.py")  # torchrun's children
                       if _environ(pid).get("RANK") == "1")
        worker = _rollout_worker_of(learner)
        os.kill(worker, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert f"rollout worker 1 of learner rank 1 (pid {worker}) exited with code -9; starting the rollout workers " \
           "again (restart 1 of rollout.worker_restarts=1)" in out, out[-3000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 61))
    assert records[-1]["async/worker_restarts"] == 1.0  # summed over the learners: only rank 1's restarted
    assert max(r["async/staleness_max"] for r in records) <= 1


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)

