"""The GRPO loop, top to bottom: sample G per prompt -> score remotely -> advantages -> update -> log.

Everything else is a named call: engines (``rollout``), remote scoring (``scoring``), the maths
(``advantages``, ``loss``), the optimizer step (``learner``), ``checkpoint`` and ``metrics``.
Overlap: a round's prompts are generated in ``rollout.generation_chunks`` calls and each chunk is
sent to the verifiers as soon as it exists, so chunk k is scored while chunk k+1 is generated; the
reference forward (beta > 0) also runs while the verifiers work. The learner only idles in ``Scorer``
waits, reported as ``verify/idle_frac``. The old policy's log-probs are the current ones detached in
the first of the ``num_iterations`` passes (the policy has not moved since sampling), and that pass's
log-probs serve as pi_old for the later ones: no extra forward (engines that report their own
log-probs still get one, for the importance-sampling correction).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from cohort.trainer import checkpoint, dist_checkpoint, distributed, llama_forward, metrics
from cohort.trainer.advantages import Advantages, group_advantages
from cohort.trainer.config import TrainConfig, dump_config
from cohort.trainer.data import PromptSampler, encode_prompts, load_examples
from cohort.trainer.is_correction import rollout_correction
from cohort.trainer.learner import Learner, UpdateBatch, batched_logprobs
from cohort.trainer.metrics import MetricsLog, plot_rewards
from cohort.trainer.models import build_policy, frozen_reference
from cohort.trainer.process import round_advantages
from cohort.trainer.rollout import RolloutBatch, build_engine, concat_batches
from cohort.trainer.scoring import Scorer, Scores, client_tls, merge_scores
from cohort.verifiers.records import Task, check_routes


@contextlib.contextmanager
def verifier_endpoints(cfg: TrainConfig) -> Iterator[dict[str, list[str]]]:
    """Configured endpoints, plus local ``cohort serve`` processes for verifiers that have none."""
    endpoints = {v.name: list(v.endpoints) for v in cfg.scoring.verifiers}
    local = [name for name, eps in endpoints.items() if not eps]
    if not local:
        yield endpoints
        return
    from cohort.rpc.launch import LocalServices

    with LocalServices(local) as started:
        yield {**endpoints, **{name: [started[name]] for name in local}}


def sample_and_score(engine, scorer: Scorer, examples: list[Task], prompt_ids: list[list[int]],
                     idx: list[int], cfg: TrainConfig, pad_id: int) -> tuple[RolloutBatch, list, float]:
    """Generate G completions per prompt in chunks, submitting each chunk for scoring at once."""
    g, chunks = cfg.grpo.num_generations, cfg.rollout.generation_chunks
    size = -(-len(idx) // chunks)
    parts, futures, gen_s = [], [], 0.0
    for c in range(0, len(idx), size):
        chunk = idx[c : c + size]
        t = time.perf_counter()
        part = engine.generate([prompt_ids[i] for i in chunk], g)
        gen_s += time.perf_counter() - t
        futures.append(scorer.submit([examples[i] for i in chunk], part.texts, part.truncated.tolist(), c))
        parts.append(part)
    return concat_batches(parts, pad_id), futures, gen_s


def resample_flat_groups(engine, scorer: Scorer, examples: list[Task], prompt_ids: list[list[int]],
                         sampler: PromptSampler, cfg: TrainConfig, pad_id: int, batch: RolloutBatch,
                         scores: Scores) -> tuple[RolloutBatch, Scores, int]:
    """Dynamic sampling (DAPO): replace groups without signal by fresh prompts, a few rounds at most."""
    p, g = cfg.grpo.prompts_per_step, cfg.grpo.num_generations
    drawn = 0
    for _ in range(cfg.grpo.max_resample_rounds):
        informative = group_advantages(scores.rewards, scores.valid, cfg.grpo.scale_rewards).informative_groups
        keep = informative.nonzero().squeeze(-1).tolist()
        if len(keep) >= p:
            break
        idx = sampler.next(p - len(keep))
        drawn += len(idx)
        extra, futures, _ = sample_and_score(engine, scorer, examples, prompt_ids, idx, cfg, pad_id)
        rows = [k * g + j for k in keep for j in range(g)]
        batch = concat_batches([batch.select(rows), extra], pad_id) if rows else extra
        scores = merge_scores([scores.select(keep), merge_scores([f.result() for f in futures])])
    return batch, scores, drawn


def train(cfg: TrainConfig, endpoints: dict[str, list[str]]) -> list[dict]:
    if cfg.run.torch_threads:
        torch.set_num_threads(cfg.run.torch_threads)
    torch.manual_seed(cfg.run.seed)
    comm = distributed.init(cfg)  # one process, or a torchrun rank (DDP / FSDP2)
    out_dir = cfg.run.output_dir
    examples = load_examples(cfg.data)  # a bad row, or one naming an unconfigured verifier, fails here
    check_routes(examples, {v.name: (v.weight, v.options) for v in cfg.scoring.verifiers})
    policy, tokenizer = build_policy(cfg.model)
    reference = frozen_reference(policy) if cfg.grpo.beta > 0 else None  # no reference model when beta = 0
    policy = distributed.wrap(policy, comm)
    prompt_ids = encode_prompts(examples, tokenizer, cfg.data)  # the chat template when the model has one
    sampler = PromptSampler(len(examples), cfg.grpo.prompts_per_step, cfg.data.shuffle_seed)
    engine = distributed.for_generation(
        build_engine(cfg.rollout, distributed.unwrap(policy), tokenizer, cfg.run.seed + comm.rank), policy, comm)
    learner = Learner(policy, cfg, comm)
    start = restore(cfg, policy, learner, engine, sampler, comm)  # 0: a fresh run
    # the resumed run's records (the target window spans the restart), from rank 0's file on every rank so
    # that all ranks stop together; read before rank 0's MetricsLog truncates that file
    history = [r for r in metrics.read_if_exists(Path(out_dir) / "metrics.jsonl") if r["step"] <= start]
    comm.barrier()
    fresh = "to start fresh: run.resume=false, which deletes its checkpoints, or another run.output_dir"
    if start and (finished := already_finished(start, history, cfg)):
        say(f"run {out_dir} {finished}: nothing to train ({fresh})", comm)
        comm.close()
        return []
    if start:
        say(f"resuming run {out_dir} from step {start} of {cfg.run.max_steps} ({fresh})", comm)
    scorer = Scorer(cfg.scoring, endpoints)  # handshake: fails fast when a verifier is missing
    scorer.check(examples)  # every row routes to verifiers that accept its reference kind
    log = MetricsLog(distributed.rank_dir(out_dir, comm), tensorboard=cfg.run.tensorboard and comm.is_main,
                     progress=cfg.run.progress and comm.is_main, total_steps=cfg.run.max_steps, start_step=start,
                     every_steps=cfg.run.log_every, every_s=cfg.run.log_every_s)
    (log.dir / "config.resolved.yaml").write_text(dump_config(cfg))
    records: list[dict] = []
    micro, temp = cfg.optim.micro_batch_size or cfg.batch_size, cfg.rollout.temperature
    # no-grad log-probs (B, T) of a batch; the reference is a plain local module on every rank (any split,
    # the lean forward when it is a Llama), the policy follows the learner's choices
    ref_logprobs_of = functools.partial(batched_logprobs, reference, temperature=temp, micro_batch=micro,
                                        forward_cost=cfg.optim.micro_batch_cost_tokens,
                                        lean=reference is not None and llama_forward.supports(reference))
    old_logprobs_of = functools.partial(batched_logprobs, policy, temperature=temp, micro_batch=micro,
                                        forward_cost=learner.forward_cost, lean=learner.lean)
    mu, pad_id = cfg.grpo.num_iterations, int(tokenizer.pad_token_id)
    t_start = time.perf_counter()
    try:
        for step in range(start + 1, cfg.run.max_steps + 1):
            t_step = time.perf_counter()
            # 1. sample G completions per prompt; each chunk goes to the verifiers as soon as it exists
            batch, futures, gen_s = sample_and_score(engine, scorer, examples, prompt_ids, comm.shard(sampler.next()),
                                                     cfg, pad_id)  # this rank's P/world prompts
            input_ids, attention_mask, t = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
            # 2. while the verifiers work: reference log-probs (beta > 0); the sampler's own log-probs
            #    (vLLM) are compared with a no-grad policy forward (importance-sampling correction)
            t_logprobs = time.perf_counter()
            ref_logprobs = ref_logprobs_of(input_ids, attention_mask, t) if reference is not None else None
            need_old = batch.rollout_logprobs is not None
            old_logprobs = old_logprobs_of(input_ids, attention_mask, t) if need_old else None
            logprobs_s = time.perf_counter() - t_logprobs
            is_weights, is_metrics = rollout_correction(old_logprobs, batch.rollout_logprobs,
                                                        batch.completion_mask.bool(), cfg.rollout.is_correction,
                                                        cfg.rollout.is_cap)
            # 3. rewards: the learner's only wait on the verifiers
            t_wait = time.perf_counter()
            scores = merge_scores([f.result() for f in futures])
            idle_s = time.perf_counter() - t_wait
            resampled = 0
            if cfg.grpo.dynamic_sampling:  # swap groups without signal for fresh prompts
                batch, scores, resampled = resample_flat_groups(engine, scorer, examples, prompt_ids, sampler, cfg,
                                                                pad_id, batch, scores)
                input_ids, attention_mask, t = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
                if resampled and reference is not None:
                    ref_logprobs = ref_logprobs_of(input_ids, attention_mask, t)
                if resampled and need_old:
                    old_logprobs = old_logprobs_of(input_ids, attention_mask, t)
            # 4. group advantages over valid rollouts; groups without signal drop out
            everything, scores = distributed.gather_round(batch, scores, comm, pad_id)  # all B rows, every rank
            adv, token_adv, rows, step_stats = loss_rows(everything, scores, cfg, tokenizer)  # token_adv: (B, T)
            rows = comm.local_rows(rows, cfg.batch_size)  # this rank's included rows
            # 5. num_iterations optimizer steps on the included rows only
            t_update = time.perf_counter()
            if comm.max_int(len(rows)) == 0:
                update = learner.skip()
            else:
                update_batch = UpdateBatch(input_ids[rows], attention_mask[rows], batch.completion_mask[rows].bool(),
                                           token_adv[comm.row_slice(cfg.batch_size)][rows, :t],
                                           None if old_logprobs is None else old_logprobs[rows],
                                           None if ref_logprobs is None else ref_logprobs[rows],
                                           None if is_weights is None else is_weights[rows])
                for _ in range(mu):
                    update = learner.step(update_batch)
                    if update_batch.old_logprobs is None:  # the first pass ran on the sampling policy: its
                        # log-probs are pi_old for the next passes (what a no-grad forward would give)
                        update_batch = dataclasses.replace(update_batch, old_logprobs=learner.last_logprobs)
            engine.sync_weights(distributed.unwrap(policy))
            update_s = time.perf_counter() - t_update
            # 6. log and checkpoint
            step_s = time.perf_counter() - t_step
            record = round_metrics(everything, scores, adv, comm.sum_int(len(rows))) | step_stats | update | is_metrics | {
                "time/step_s": step_s, "time/elapsed_s": time.perf_counter() - t_start,
                "time/generate_s": gen_s, "time/logprobs_s": logprobs_s, "time/update_s": update_s,
                "verify/idle_s": idle_s, "verify/idle_frac": idle_s / step_s, "verify/latency_s": scores.latency_s,
                "throughput/tokens_per_s": float(everything.completion_mask.sum()) / step_s,
            }
            log.log(step, record)
            records.append({"step": step, **record})
            done = step == cfg.run.max_steps or reached_target([*history, *records], cfg)
            save_now = done or bool(cfg.run.save_every and step % cfg.run.save_every == 0)
            if save_now and comm.distributed:
                dist_checkpoint.save_run(out_dir, step, policy, learner, engine, sampler, comm)
            elif save_now:
                checkpoint.save(out_dir, step, {
                    "policy": policy.state_dict(), "optimizer": learner.optimizer.state_dict(),
                    "scheduler": learner.scheduler.state_dict(), "engine": engine.state_dict(),
                    "sampler_position": sampler.position})
            if done:
                break
    finally:
        log.close()
        scorer.close()
    distributed.save_pretrained(policy, tokenizer, log.dir / "final", comm)  # rank 0 gathers the shards
    if cfg.run.plot and records and comm.is_main:
        plot_rewards(log.path, log.dir / "reward_curve.png")
    comm.close()
    return records


def restore(cfg: TrainConfig, policy, learner: Learner, engine, sampler: PromptSampler, comm) -> int:
    """Load the newest checkpoint in ``run.output_dir`` and return its step (0: none, or ``run.resume=false``,
    which deletes the old checkpoints so that a later resume cannot pick one of them up)."""
    out_dir = cfg.run.output_dir
    if not cfg.run.resume:
        old = Path(out_dir) / "checkpoints"
        if old.is_dir():
            comm.barrier()
            if comm.is_main:
                shutil.rmtree(old)
            comm.barrier()
            say(f"run.resume=false: starting {out_dir} afresh (its old checkpoints are deleted)", comm)
        return 0
    if comm.distributed:  # torch.distributed.checkpoint folders (any world size)
        start = dist_checkpoint.resume(out_dir, policy, learner, engine, sampler, comm)
    elif (path := checkpoint.latest(out_dir)) is not None:
        state = checkpoint.load(path)
        policy.load_state_dict(state["policy"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.scheduler.load_state_dict(state["scheduler"])
        engine.load_state_dict(state["engine"])
        sampler.position = state["sampler_position"]
        checkpoint.set_rng_state(state["rng"])
        start = state["step"]
    else:
        start = 0
    return start


def already_finished(start: int, history: list[dict], cfg: TrainConfig) -> str | None:
    """Why a resumed run has nothing left to do, or None."""
    if start >= cfg.run.max_steps:
        return f"already reached run.max_steps={cfg.run.max_steps} (raise it to train on)"
    if reached_target(history, cfg):
        return (f"already reached run.target_reward={cfg.run.target_reward} by step {start} "
                "(run.target_reward=null trains on to run.max_steps)")
    return None


def say(message: str, comm) -> None:
    """A one-off line for the person running the job (rank 0 only)."""
    if comm.is_main:
        print(message, flush=True)


def loss_rows(batch: RolloutBatch, scores: Scores, cfg: TrainConfig,
              tokenizer=None) -> tuple[Advantages, Tensor, Tensor, dict[str, float]]:
    """Group advantages, per-token advantages (B, T) (outcome, plus process ones from step rewards), the
    rows (B indices) that enter the loss: valid rollouts of groups with signal, and step metrics."""
    adv, token_adv, included, step_stats = round_advantages(batch, scores, cfg, tokenizer)  # (B, T), (B,)
    if cfg.grpo.mask_truncated_completions:
        included = included & ~batch.truncated
    return adv, token_adv, included.nonzero().squeeze(-1), step_stats


def reached_target(records: list[dict], cfg: TrainConfig) -> bool:
    target, window = cfg.run.target_reward, cfg.run.target_window
    if target is None or len(records) < window:
        return False
    return sum(r["reward/mean"] for r in records[-window:]) / window >= target


def round_metrics(batch: RolloutBatch, scores: Scores, adv, n_rows: int) -> dict[str, float]:
    valid = scores.valid
    n_valid = int(valid.sum())
    lengths = batch.completion_mask.sum(dim=1).float()  # (B,)
    rec = {
        "reward/mean": float(scores.rewards[valid].mean()) if n_valid else float("nan"),
        "reward/std": float(scores.rewards[valid].std()) if n_valid > 1 else 0.0,
        "verify/unusable_frac": 1.0 - n_valid / valid.numel(),
        "group/zero_std_frac": float((~adv.informative_groups & (valid.sum(1) >= 2)).float().mean()),
        "group/informative_frac": float(adv.informative_groups.float().mean()),
        "rollout/len_mean": float(lengths.mean()),
        "rollout/truncated_frac": float(batch.truncated.float().mean()),
        "rollout/rows_in_loss": float(n_rows),
    }
    for name, values in scores.components.items():
        ok = valid & ~values.isnan()
        if ok.any():
            rec[f"reward/{name}"] = float(values[ok].mean())
    return rec


def run(cfg: TrainConfig) -> list[dict]:
    """Start local verifier services when needed, then train. TLS files are read first (before the model loads)."""
    client_tls(cfg.scoring)
    with verifier_endpoints(cfg) as endpoints:
        return train(cfg, endpoints)
