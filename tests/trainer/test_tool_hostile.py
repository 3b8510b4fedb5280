"""Hostile tool calls in the learner's path (issue 49), on a real tiny model, the real transformers engine,
a real arith verifier on loopback and the real scorer.

The model is taught (a few hundred supervised steps, nothing scripted) to write a ``<tool_call>`` whose
arguments open 1,024 brackets, read the result and answer ``A42``. That call used to raise RecursionError
out of ``find_call`` and kill the run; now it is the call's own ``bad_arguments`` error: the model reads
it, its next turn is generated, and the rollout is scored (never masked).
"""

from __future__ import annotations

import string

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.tools.base import CallResult
from cohort.tools.calls import find_call, render, render_parts
from cohort.tools.client import ToolClient
from cohort.trainer import tool_rollouts
from cohort.trainer.config import TinyModel, load_config
from cohort.trainer.engines.hf import TransformersEngine
from cohort.trainer.models import tiny_llama
from cohort.trainer.scoring import Scorer
from cohort.verifiers.base import encode_text
from cohort.verifiers.records import Task

RUN = 64  # one token writes 64 brackets (BPE merges below), so the model learns a short call
CALL = '<tool_call>{"name":"calculator","arguments":' + "[" * (16 * RUN) + "}</tool_call>"
ANSWER = "A42"


def bracket_tokenizer():
    """A char-level fast tokenizer (as cohort.trainer.models.char_tokenizer) whose BPE merges also make
    runs of 2, 4, ... 64 brackets one token each."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = string.ascii_letters + string.digits + " \n<>{}[]\"':,./()-_=*+`!?;"
    runs = ["[" * (2**k) for k in range(1, 7)]
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", *chars, *runs])}
    merges = [("[" * (2 ** (k - 1)), "[" * (2 ** (k - 1))) for k in range(1, 7)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<pad>", "<eos>", "<bos>", "<unk>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False)


def teach(tok, call: str, result: CallResult):
    """A tiny Llama taught: Q: -> ``call``, then (after the result, encoded as the trainer writes it) ANSWER."""
    head, body, tail = render_parts(result, "tool_call")
    written = tok(head)["input_ids"] + encode_text(tok, body) + tok(tail)["input_ids"]
    ids = tok("Q:")["input_ids"] + tok(call)["input_ids"] + written + tok(ANSWER)["input_ids"] + [tok.eos_token_id]
    assert len(ids) < 250 and tok.decode(tok(call)["input_ids"]) == call
    model = tiny_llama(TinyModel(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                 max_position_embeddings=256), tok)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = torch.tensor([ids])
    torch.manual_seed(0)
    for _ in range(400):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05, loss.item()
    return model.eval()


@pytest.fixture(scope="module")
def taught():
    tok = bracket_tokenizer()
    found = find_call(CALL, "tool_call")
    result = CallResult(True, found.error, "bad_arguments")
    return teach(tok, CALL, result), tok, render(result, "tool_call")


def test_a_call_nested_1024_deep_is_the_models_error_and_the_rollout_is_scored(taught):
    model, tok, result = taught
    with ServiceProcess(["calculator"]) as calc, ServiceProcess(["arith"]) as arith:
        cfg = load_config(None, [
            f'rollout.tools=[{{endpoints: ["{calc.endpoint}"]}}]', "rollout.max_turns=3", "rollout.tool_format=tool_call",
            "rollout.max_completion_length=200", "rollout.temperature=0.05", "rollout.tool_timeout_s=10",
            f'scoring.verifiers=[{{name: arith, endpoints: ["{arith.endpoint}"], options: {{format_weight: "0", pick: last}}}}]'])
        client = ToolClient([[calc.endpoint]], timeout_s=10)
        client.handshake()
        engine = tool_rollouts.ToolRollouts(TransformersEngine(cfg.rollout, model, tok, 0), client, tok, cfg.rollout)
        try:
            batch = engine.generate([tok("Q:")["input_ids"]], 2)
        finally:
            engine.close()
        scorer = Scorer(cfg.scoring, {"arith": [arith.endpoint]})
        try:
            scores = scorer.submit([Task.with_answer("Q:", "42")], batch.texts, batch.truncated.tolist(),
                                   tools=batch.tools).result()
        finally:
            scorer.close()
    for row in range(2):
        length = int(batch.completion_mask[row].sum())
        transcript = tok.decode(batch.completion_ids[row, :length], skip_special_tokens=True)
        assert transcript.startswith(CALL) and "[" * 1000 in transcript  # the depth, really written
        assert result in transcript and "deeper than 64 levels" in result  # the model read its own error
    assert batch.texts == [CALL + ANSWER] * 2  # and went on to answer in its next turn
    assert batch.tools.calls.tolist() == [1, 1] and batch.tools.turns.tolist() == [2, 2]
    assert not batch.tools.failed.any() and batch.tools.errors == [("bad_arguments",)] * 2
    assert scores.valid.all() and scores.rewards.flatten().tolist() == [1.0, 1.0]  # scored, not masked


def test_a_program_printing_special_tokens_writes_no_special_token_into_the_context():
    """The model's call prints the tokenizer's special tokens (``<eos>``, ``<pad>``, ...) through the real
    sandbox: the next turn's context holds those characters, never their ids (they used to be encoded
    with special-token parsing on: a program could end the turn or forge one)."""
    tok = bracket_tokenizer()
    specials = "".join(tok.all_special_tokens)
    code = "print(" + "+".join(f"'<'+'{t[1:]}'" for t in tok.all_special_tokens) + ")"  # the model writes no special
    call = '<tool_call>{"name":"python","arguments":{"code":"' + code + '"}}</tool_call>'
    model = teach(tok, call, CallResult(True, specials + "\n"))
    with ServiceProcess(["sandbox"], env={"COHORT_SANDBOX_POOL_SIZE": "1"}) as sandbox:
        cfg = load_config(None, [
            f'rollout.tools=[{{endpoints: ["{sandbox.endpoint}"]}}]', "rollout.max_turns=3",
            "rollout.tool_format=tool_call", "rollout.max_completion_length=200", "rollout.temperature=0.05",
            "rollout.tool_timeout_s=20"])
        client = ToolClient([[sandbox.endpoint]], timeout_s=20)
        client.handshake()
        engine = tool_rollouts.ToolRollouts(TransformersEngine(cfg.rollout, model, tok, 0), client, tok, cfg.rollout)
        try:
            batch = engine.generate([tok("Q:")["input_ids"]], 1)
        finally:
            engine.close()
    tool = batch.tools.tool_mask[0]
    result_ids = batch.completion_ids[0][tool].tolist()
    assert tok.decode(result_ids) == render(CallResult(True, specials + "\n"), "tool_call")  # the program's text...
    assert set(tok.all_special_ids).isdisjoint(result_ids)  # ...and not one special id
    assert batch.texts == [call + ANSWER] and not batch.tools.failed.any()


def test_dynamic_sampling_reads_the_masked_scores():
    """A round's scores are masked for tool failures where they are made (``collect._generate``; the pipeline
    at arrival), before dynamic sampling judges a group informative: the loss and the resampling read the
    same scores. The taught model's call finds its sandbox gone; the verifier alone would score its text
    (``print(6*7)``, last integer 7 = the answer) 1.0, usable."""
    import importlib.util
    import sys
    from pathlib import Path

    from cohort.trainer.collect import Sources, _generate, collect_round
    from cohort.trainer.data import PromptSampler
    from cohort.trainer.metrics import StepTimer
    from cohort.trainer.distributed import SINGLE

    spec = importlib.util.spec_from_file_location("cohort_tests_taught", Path(__file__).parents[1] / "tools" / "taught.py")
    taught_module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = taught_module
        spec.loader.exec_module(taught_module)
    model, tok = taught_module.taught_model()
    with ServiceProcess(["sandbox"]) as sandbox, ServiceProcess(["arith"]) as arith:
        cfg = load_config(None, [
            f'rollout.tools=[{{endpoints: ["{sandbox.endpoint}"]}}]', "rollout.max_turns=2", "rollout.tool_format=fenced",
            "rollout.max_completion_length=80", "rollout.temperature=0.05", "rollout.tool_timeout_s=3",
            f'scoring.verifiers=[{{name: arith, endpoints: ["{arith.endpoint}"], options: {{format_weight: "0", pick: last}}}}]',
            "grpo.prompts_per_step=1", "rollout.generation_chunks=1", "grpo.num_generations=2", "grpo.dynamic_sampling=true", "grpo.max_resample_rounds=1"])
        engine = tool_rollouts.wrap(TransformersEngine(cfg.rollout, model, tok, 0), cfg.rollout, tok)
        sandbox.kill()  # after the handshake: every call fails (infrastructure)
        scorer = Scorer(cfg.scoring, {"arith": [arith.endpoint]})
        tasks = [Task.with_answer("Q:", "7")] * 2
        src = Sources(engine, scorer, tasks, [tok("Q:")["input_ids"]] * 2, PromptSampler(2, 1, 0), cfg, tok.pad_token_id,
                      None, lambda ids, mask, t: torch.zeros(ids.shape[0], t))
        try:
            unmasked = scorer.submit(tasks[:1], [taught_module.CALL] * 2, [False, False]).result()
            rnd = _generate(src, [0], StepTimer())
            resampled = collect_round(src, SINGLE, StepTimer()).resampled
        finally:
            scorer.close()
            engine.close()
    assert unmasked.valid.all() and unmasked.rewards.flatten().tolist() == [1.0, 1.0]  # what the verifier alone says
    assert rnd.batch.tools.failed.all() and rnd.batch.texts == [taught_module.CALL] * 2
    assert not rnd.scores.valid.any() and rnd.scores.statuses == [["tool_unavailable"] * 2]
    assert resampled == 1  # no usable rollout: not informative, refilled
