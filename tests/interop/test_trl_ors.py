"""TRL's own ORS integration scoring with a Cohort verifier: two real TRL 1.16 ``GRPOTrainer`` steps whose
dataset, environments and rewards come from ``trl.experimental.openreward.OpenRewardSpec`` pointed at
``cohort serve front ors`` (the openreward SDK's own ``Server``; its terminal tool ``answer``
scores with ``cohort serve arith``). Nothing of Cohort's TRL adapter is used.

TRL drives each rollout through its ``_RolloutEnvironment`` (an openreward SDK session per rollout:
``/create``, the prompt from the environment, each listed ORS tool bound as a method the model may call).
The front's ``answer`` is an ORS *terminal* tool, which ORS hides from the tool list (the harness is to
route the final plain assistant message into it); TRL 1.16 binds listed tools only and does not route
the final message, so the reward function does, through TRL's own tool-call path
(``_RolloutEnvironment._call_ors_tool``: the SDK session's ``call_tool``, TRL's reward bookkeeping,
an error recorded as no reward), and returns TRL's ``env.reward`` (the integration's outcome reward).
The arith server is killed after step 1: in step 2 the tool call fails (the front answers an SSE error,
``cohort_status=DEPENDENCY_UNAVAILABLE``), TRL's environment records no reward, and the reward is None
(TRL logs no step-2 mean), never 0; training goes on.

Needs TRL and the openreward SDK (``scripts/ci-trl`` runs it in ``.venv-peer``); skipped without them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytestmark = [pytest.mark.trl, pytest.mark.timeout(900)]

pytest.importorskip("trl.experimental.openreward")
pytest.importorskip("openreward")

from cohort.rpc.launch import ServiceProcess  # noqa: E402

ROWS = [{"id": f"q{i}", "prompt": f"{a}+{b}=", "answer": str(a + b)} for i, (a, b) in
        enumerate([(12, 30), (7, 8), (21, 21), (5, 4)])]
ALPHABET = [chr(c) for c in range(32, 127)] + ["\n"]
SPECIALS = ["<pad>", "<|im_end|>", "<|im_start|>", "<unk>", "<tool_call>", "</tool_call>", "<think>", "</think>"]


def tiny_model(out: Path):
    """A random tiny Llama with a character tokenizer and TRL's own Qwen3 chat template (tool calling)."""
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    vocab = {tok: i for i, tok in enumerate(SPECIALS + ALPHABET)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<|im_end|>",
                                  unk_token="<unk>", padding_side="left")
    tok.chat_template = qwen3_chat_template
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                                         pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return tok


@pytest.fixture(scope="module")
def ors_front(tmp_path_factory, cohort_front):
    tmp = tmp_path_factory.mktemp("trl-ors")
    rows = tmp / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with ServiceProcess(["arith"]) as arith, \
            cohort_front("ors", arith.endpoint, "arith", tmp, "--rows", str(rows), timeout="5") as url:
        yield {"url": url, "arith": arith, "tmp": tmp}


def test_trl_grpo_trainer_scores_with_a_cohort_verifier_through_its_own_ors_integration(ors_front, monkeypatch):
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.experimental.openreward import OpenRewardSpec

    torch.set_num_threads(2)
    tmp = ors_front["tmp"]
    tokenizer = tiny_model(tmp / "model")
    # the SDK derives api.HOST and sessions.HOST from the URL (its hosted platform's layout); a self-hosted
    # server on 127.0.0.1 is all three, which its own variables say
    monkeypatch.setenv("OPENREWARD_API_URL", ors_front["url"])
    monkeypatch.setenv("OPENREWARD_SESSION_URL", ors_front["url"])
    spec = OpenRewardSpec(ors_front["url"], env_name="cohort", split="train", num_tasks=len(ROWS))
    dataset = spec.train_dataset
    assert dataset["task_index"] == [0, 1, 2, 3] and dataset["answer"] == [r["answer"] for r in ROWS]
    seen: list[dict] = []

    def final_answer(environments, completions, **_):
        """The completion's text to the environment's terminal tool; TRL's outcome reward (None if unscored)."""
        rewards = []
        for env, completion in zip(environments, completions):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            assert not hasattr(env, "answer")  # TRL 1.16 binds listed tools only; ORS hides a terminal tool
            if not env.finished:
                env._call_ors_tool("answer", {"answer": text})  # TRL's own call path: SDK session, reward bookkeeping
            seen.append({"completion": text, "reward": env.reward, "output": env.last_output})
            rewards.append(env.reward)
        return rewards

    logged: dict[int, dict] = {}

    class Kill(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 1:
                ors_front["arith"].kill()  # the Cohort verifier goes down after step 1

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "train_runtime" not in logs:
                logged[state.global_step] = dict(logs)

    cfg = GRPOConfig(output_dir=str(tmp / "out"), per_device_train_batch_size=4, gradient_accumulation_steps=1,
                     num_generations=2, max_completion_length=8, max_tool_calling_iterations=1, temperature=1.0,
                     use_vllm=False, learning_rate=1e-4, max_steps=2, bf16=False, fp16=False, use_cpu=True, seed=0,
                     logging_steps=1, save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
                     remove_unused_columns=False, shuffle_dataset=False)
    trainer = GRPOTrainer(model=str(tmp / "model"), reward_funcs=[final_answer], args=cfg, train_dataset=dataset,
                          environment_factory=spec.environment_factory, processing_class=tokenizer, callbacks=[Kill()])
    trainer.train()

    assert trainer.state.global_step == 2
    step1, step2 = seen[:4], seen[4:8]
    # step 1: every completion scored by Cohort's arith verifier through ORS (a random model: 0, never None)
    assert all(s["reward"] is not None and math.isfinite(s["reward"]) for s in step1), step1
    assert all(s["reward"] == 0.0 for s in step1 if not any(r["answer"] in s["completion"] for r in ROWS))
    # step 2: the verifier is down, the tool call fails naming the masked status, TRL records no reward
    assert [s["reward"] for s in step2] == [None] * 4, step2
    assert all("cohort_status=DEPENDENCY_UNAVAILABLE" in s["output"] for s in step2), step2
    assert math.isfinite(logged[1]["reward"]), logged
    assert logged[2]["reward"] is None or math.isnan(logged[2]["reward"]), logged  # no reward logged, not a 0
