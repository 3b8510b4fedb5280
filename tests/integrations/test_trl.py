"""Real TRL 1.16 ``GRPOTrainer`` steps with :class:`cohort.integrations.trl.CohortReward` as the reward.

The workload is ``shared/bench/trl_workload`` (WORKLOAD.md: tiny Llama, 8 prompts x G=8 per step, reward
``correct + format_bonus`` = the ``arith`` verifier with ``correct_weight=1, format_weight=0.1``); when that
folder is not beside the checkout, ``make_trl_workload.py`` (a copy of its ``make_workload.py``) builds the
same files into a temporary folder. Served
by ``cohort serve arith`` on loopback. The verifier is killed after step 2, so steps 3 and 4 must come
back ``None`` (NaN in TRL's logs) for every completion, never 0, and training must go on.

Needs ``trl`` (separate CI step, ``scripts/ci-trl``: it runs in ``.venv-peer``); skipped without it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

# The fixture trains for the first test: ~15 s on 2 idle cores, 300 s seen with the cores shared five ways.
pytestmark = [pytest.mark.trl, pytest.mark.timeout(900)]

trl = pytest.importorskip("trl")

from cohort.integrations.trl import CohortReward  # noqa: E402
from cohort.rpc.launch import ServiceProcess  # noqa: E402
from cohort.verifiers.client import WeightedVerifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("COHORT_TRL_WORKLOAD", ROOT.parent / "shared" / "bench" / "trl_workload"))
STEPS, KILL_AFTER, G, PROMPTS = 4, 2, 8, 8
OPTIONS = {"correct_weight": "1.0", "format_weight": "0.1"}  # WORKLOAD.md section 4: correct + format_bonus


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Train STEPS steps; snapshot TRL's per-step logs; kill the verifier after step KILL_AFTER."""
    workload = SHARED
    if not (workload / "model" / "model.safetensors").exists():  # not beside this checkout: build it (deterministic)
        workload = tmp_path_factory.mktemp("trl_workload")
        subprocess.run([sys.executable, str(Path(__file__).with_name("make_trl_workload.py")), "--out", str(workload)],
                       check=True, capture_output=True, timeout=300)
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(2)
    rows = [json.loads(line) for line in (workload / "data" / "train.jsonl").read_text().splitlines()]
    answers = {r["prompt"]: r["answer"] for r in rows}
    stack = ExitStack()
    server = stack.enter_context(ServiceProcess(["arith"]))
    reward = CohortReward([WeightedVerifier("arith", 1.0, [server.endpoint], OPTIONS)], reference_column="answer",
                          timeout_s=10.0, retries=1)
    steps: dict[int, dict] = {}
    logged: dict[int, dict] = {}

    class Snapshot(TrainerCallback):
        trainer = None

        def on_step_end(self, args, state, control, **kw):
            t = self.trainer
            steps[state.global_step] = {
                "prompts": list(t._logs["prompt"]), "completions": list(t._logs["completion"]),
                "rewards": list(t._logs["rewards"][reward.__name__]),
                "status": list(t._logs["extra"][f"{reward.__name__}_status"]),
            }
            if state.global_step == KILL_AFTER:
                server.kill()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "train_runtime" not in logs:
                logged[state.global_step] = dict(logs)

    cfg = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=PROMPTS * G,
        gradient_accumulation_steps=1, num_generations=G, max_completion_length=32, temperature=1.0, top_p=1.0,
        top_k=0, use_vllm=False, beta=0.04, epsilon=0.2, num_iterations=1, loss_type="grpo", scale_rewards="group",
        mask_truncated_completions=False, use_bias_correction_kl=False, learning_rate=1e-4,
        lr_scheduler_type="constant", max_grad_norm=1.0, optim="adamw_torch", max_steps=STEPS, bf16=False,
        fp16=False, use_cpu=True, gradient_checkpointing=False, shuffle_dataset=True, remove_unused_columns=False,
        seed=0, logging_steps=1, save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
        log_completions=False,
    )
    callback = Snapshot()
    try:
        trainer = GRPOTrainer(model=str(workload / "model"), reward_funcs=[reward], args=cfg,
                              train_dataset=Dataset.from_list(rows),
                              processing_class=AutoTokenizer.from_pretrained(str(workload / "tokenizer")),
                              callbacks=[callback])
        callback.trainer = trainer
        trainer.train()
        yield {"steps": steps, "logs": logged, "answers": answers, "state": trainer.state, "reward": reward,
               "tmp": tmp_path_factory.mktemp("verify")}
    finally:
        reward.close()
        stack.close()


def cohort_verify(step: dict, answers: dict[str, int], tmp: Path, endpoint: str) -> list[float]:
    """``cohort verify --json`` (the CLI, in a subprocess) on one step's completions, in TRL's batch order."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(step["prompts"]):
        groups.setdefault(p, []).append(i)
    path = tmp / "rollouts.jsonl"
    with open(path, "w") as fh:
        for p, members in groups.items():
            fh.write(json.dumps({"group_id": p, "prompt": p, "answer": str(answers[p]), "options": {"arith": OPTIONS},
                                 "rollouts": [{"completion": step["completions"][i], "index": i} for i in members]}) + "\n")
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "verify", str(path), "-e", f"arith={endpoint}", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rewards: list[float | None] = [None] * len(step["prompts"])
    for line in out.stdout.splitlines():
        row = json.loads(line)
        assert row["status"] == "ROLLOUT_STATUS_OK", row
        rewards[row["index"]] = row["reward"]
    assert all(r is not None for r in rewards)
    return rewards  # type: ignore[return-value]


def test_trained_every_step_and_the_outage_did_not_stop_it(run) -> None:
    assert run["state"].global_step == STEPS
    assert sorted(run["steps"]) == list(range(1, STEPS + 1))
    for s in range(1, STEPS + 1):
        assert len(run["steps"][s]["completions"]) == PROMPTS * G
        assert math.isfinite(run["logs"][s]["loss"]), run["logs"][s]


def test_logged_rewards_equal_cohort_verify(run) -> None:
    import torch

    compared = []
    with ServiceProcess(["arith"]) as independent:  # a fresh server: the one TRL used is dead by now
        for s in range(1, KILL_AFTER + 1):
            step = run["steps"][s]
            expected = cohort_verify(step, run["answers"], run["tmp"], independent.endpoint)
            compared += expected
            # TRL keeps rewards as float32: the same values, rounded the same way
            assert step["rewards"] == torch.tensor(expected, dtype=torch.float32).tolist(), f"step {s}"
            assert step["status"] == ["ok"] * len(expected)
            mean = sum(expected) / len(expected)
            assert run["logs"][s]["reward"] == pytest.approx(mean, abs=1e-6)
            assert run["logs"][s]["rewards/cohort/mean"] == pytest.approx(mean, abs=1e-6)
            assert run["logs"][s]["cohort/status/ok"] == PROMPTS * G
            assert run["logs"][s]["cohort/arith/correct/mean"] == pytest.approx(
                sum(1.0 for i, c in enumerate(step["completions"]) if _first_int(c) == run["answers"][step["prompts"][i]])
                / len(expected), abs=1e-6)
    print(f"\nsteps 1-{KILL_AFTER}: {len(compared)} rewards equal to `cohort verify` "
          f"({sum(r > 0 for r in compared)} non-zero, sum {sum(compared):.1f})")


def _first_int(text: str) -> int | None:
    import re

    m = re.search(r"-?\d+", text)
    return int(m.group()) if m else None


def test_stopped_verifier_gives_none_not_zero(run) -> None:
    for s in range(KILL_AFTER + 1, STEPS + 1):
        step, logs = run["steps"][s], run["logs"][s]
        assert all(math.isnan(r) for r in step["rewards"]), f"step {s}: {step['rewards'][:8]}"  # None -> NaN in TRL
        assert step["status"] == ["dependency_unavailable"] * (PROMPTS * G)
        assert logs["cohort/status/dependency_unavailable"] == PROMPTS * G
        assert logs["cohort/unusable_frac"] == 1.0
        # masked out of the logged mean, not averaged in as 0: TRL logs None when no reward is left
        assert logs["reward"] is None and logs["rewards/cohort/mean"] is None, logs
    nones = sum(math.isnan(r) for s in range(KILL_AFTER + 1, STEPS + 1) for r in run["steps"][s]["rewards"])
    print(f"\nsteps {KILL_AFTER + 1}-{STEPS} (verifier killed): {nones} completions None, training went on "
          f"to step {run['state'].global_step}")
    assert run["reward"].status_counts == {"ok": KILL_AFTER * PROMPTS * G,
                                           "dependency_unavailable": (STEPS - KILL_AFTER) * PROMPTS * G}
