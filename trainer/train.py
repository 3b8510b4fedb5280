"""The GRPO loop, top to bottom: sample G per prompt -> score remotely -> advantages -> update -> log.

Everything else is a named call: a round of experience (``collect``: chunked generation overlapped
with remote scoring, dynamic resampling, every per-row tensor), the maths (``advantages``,
``loss``), the optimizer steps (``learner``), ``checkpoint`` (one format for every world size) and
``metrics`` (one ``StepTimer`` per step). The learner only idles waiting on the verifiers, reported
as ``verify/idle_frac``. The old policy's log-probs are the current ones detached in the first of
the ``num_iterations`` passes (the policy has not moved since sampling), and that pass's log-probs
serve as pi_old for the later ones: no extra forward (engines that report their own log-probs still
get one, for the importance-sampling correction).
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from cohort.trainer import checkpoint, distributed, metrics, tool_rollouts
from cohort.trainer.advantages import Advantages
from cohort.trainer.collect import Round, Sources, collect_round, reference_logprobs
from cohort.trainer.config import TrainConfig, dump_config
from cohort.trainer.data import PromptSampler, encode_prompts, load_examples
from cohort.trainer.learner import Learner
from cohort.trainer.metrics import MetricsLog, StepTimer, plot_rewards
from cohort.trainer.models import build_policy, frozen_reference
from cohort.trainer.pipeline import Pipeline
from cohort.trainer.process import round_advantages
from cohort.trainer.rollout import RolloutBatch, build_engine
from cohort.trainer.scoring import MaskedShare, Scorer, Scores, client_tls
from cohort.verifiers.records import check_routes


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


def train(cfg: TrainConfig, endpoints: dict[str, list[str]]) -> list[dict]:
    if cfg.run.torch_threads:
        torch.set_num_threads(cfg.run.torch_threads)
    torch.manual_seed(cfg.run.seed)
    pipelined = cfg.rollout.max_staleness > 0  # the asynchronous pipeline: rollout workers, one learner
    comm = distributed.SINGLE if pipelined else distributed.init(cfg)  # one process, or a torchrun rank (DDP / FSDP2)
    if not pipelined:
        return _train(cfg, endpoints, comm, None)
    pipeline = Pipeline(cfg)
    pipeline.spawn()  # the rollout workers start up while the learner does
    try:
        return _train(cfg, endpoints, comm, pipeline)
    finally:
        pipeline.close()


def _train(cfg: TrainConfig, endpoints: dict[str, list[str]], comm, pipeline: Pipeline | None) -> list[dict]:
    pipelined = pipeline is not None
    out_dir = cfg.run.output_dir
    examples = load_examples(cfg.data)  # a bad row, or one naming an unconfigured verifier, fails here
    check_routes(examples, {v.name: (v.weight, v.options) for v in cfg.scoring.verifiers})
    policy, tokenizer = build_policy(cfg.model)
    reference = frozen_reference(policy) if cfg.grpo.beta > 0 else None  # no reference model when beta = 0
    policy = distributed.wrap(policy, comm)
    prompt_ids = encode_prompts(examples, tokenizer, cfg.data)  # the chat template when the model has one
    sampler = PromptSampler(len(examples), cfg.grpo.prompts_per_step, cfg.data.shuffle_seed)
    engine = pipeline or distributed.for_generation(
        tool_rollouts.wrap(build_engine(cfg.rollout, distributed.unwrap(policy), tokenizer, cfg.run.seed + comm.rank),
                           cfg.rollout, tokenizer), policy, comm)  # multi-turn with tools when rollout.max_turns > 1
    learner = Learner(policy, cfg, comm)
    start = checkpoint.resume(cfg.run, policy, learner, engine, sampler, comm)  # 0: a fresh run
    # the resumed run's records (the target window spans the restart), from rank 0's file on every rank so
    # that all ranks stop together; read before rank 0's MetricsLog truncates that file
    history = [r for r in metrics.read_if_exists(Path(out_dir) / "metrics.jsonl") if r["step"] <= start]
    comm.barrier()
    if not announce_start(start, history, cfg, comm):
        comm.close()
        return []
    scorer = Scorer(cfg.scoring, endpoints)  # handshake: fails fast when a verifier is missing
    scorer.check(examples)  # every row routes to verifiers that accept its reference kind
    for line in scorer.describe():  # endpoints, TLS mode, server version, limits
        comm.say(line)
    masked_share, masked = MaskedShare(cfg.scoring), MaskedRounds(cfg.scoring.max_masked_rounds)
    log = MetricsLog(distributed.rank_dir(out_dir, comm), tensorboard=cfg.run.tensorboard and comm.is_main,
                     progress=cfg.run.progress and comm.is_main, total_steps=cfg.run.max_steps, start_step=start,
                     every_steps=cfg.run.log_every, every_s=cfg.run.log_every_s)
    (log.dir / "config.resolved.yaml").write_text(dump_config(cfg))
    src = Sources(engine, scorer, examples, prompt_ids, sampler, cfg, int(tokenizer.pad_token_id),
                  reference_logprobs(reference, cfg), learner.logprobs)
    records: list[dict] = []
    run_start = time.perf_counter()
    step = start
    try:
        if pipelined:
            engine.start(src, policy, start)  # the workers generate from now on
        while step < cfg.run.max_steps:
            timer = StepTimer()
            # 1-3. G completions for each of this rank's P/world prompts, each chunk scored as soon as it
            #      exists; per-row log-probs while the verifiers work; flat groups resampled (DAPO).
            #      Pipelined: P scored groups at most rollout.max_staleness versions old from the workers
            rnd = engine.next_round(src, timer) if pipelined else collect_round(src, comm, timer)
            everything, scores = distributed.gather_round(rnd.batch, rnd.scores, comm, src.pad_id)  # all B rows
            scores = tool_rollouts.mask_failures(scores, everything)  # a tool's infrastructure failed: masked
            alarm = masked_share.observe(scores, comm.say)  # the share each verifier masks, over a window
            if masked.skip(scores, step, comm.say):  # a round nobody could score trains nothing: not a step
                continue
            step += 1
            # 4. group advantages over valid rollouts of the whole round; groups without signal drop out
            adv, token_adv, rows, step_stats = loss_rows(everything, scores, cfg, tokenizer)  # token_adv: (B, T)
            mine = comm.local_rows(rows, cfg.batch_size)  # this rank's included rows
            # 5. num_iterations optimizer steps on the included rows only; the engine follows the policy
            with timer("update"):
                update = learner.update(rnd.update_batch(mine, token_adv[comm.row_slice(cfg.batch_size)]),
                                        cfg.grpo.num_iterations)
                engine.sync_weights(distributed.unwrap(policy))
            # 6. log and checkpoint
            record = (round_metrics(everything, scores, adv, len(rows)) | step_stats | update | rnd.is_metrics
                      | resample_metrics(rnd, cfg) | alarm | masked.metrics(scorer.outage_s())
                      | tool_rollouts.metrics(everything)
                      | (engine.metrics(timer) if pipelined else {})
                      | timer.record(run_start, float(everything.completion_mask.sum())))
            log.log(step, record)
            records.append({"step": step, **record})
            done = step == cfg.run.max_steps or reached_target([*history, *records], cfg)
            if done or (cfg.run.save_every and step % cfg.run.save_every == 0):
                checkpoint.save_run(out_dir, step, policy, learner, engine, sampler, comm)
            if done:
                break
    finally:
        if pipelined:
            engine.close()  # before the scorer: the workers' last groups are still arriving
        log.close()
        scorer.close()
    distributed.save_pretrained(policy, tokenizer, log.dir / "final", comm)  # rank 0 gathers the shards
    if cfg.run.plot and records and comm.is_main:
        plot_rewards(log.path, log.dir / "reward_curve.png")
    comm.close()
    return records


def announce_start(start: int, history: list[dict], cfg: TrainConfig, comm) -> bool:
    """Say what a re-run does (resume, or nothing left to do); False when there is nothing to train."""
    fresh = "to start fresh: run.resume=false, which deletes its checkpoints, or another run.output_dir"
    if start and (finished := already_finished(start, history, cfg)):
        comm.say(f"run {cfg.run.output_dir} {finished}: nothing to train ({fresh})")
        return False
    if start:
        comm.say(f"resuming run {cfg.run.output_dir} from step {start} of {cfg.run.max_steps} ({fresh})")
    return True


def already_finished(start: int, history: list[dict], cfg: TrainConfig) -> str | None:
    """Why a resumed run has nothing left to do, or None."""
    if start >= cfg.run.max_steps:
        return f"already reached run.max_steps={cfg.run.max_steps} (raise it to train on)"
    if reached_target(history, cfg):
        return (f"already reached run.target_reward={cfg.run.target_reward} by step {start} "
                "(run.target_reward=null trains on to run.max_steps)")
    return None


def loss_rows(batch: RolloutBatch, scores: Scores, cfg: TrainConfig,
              tokenizer=None) -> tuple[Advantages, Tensor, Tensor, dict[str, float]]:
    """Group advantages, per-token advantages (B, T) (outcome, plus process ones from step rewards), the
    rows (B indices) that enter the loss: valid rollouts of groups with signal, and step metrics."""
    g = cfg.grpo
    process_weight = next((v.weight for v in cfg.scoring.verifiers if v.kind == "process"), 0.0)
    adv, token_adv, included, step_stats = round_advantages(batch, scores, g.scale_rewards, g.adv_eps, process_weight,
                                                            tokenizer)  # (B, T), (B,)
    if cfg.grpo.mask_truncated_completions:
        included = included & ~batch.truncated
    return adv, token_adv, included.nonzero().squeeze(-1), step_stats


def reached_target(records: list[dict], cfg: TrainConfig) -> bool:
    target, window = cfg.run.target_reward, cfg.run.target_window
    if target is None or len(records) < window:
        return False
    rewards = [r.get("reward/mean") for r in records[-window:]]  # None (no usable rollout) never reaches it
    return None not in rewards and sum(rewards) / window >= target


class MaskedRounds:
    """Rounds whose every rollout was masked (an outage the verifiers reported per rollout, such as the
    sandbox down behind the code verifier): they train nothing, so they are not steps. One line when such a
    streak starts, one when it ends; ``limit`` in a row stop the run with the statuses named."""

    def __init__(self, limit: int) -> None:
        self.limit, self.total, self.streak = limit, 0, 0

    def skip(self, scores: Scores, step: int, say) -> bool:
        import collections

        if bool(scores.valid.any()):
            if self.streak:
                say(f"step {step + 1}: scored again after {self.streak} fully masked round(s)")
            self.streak = 0
            return False
        self.total += 1
        self.streak += 1
        why = ", ".join(f"{k} x{n}" for k, n in collections.Counter(k for row in scores.masked_by for k in row).most_common(3))
        if self.streak >= self.limit:
            raise RuntimeError(f"{self.streak} rounds in a row had every rollout masked ({why}); stopping "
                               f"(scoring.max_masked_rounds={self.limit})")
        if self.streak == 1:
            say(f"after step {step}: every rollout of the round masked ({why}); not counted as a step, "
                "drawing the next prompts")
        return True

    def metrics(self, outage_s: float) -> dict[str, float]:
        """Run totals so far: fully masked rounds (not steps) and seconds any verifier was unavailable."""
        return {"verify/masked_rounds": float(self.total), "verify/outage_s": outage_s}


def resample_metrics(rnd: Round, cfg: TrainConfig) -> dict[str, float]:
    """Dynamic sampling's count of prompts drawn to replace groups without signal (when it is on)."""
    return {"group/resampled_prompts": float(rnd.resampled)} if cfg.grpo.dynamic_sampling else {}


def round_metrics(batch: RolloutBatch, scores: Scores, adv, n_rows: int) -> dict[str, float]:
    valid = scores.valid
    n_valid = int(valid.sum())
    lengths = batch.completion_mask.sum(dim=1).float()  # (B,)
    rec = {
        "reward/mean": float(scores.rewards[valid].mean()) if n_valid else float("nan"),
        "reward/std": float(scores.rewards[valid].std()) if n_valid > 1 else 0.0,
        "verify/unusable_frac": 1.0 - n_valid / valid.numel(),
        "verify/latency_s": scores.latency_s,  # submit -> scores ready (the slowest chunk of the round)
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
    # flags the verifiers set (``verifier/flag``: a candidate-caused limit scored 0, a hack attempt, ...)
    flags = collections.Counter(f for row in scores.flags for fs in row for f in set(fs))
    rec |= {f"verify/flag/{k}": n / valid.numel() for k, n in sorted(flags.items())}
    rec |= {f"verify/dropped/{name}": 1.0 for name in sorted(scores.dropped)}
    return rec


def run(cfg: TrainConfig) -> list[dict]:
    """Start local verifier services when needed, then train. TLS files are read first (before the model loads).
    Under ``torchrun`` with the asynchronous pipeline, ranks 1.. are its rollout workers."""
    if cfg.rollout.max_staleness and distributed.launched() and int(os.environ["RANK"]) > 0:
        from cohort.trainer import rollout_worker

        rollout_worker.run(cfg, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://")
        return []
    client_tls(cfg.scoring)
    with verifier_endpoints(cfg) as endpoints, tool_rollouts.local_servers(cfg) as cfg:
        return train(cfg, endpoints)
