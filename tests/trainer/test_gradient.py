"""A real forward/backward through a tiny Llama: one GRPO update raises the probability of the
rewarded completion and lowers the unrewarded one; clipping bounds repeated updates."""

from __future__ import annotations

import pytest
import torch

from cohort.trainer.advantages import group_advantages
from cohort.trainer.config import load_config
from cohort.trainer.learner import Learner, UpdateBatch, token_logprobs
from cohort.trainer.models import char_tokenizer, tiny_llama
from cohort.trainer.config import TinyModel


def setup(lr=1e-2, **grpo):
    overrides = [f"optim.learning_rate={lr}", "rollout.max_completion_length=2", "grpo.beta=0.0",
                 "grpo.epsilon_high=0.2"] + [f"grpo.{k}={v}" for k, v in grpo.items()]
    cfg = load_config(None, overrides)
    tok = char_tokenizer()
    model = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2), tok)
    return cfg, tok, model


def group_batch(tok, completions: list[str], rewards: list[float]):
    prompt = tok("2+3=")["input_ids"]
    comp = [tok(c)["input_ids"] + [tok.eos_token_id] for c in completions]
    ids = torch.tensor([prompt + c for c in comp])
    am = torch.ones_like(ids)
    loss_mask = torch.ones(len(comp), len(comp[0]), dtype=torch.bool)
    adv = group_advantages(torch.tensor([rewards]), torch.ones(1, len(rewards), dtype=torch.bool)).advantages[0]
    return ids, am, loss_mask, adv[:, None].expand_as(loss_mask)  # (G, T): the outcome advantage on every token


def padded_batch(tok, completions: list[str]):
    """Prompt "2+3=" then each completion + EOS, right-padded to the longest: ids, attention mask,
    completion mask and completion width."""
    prompt = tok("2+3=")["input_ids"]
    comps = [tok(c)["input_ids"] + [tok.eos_token_id] for c in completions]
    width = max(map(len, comps))
    ids = torch.tensor([prompt + c + [tok.pad_token_id] * (width - len(c)) for c in comps])
    am = torch.tensor([[1] * len(prompt) + [1] * len(c) + [0] * (width - len(c)) for c in comps])
    return ids, am, am[:, len(prompt):].bool(), width


def seq_logprob(model, ids, am, t):
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, am, t)
    return lp.sum(-1)


def answer_logprob(model, ids, am):
    """log pi(answer token | prompt): the first completion token of each row."""
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, am, 2)
    return lp[:, 0]


def test_update_raises_probability_of_rewarded_tokens():
    cfg, tok, model = setup()
    ids, am, mask, adv = group_batch(tok, ["5", "7", "5", "1"], [1.0, 0.0, 1.0, 0.0])
    before = answer_logprob(model, ids, am)
    learner = Learner(model, cfg)
    stats = learner.step(UpdateBatch(ids, am, mask, adv, None, None))
    after = answer_logprob(model, ids, am)
    assert stats["policy/grad_norm"] > 0
    assert after[0] > before[0] + 0.01  # "5" rewarded
    assert after[1] < before[1] - 0.01 and after[3] < before[3] - 0.01  # "7", "1" not
    for _ in range(20):
        learner.step(UpdateBatch(ids, am, mask, adv, None, None))
    assert answer_logprob(model, ids, am)[0].exp() > 0.9  # the policy learns to answer 5


def test_gradient_matches_the_analytic_policy_gradient():
    """On-policy (ratio 1) with beta = 0 the loss gradient is -sum_i A_i grad log pi(y_i) / N_tokens (dapo)."""
    cfg, tok, model = setup(loss_type="dapo")
    ids, am, mask, adv = group_batch(tok, ["5", "7"], [1.0, 0.0])
    learner = Learner(model, cfg)
    lp, _ = token_logprobs(model, ids, am, 2)
    surrogate = -(adv * lp).sum() / mask.sum()
    want = torch.autograd.grad(surrogate, [model.lm_head.weight])[0]
    model.zero_grad()
    from cohort.trainer.loss import LossInputs, normaliser, policy_loss

    lp2, _ = token_logprobs(model, ids, am, 2)
    out = policy_loss(LossInputs(lp2, lp2.detach(), adv, mask), learner.loss_cfg, normaliser(mask, "dapo", 2))
    out.loss.backward()
    assert torch.allclose(model.lm_head.weight.grad, want, atol=1e-7)


@pytest.mark.parametrize("seed", range(5))
def test_kl_pulls_towards_the_reference(seed):
    """With zero advantages only the k3 KL acts, and it moves a drifted policy back towards the reference."""
    cfg, tok, model = setup(lr=1e-3, beta=1.0)  # Adam moves every weight ~lr per step: keep the steps small
    ids, am, mask, _ = group_batch(tok, ["5", "7"], [1.0, 0.0])
    ref_lp = seq_logprob(model, ids, am, 2)
    with torch.no_grad():
        drift = torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(seed))
        model.lm_head.weight.add_(drift * 0.5)
    reference = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2), tok)
    with torch.no_grad():
        ref_tok, _ = token_logprobs(reference, ids, am, 2)
    learner = Learner(model, cfg)
    gap_before = (seq_logprob(model, ids, am, 2) - ref_lp).abs().sum()
    for _ in range(5):
        learner.step(UpdateBatch(ids, am, mask, torch.zeros(mask.shape), None, ref_tok))
    gap_after = (seq_logprob(model, ids, am, 2) - ref_lp).abs().sum()
    assert gap_after < gap_before


@pytest.mark.parametrize("cost", [0, 4, 160])
def test_length_bucketed_micro_batches_give_the_full_batch_gradient(cost):
    """Rows of different lengths, micro-batches of at most 2 cut to their own width == one full-width batch
    (cost 0: fixed pairs; 4: a split by length; 160: as few micro-batches as the cap allows)."""
    from cohort.trainer.loss import LossInputs, normaliser, policy_loss

    for loss_type in ("grpo", "dapo", "dr_grpo"):
        cfg, tok, model = setup(loss_type=loss_type)
        cfg = cfg.model_copy(update={"optim": cfg.optim.model_copy(
            update={"micro_batch_size": 2, "max_grad_norm": 1e9, "micro_batch_cost_tokens": cost})})
        ids, am, mask, width = padded_batch(tok, ["5", "1234567", "7", "45"])
        adv = torch.tensor([1.0, -0.5, 0.7, -1.2])[:, None] + 0.1 * torch.arange(width)  # (B, T) per token
        lp, _ = token_logprobs(model, ids, am, width)
        full = policy_loss(LossInputs(lp, lp.detach(), adv, mask), Learner(model, cfg).loss_cfg,
                           normaliser(mask, loss_type, cfg.rollout.max_completion_length))
        want = torch.autograd.grad(full.loss, list(model.parameters()))
        learner = Learner(model, cfg)
        learner.step(UpdateBatch(ids, am, mask, adv, None, None))
        for g, p in zip(want, model.parameters()):
            assert torch.allclose(p.grad, g, atol=1e-7), loss_type


def _bucket_cost(buckets, prompt, cost):
    return sum(cost + len(idx) * (prompt + width) for idx, width in buckets)


def test_length_buckets_hand_computed():
    """8 rows, prompt width 6: one long completion gets a micro-batch of its own when a forward costs 20 tokens."""
    from cohort.trainer.forward import length_buckets

    lengths = torch.tensor([3, 32, 2, 3, 2, 3, 2, 2])

    def shape(buckets):
        return [(sorted(idx.tolist()), width) for idx, width in buckets]

    # one batch of 8 padded to 32: 20 + 8*38 = 324; [32] + 7 rows at width 3: 58 + 83 = 141 (the best)
    assert shape(length_buckets(lengths, 8, 6, 20)) == [([1], 32), ([0, 2, 3, 4, 5, 6, 7], 3)]
    # at most 4 rows: [32] [3 3 3] [2 2 2 2] = 58 + 47 + 52 = 157 beats [32] [3 3 3 2] [2 2 2] = 158
    assert shape(length_buckets(lengths, 4, 6, 20)) == [([1], 32), ([0, 3, 5], 3), ([2, 4, 6, 7], 2)]
    assert shape(length_buckets(lengths, 8, 6, 1000)) == [(list(range(8)), 32)]  # forwards dear: one batch
    # cost 0: fixed runs of 4 rows, longest first (the distributed and bnpo path)
    assert shape(length_buckets(lengths, 4, 6, 0)) == [([0, 1, 3, 5], 32), ([2, 4, 6, 7], 2)]


def test_length_buckets_are_optimal_partitions():
    """Against brute force over every split of the sorted rows into runs of at most `cap`."""
    import itertools

    from cohort.trainer.forward import length_buckets

    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        n = int(torch.randint(1, 9, (1,), generator=g))
        lengths = torch.randint(0, 33, (n,), generator=g)
        cap = int(torch.randint(1, 9, (1,), generator=g))
        cost, prompt = int(torch.randint(1, 200, (1,), generator=g)), 6
        buckets = length_buckets(lengths, cap, prompt, cost)
        rows = torch.cat([idx for idx, _ in buckets])
        assert sorted(rows.tolist()) == list(range(n))  # every row exactly once
        assert all(len(idx) <= cap and width == max(int(lengths[idx].max()), 1) for idx, width in buckets)
        widths = sorted((max(int(x), 1) for x in lengths), reverse=True)
        best = min(
            sum(cost + (b - a) * (prompt + widths[a]) for a, b in zip((0, *cuts), (*cuts, n)))
            for k in range(n) for cuts in itertools.combinations(range(1, n), k)
            if all(b - a <= cap for a, b in zip((0, *cuts), (*cuts, n))))
        assert _bucket_cost(buckets, prompt, cost) == best


@pytest.mark.parametrize("cost", [0, 4, 160])
def test_batched_logprobs_equal_one_full_width_forward(cost):
    from cohort.trainer.learner import batched_logprobs

    _, tok, model = setup()
    ids, am, mask, width = padded_batch(tok, ["5", "1234567", "7", "45", "", "3210"])
    with torch.no_grad():
        full, _ = token_logprobs(model, ids, am, width)
    got = batched_logprobs(model, ids, am, width, 1.0, 4, cost)
    assert torch.allclose(got[mask], full[mask], atol=1e-6)
    assert (got[~mask] == 0).all() and (full[~mask] == 0).all()  # nothing past a completion's end


def test_first_pass_logprobs_serve_as_pi_old_for_the_next_passes():
    """num_iterations = 2: the first pass's own log-probs (before its update) equal a no-grad forward of the
    sampling policy, and two passes with them match two passes with that extra forward."""
    import copy
    import dataclasses

    from cohort.trainer.learner import batched_logprobs

    cfg, tok, model = setup(lr=1e-2, beta=0.04, num_iterations=2)
    ids, am, mask, width = padded_batch(tok, ["5", "12", "7", "45"])
    reference = copy.deepcopy(model)
    other = copy.deepcopy(model)
    ref_lp = batched_logprobs(reference, ids, am, width, 1.0, 4)
    batch = UpdateBatch(ids, am, mask, torch.tensor([1.0, -0.5, 0.7, -1.2])[:, None].expand_as(mask), None, ref_lp)
    old = batched_logprobs(other, ids, am, width, 1.0, 4)  # the extra forward TRL runs
    with_forward = Learner(other, cfg)
    for _ in range(2):
        with_forward.step(dataclasses.replace(batch, old_logprobs=old))
    learner = Learner(model, cfg)
    learner.step(batch)
    assert torch.allclose(learner.last_logprobs, old, atol=1e-6)
    learner.step(dataclasses.replace(batch, old_logprobs=learner.last_logprobs))
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.allclose(a, b, atol=1e-5)  # float rounding through two Adam steps of lr 1e-2
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))


def test_learner_update_runs_the_passes_with_first_pass_logprobs_as_pi_old():
    """``Learner.update`` is the loop's call: the same weights as the passes written out above."""
    import copy
    import dataclasses

    cfg, tok, model = setup(lr=1e-2, num_iterations=2)
    ids, am, mask, width = padded_batch(tok, ["5", "12", "7", "45"])
    other = copy.deepcopy(model)
    batch = UpdateBatch(ids, am, mask, torch.tensor([1.0, -0.5, 0.7, -1.2])[:, None].expand_as(mask), None, None)
    Learner(model, cfg).update(batch, 2)
    by_hand = Learner(other, cfg)
    by_hand.step(batch)
    by_hand.step(dataclasses.replace(batch, old_logprobs=by_hand.last_logprobs))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))


def test_a_skipped_round_advances_the_schedule_by_its_passes_without_a_warning():
    """The learning rate is a function of the round: a round with no row in the loss moves the schedule as
    far as a round of ``num_iterations`` optimizer steps (the old skip moved it one step, so decay lagged),
    and PyTorch's "lr_scheduler.step() before optimizer.step()" warning, meant for the old call order, is
    not raised by this deliberate skip."""
    import warnings

    cfg, tok, model = setup(lr=1e-2, num_iterations=2)
    cfg = cfg.model_copy(update={"optim": cfg.optim.model_copy(update={"lr_scheduler_type": "linear"}),
                                 "run": cfg.run.model_copy(update={"max_steps": 4})})
    ids, am, mask, width = padded_batch(tok, ["5", "12", "7", "45"])
    batch = UpdateBatch(ids, am, mask, torch.tensor([1.0, -0.5, 0.7, -1.2])[:, None].expand_as(mask), None, None)
    empty = UpdateBatch(ids[:0], am[:0], mask[:0], batch.advantages[:0], None, None)
    skipped, trained = Learner(model, cfg), Learner(setup()[2], cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = {k: v.clone() for k, v in model.state_dict().items()}
        assert skipped.update(empty, 2) == {"policy/lr": pytest.approx(1e-2)}
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)], [str(w.message) for w in caught]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no update
    trained.update(batch, 2)
    assert skipped.scheduler.last_epoch == trained.scheduler.last_epoch == 2
    assert skipped.scheduler.get_last_lr() == trained.scheduler.get_last_lr() == [pytest.approx(0.75e-2)]  # 1 - 2/8


@pytest.mark.parametrize("backend", ["llama_cpu", "module"])
def test_gradient_checkpointing_gives_the_same_update(backend):
    """optim.gradient_checkpointing recomputes each layer in the backward pass: the same gradients, on the
    CPU fast path (its own per-layer checkpoint) and on the module (transformers' gradient checkpointing)."""
    import copy

    from transformers import LlamaForCausalLM

    cfg, tok, _ = setup()
    base = tiny_llama(TinyModel(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2), tok)
    if backend == "module":  # a subclass is not a plain LlamaForCausalLM, so the learner takes the module's forward
        cls = type("WrappedLlama", (LlamaForCausalLM,), {})
        base = cls(base.config).eval()
    ids, am, mask, width = padded_batch(tok, ["5", "1234567", "7", "45"])
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2])[:, None].expand(-1, width)
    grads, used = {}, {}
    for ckpt in (False, True):
        model = copy.deepcopy(base)
        c = cfg.model_copy(update={"optim": cfg.optim.model_copy(update={"micro_batch_size": 2, "max_grad_norm": 1e9,
                                                                        "gradient_checkpointing": ckpt})})
        learner = Learner(model, c)
        used[ckpt] = (learner.forward.name, any(getattr(m, "gradient_checkpointing", False) for m in model.modules()))
        learner.step(UpdateBatch(ids, am, mask, adv, None, None))
        grads[ckpt] = [p.grad.clone() for p in model.parameters()]
    assert used[False][0] == used[True][0] == backend
    assert used[True][1] and not used[False][1]  # the module's own checkpointing too (the fast path's fallback)
    assert any(g.abs().sum() > 0 for g in grads[False])
    for a, b in zip(grads[False], grads[True]):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
