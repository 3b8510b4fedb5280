"""A device per role (``trainer.placement``): the pure placement and claim logic with the GPU count given as an
argument (no GPU here), and ``cohort train``'s start-up check (one line, exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cohort.trainer.placement import NONE, PlacementError, check, plan, worker_env


def devices(claims):
    return [c.device for c in claims]


def test_on_an_eight_gpu_node_the_learner_takes_gpu_0_and_the_workers_the_others():
    claims = plan(8, workers=7)
    assert devices(claims) == [f"cuda:{i}" for i in range(8)]
    assert [c.role for c in claims[:2]] == ["the learner", "rollout worker 1"]
    check(claims)  # one GPU each


def test_without_gpus_everything_is_on_the_cpu_and_passes_the_check():
    claims = plan(0, workers=3)
    assert devices(claims) == ["cpu"] * 4
    check(claims)


def test_a_worker_without_a_free_gpu_shares_its_learners_and_the_check_names_the_fix():
    claims = plan(1, workers=1)
    assert devices(claims) == ["cuda:0", "cuda:0"]
    with pytest.raises(PlacementError) as info:
        check(claims)
    message = str(info.value)
    assert "\n" not in message
    assert "rollout worker 1 and the learner both claim cuda:0" in message and "rollout.colocate=true" in message
    check(claims, colocate=True)  # asked for: allowed


def test_more_workers_than_free_gpus_is_refused_unless_colocated():
    claims = plan(3, workers=3)
    assert devices(claims) == ["cuda:0", "cuda:1", "cuda:2", "cuda:0"]
    with pytest.raises(PlacementError, match="rollout worker 3 and the learner both claim cuda:0"):
        check(claims)


def test_explicit_devices_and_a_cpu_learner():
    assert devices(plan(4, learner="cuda:2", workers=2)) == ["cuda:2", "cuda:0", "cuda:1"]
    assert devices(plan(4, workers=2, worker_devices=["cuda:3", "cpu"])) == ["cuda:0", "cuda:3", "cpu"]
    assert devices(plan(4, workers=3, worker_devices=["cuda:3"])) == ["cuda:0"] + ["cuda:3"] * 3
    assert devices(plan(4, learner="cpu", workers=2)) == ["cpu", "cpu", "cpu"]
    with pytest.raises(PlacementError, match="rollout worker 2 and rollout worker 1 both claim cuda:3"):
        check(plan(4, workers=2, worker_devices=["cuda:3"]))
    with pytest.raises(PlacementError, match=r"rollout.worker_devices\[1\]=cuda:4 names GPU 4 but this machine has 4"):
        plan(4, workers=2, worker_devices=["cuda:1", "cuda:4"])
    with pytest.raises(PlacementError, match="names a GPU but this machine has none"):
        plan(0, workers=1, worker_devices=["cuda:0"])
    with pytest.raises(PlacementError, match="2 entries for rollout.workers=3"):
        plan(4, workers=3, worker_devices=["cuda:1", "cuda:2"])
    with pytest.raises(PlacementError, match="auto, cpu or cuda:INDEX"):
        plan(4, workers=1, worker_devices=["gpu1"])


def test_several_learners_split_the_free_gpus():
    claims = plan(8, workers=3, learners=2)
    assert [(c.role, c.device) for c in claims] == [
        ("learner rank 0", "cuda:0"), ("learner rank 1", "cuda:1"),
        ("rollout worker 1 of learner rank 0", "cuda:2"), ("rollout worker 2 of learner rank 0", "cuda:3"),
        ("rollout worker 3 of learner rank 0", "cuda:4"),
        ("rollout worker 1 of learner rank 1", "cuda:5"), ("rollout worker 2 of learner rank 1", "cuda:6"),
        ("rollout worker 3 of learner rank 1", "cuda:7")]
    check(claims)
    assert devices(plan(1, workers=1, learners=2)) == ["cpu", "cpu", "cpu", "cpu"]  # auto: not every learner has one


def test_relays_claim_no_gpu_with_gloo_and_share_a_staging_gpu_otherwise():
    assert devices(plan(2, workers=3, engine="vllm-server")) == ["cuda:0", NONE, NONE, NONE]
    claims = plan(2, workers=2, engine="vllm-server", transfer_backend="nccl")
    assert devices(claims) == ["cuda:0", "cuda:0", "cuda:0"] and all(c.shares for c in claims[1:])
    check(claims)  # a bucket, not a model: no conflict
    ipc = plan(2, workers=1, engine="vllm-server", transfer_backend="ipc", worker_devices=["cuda:1"])
    assert devices(ipc) == ["cuda:0", "cuda:1"]
    with pytest.raises(PlacementError, match="stages weights on a GPU: rollout worker 1 has none"):
        plan(0, workers=1, engine="vllm-server", transfer_backend="nccl")


def test_a_workers_environment_names_its_one_gpu_as_the_parent_sees_it():
    assert worker_env("cuda:1", None, 4) == ({"CUDA_VISIBLE_DEVICES": "1"}, "cuda")
    assert worker_env("cuda:1", "3,5,7", 3) == ({"CUDA_VISIBLE_DEVICES": "5"}, "cuda")
    assert worker_env(NONE, None, 2) == ({"CUDA_VISIBLE_DEVICES": ""}, "cpu")
    assert worker_env("cpu", None, 0) == ({}, None)  # no GPUs: the worker runs as before


def test_cohort_train_refuses_two_processes_on_one_gpu_in_one_line():
    """The start-up check, before anything is built: two visible GPUs (as CUDA_VISIBLE_DEVICES names them; torch
    is not imported yet), both workers asked onto the learner's."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "cohort.cli", "train", "rollout.max_staleness=1",
                           "rollout.workers=2", "rollout.worker_devices=[cuda:1]"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: invalid config: rollout worker 2 and rollout worker 1 both claim cuda:1: give each "
                     "process its own GPU (rollout.worker_devices=[cuda:K, ...], fewer rollout.workers, or more "
                     "GPUs), or set rollout.colocate=true to share it"]


def test_each_spawned_worker_gets_its_own_gpu_from_the_plan(monkeypatch):
    """``spawn_workers.start``'s share of the plan: learner rank 1's workers on a node of 8 GPUs with 2 learners,
    numbered as the parent's CUDA_VISIBLE_DEVICES names them."""
    from cohort.trainer import placement
    from cohort.trainer.config import load_config

    cfg = load_config(None, ["rollout.max_staleness=1", "rollout.workers=3", "distributed.parallel=ddp"])
    monkeypatch.setattr(placement, "gpu_count", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,6,5,4,3,2,1,0")
    assert placement.spawn_plan(cfg, learner=1) == [({"CUDA_VISIBLE_DEVICES": "2"}, "cuda"),
                                                    ({"CUDA_VISIBLE_DEVICES": "1"}, "cuda"),
                                                    ({"CUDA_VISIBLE_DEVICES": "0"}, "cuda")]
    monkeypatch.setattr(placement, "gpu_count", lambda: 0)
    assert placement.spawn_plan(cfg, learner=1) == [({}, None)] * 3  # no GPUs: as before
