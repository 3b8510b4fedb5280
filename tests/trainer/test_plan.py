"""``cohort plan``: the memory of a learner step by part, from config.json alone; its parameter counts are exact,
and a config that cannot fit is refused in one line naming the fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from cohort.trainer import memory
from cohort.trainer.config import load_config
from cohort.trainer.memory import Geometry

QWEN15 = {"hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12, "num_hidden_layers": 28,
          "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True, "model_type": "qwen2",
          "max_position_embeddings": 32768}
SMALL = {"qwen2": dict(QWEN15, hidden_size=48, intermediate_size=96, num_attention_heads=4, num_hidden_layers=2,
                       vocab_size=300),
         "llama": {"hidden_size": 40, "intermediate_size": 72, "num_attention_heads": 4, "num_key_value_heads": 4,
                   "num_hidden_layers": 3, "vocab_size": 256, "tie_word_embeddings": False, "model_type": "llama"}}


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_parameter_counts_are_exact(kind):
    config = SMALL[kind]
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert Geometry.of(config).parameters() == sum(p.numel() for p in model.parameters())
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    trained = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert Geometry.of(config).lora_parameters(4, "all-linear") == trained


def plan_cmd(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "config.json").write_text(json.dumps(QWEN15))
    return subprocess.run([sys.executable, "-m", "cohort.cli", "plan", "model.tiny=null", f"model.path={tmp_path}",
                           "grpo.prompts_per_step=16", "grpo.num_generations=8", "rollout.max_completion_length=512",
                           "model.dtype=bfloat16", *args], capture_output=True, text=True, timeout=120)


def test_a_1_5b_model_fits_an_80_gb_gpu_with_checkpointing_and_the_plan_says_why(tmp_path):
    out = plan_cmd(tmp_path, "optim.gradient_checkpointing=true", "--device", "cuda", "--memory-gib", "80")
    assert out.returncode == 0, out.stderr
    parts = {line.split()[0]: float(line.split()[-2]) for line in out.stdout.splitlines() if line.endswith(" GiB")}
    assert parts["weights"] == pytest.approx(1_543_714_304 * 4 / memory.GIB, rel=1e-3)  # float32 masters
    assert parts["optimizer"] == pytest.approx(2 * parts["weights"], rel=1e-3)
    assert "micro-batch: 21 rows (16128 tokens)" in out.stdout


def test_a_config_that_cannot_fit_is_refused_with_the_fix(tmp_path):
    out = plan_cmd(tmp_path, "--device", "cuda", "--memory-gib", "40")
    assert out.returncode == 1
    assert "DOES NOT FIT" in out.stdout
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("does not fit: set optim.micro_batch_tokens=")
    budget = int(line.rsplit("=", 1)[1])
    assert 0 < budget < 16384 and budget % (256 + 512) == 0  # whole rows of prompt + completion
    ok = plan_cmd(tmp_path, f"optim.micro_batch_tokens={budget}", "--device", "cuda", "--memory-gib", "40")
    assert ok.returncode == 0, ok.stdout + ok.stderr  # the named fix fits


def test_lora_plan_trains_the_adapters_only():
    cfg = load_config(None, ["model.lora.rank=16", "grpo.beta=0.04", "model.dtype=bfloat16"])
    p = memory.plan(cfg, QWEN15, "cuda", 80 * memory.GIB)
    g = Geometry.of(QWEN15)
    assert p.parts["gradients"] == g.lora_parameters(16, "all-linear") * 4
    assert p.parts["reference"] == 0  # the base with adapters off is the reference
    assert p.fits()


def test_the_embedded_default_plans_on_the_cpu():
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "plan"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "model.dtype=auto on cpu" in out.stdout and "peak" in out.stdout
