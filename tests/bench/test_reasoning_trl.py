"""``bench/reasoning_trl.py`` (the ``trl`` arm of ``bench/reasoning_rise.py``) at toy size, so it does not rot.

One TRL 1.16 GRPOTrainer step on SmolLM2-135M-Instruct with the multi-step task's config cut down (2 prompts x
G=4, 8 completion tokens), rewards from ``cohort serve math`` and ``steps`` (each row's solution from its options)
servers the script starts; then the saved model is
evaluated by ``cohort eval --model`` in the project's venv, as the bench does. Needs trl (``scripts/ci-trl``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.trl, pytest.mark.slow, pytest.mark.timeout(1200)]

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
COHORT_PY = ROOT / ".venv" / "bin" / "python"
TOY = """\
model: {{name: smollm2-135m-instruct}}
data:
  sources:
    - {{path: {rows}, name: multistep, verifiers: [math], limit: 8}}
scoring:
  verifiers:
    - {{name: math, weight: 1.0}}
grpo: {{prompts_per_step: 2, num_generations: 4, beta: 0.0, loss_type: dapo, scale_rewards: group}}
rollout: {{engine: transformers, temperature: 0.7, max_completion_length: 8}}
optim: {{learning_rate: 3.0e-5, micro_batch_size: 4}}
run: {{torch_threads: 1}}
"""


# an override, as the bench's trl-solution arm passes them: steps scores each row against its own worked solution
STEPS_TOO = ("scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process, "
             "options: {answer_step: 'false'}}]")


def test_one_trl_step_saves_a_model_cohort_eval_loads(tmp_path):
    assert COHORT_PY.exists(), f"the project venv is missing at {COHORT_PY} (./scripts/setup)"
    config = tmp_path / "toy.yaml"
    rows = ROOT / "examples" / "data" / "multistep" / "train-addsub.jsonl"
    config.write_text(TOY.format(rows=rows))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "trl"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "reasoning_trl.py"), "-c", str(config), "--out",
                           str(out), "--seed", "0", "--steps", "1", "--micro-batch", "4", STEPS_TOO],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (step,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert step["step"] == 1 and 0.0 <= step["reward"] <= 1.0, step
    assert step["cohort/status/ok"] == 8, step  # every completion scored by the servers the script started
    assert 0.0 <= step["cohort/steps/solution_frac/mean"] <= 1.0, step  # each row's solution, from its options
    settings = json.loads((out / "trl.json").read_text())["settings"]
    assert settings["num_generations"] == 4 and settings["per_device_train_batch_size"] == 4, settings
    assert settings["gradient_accumulation_steps"] == 2 and settings["max_completion_length"] == 8, settings
    assert settings["learning_rate"] == 3.0e-5 and settings["loss_type"] == "dapo", settings
    ev = subprocess.run([str(COHORT_PY), "-m", "cohort.cli", "eval", "-c", str(config), "--model", str(out / "final"),
                         "-n", "1", "--limit", "2", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path,
                        timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    rollouts = [json.loads(line) for line in ev.stdout.splitlines() if line.startswith("{")]
    assert len(rollouts) == 2 and all(r["status"] == "ok" for r in rollouts), rollouts
