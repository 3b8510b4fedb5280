"""The GRPO loop, top to bottom: sample G per prompt -> score remotely -> advantages -> update -> log.

Everything else is a named call: a round of experience from the round source (``rounds``: lock-step
generation overlapped with remote scoring, or the asynchronous pipeline's workers; one interface, chosen in
``rounds.source``), the maths (``advantages``,
``loss``), the optimizer steps (``learner``), ``checkpoint`` (one format for every world size; when to
save), ``interrupt`` (SIGINT/SIGTERM end the run after the step in flight, saved) and ``metrics`` (one
``StepTimer`` per step). The learner only idles waiting on the verifiers, reported
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

from cohort.trainer import checkpoint, distributed, metrics, precision, spawn_workers, tool_rollouts
from cohort.trainer.advantages import Advantages, batch_std
from cohort.trainer.config import TrainConfig, dump_config
from cohort.trainer.data import PromptSampler, encode_prompts, load_examples
from cohort.trainer.distributed import SINGLE, Comm
from cohort.trainer.interrupt import Interrupts
from cohort.trainer.learner import Learner
from cohort.trainer.metrics import MetricsLog, StepTimer, plot_rewards
from cohort.trainer.models import build_policy, frozen_reference
from cohort.trainer.step_rewards import round_advantages
from cohort.trainer.reference import reference_logprobs
from cohort.trainer.rollout import RolloutBatch
from cohort.trainer.rounds import mode
from cohort.trainer.rounds.round import Round, Sources
from cohort.trainer.rounds.source import RoundSource, learner_comm, open_source
from cohort.trainer.scoring import MaskCounts, MaskedShare, Scorer, Scores, client_tls
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


def train(cfg: TrainConfig, endpoints: dict[str, list[str]], early: spawn_workers.Workers | None = None,
          interrupts: Interrupts | None = None) -> list[dict]:
    """The run (``early``: rollout workers ``cohort train`` started before importing the trainer; ``interrupts``:
    the signal handlers :func:`run` installed, without which a signal acts as it would anywhere else)."""
    interrupts = interrupts or Interrupts()
    if cfg.run.torch_threads:
        torch.set_num_threads(cfg.run.torch_threads)
    torch.manual_seed(cfg.run.seed)
    comm = learner_comm(cfg)  # one process, or a torchrun rank (DDP / FSDP2)
    source = open_source(cfg, comm, early)  # a pipeline's rollout workers start up while the learner does
    try:
        return _train(cfg, endpoints, comm, source, interrupts)
    finally:
        source.close()


def _train(cfg: TrainConfig, endpoints: dict[str, list[str]], comm, source: RoundSource,
           interrupts: Interrupts) -> list[dict]:
    out_dir = cfg.run.output_dir
    examples = load_examples(cfg.data)  # a bad row, or one naming an unconfigured verifier, fails here
    check_routes(examples, {v.name: (v.weight, v.options) for v in cfg.scoring.verifiers})
    policy, tokenizer = build_policy(cfg.model)
    reference = frozen_reference(policy, cfg.model) if cfg.grpo.beta > 0 else None  # no reference model when beta = 0
    learning_precision = precision.resolve(cfg.model.dtype, next(policy.parameters()).device)  # trainer.precision
    policy = distributed.wrap(policy, comm, learning_precision)
    prompt_ids = encode_prompts(examples, tokenizer, cfg.data)  # the chat template when the model has one
    sampler = PromptSampler(len(examples), cfg.grpo.prompts_per_step, cfg.data.shuffle_seed)
    learner = Learner(policy, cfg, comm)
    start = checkpoint.resume(cfg.run, policy, learner, source, sampler, comm)  # 0: a fresh run
    # the resumed run's records (the target window spans the restart), from rank 0's file on every rank so
    # that all ranks stop together; read before rank 0's MetricsLog truncates that file
    history = [r for r in metrics.read_if_exists(Path(out_dir) / "metrics.jsonl") if r["step"] <= start]
    comm.barrier()
    if not announce_start(start, history, cfg, comm):
        comm.close()
        return []
    scorer = Scorer(cfg.scoring, endpoints)  # handshake: fails fast when a verifier is missing
    scorer.check(examples)  # every row routes to verifiers that accept its reference kind
    for line in precision.describe(policy, learning_precision, cfg.optim.learning_rate):  # size, dtypes, device
        comm.say(line)
    for line in scorer.describe():  # endpoints, TLS mode, server version, limits
        comm.say(line)
    masked_share, masked = MaskedShare(cfg.scoring), MaskedRounds(cfg.scoring.max_masked_rounds)
    log = MetricsLog(distributed.rank_dir(out_dir, comm), tensorboard=cfg.run.tensorboard and comm.is_main,
                     progress=cfg.run.progress and comm.is_main, total_steps=cfg.run.max_steps, start_step=start,
                     every_steps=cfg.run.log_every, every_s=cfg.run.log_every_s)
    (log.dir / "config.resolved.yaml").write_text(dump_config(cfg))
    src = Sources(None, scorer, examples, prompt_ids, sampler, cfg, int(tokenizer.pad_token_id),
                  reference_logprobs(reference, cfg), learner.logprobs, tokenizer)
    records: list[dict] = []
    saver = checkpoint.Saver(cfg.run, comm)  # every run.save_every steps / run.save_every_s seconds, and the end
    run_start = time.perf_counter()
    step, stop = start, False
    try:
        with interrupts.deferred():  # a first SIGINT/SIGTERM waits for the end of the step in flight
            source.start(src, policy, start)  # a pipeline's workers generate from now on
            while step < cfg.run.max_steps:
                timer = StepTimer()
                # 1-3. G completions for each of this rank's P/world prompts, scored, with their per-row
                #      log-probs; flat groups resampled (DAPO). Lock-step: generated now by this process;
                #      pipelined: scored groups at most rollout.max_staleness versions old from the workers
                rnd = source.next_round(timer)
                # from here on every row is one of this rank's b = P/world * G (whole groups); what needs the
                # whole round is a sum of this rank's counts over the ranks (trainer.distributed, decision 1)
                scores = rnd.scores  # a tool's infrastructure failures already masked (by the source)
                masks = MaskCounts.of(scores, comm)  # the round's rollouts: usable, masked by verifier/status
                alarm = masked_share.observe(masks, comm.say)  # the share each verifier masks, over a window
                if masked.skip(masks, step, comm.say):  # a round nobody could score trains nothing: not a step
                    continue
                step += 1
                # 4. group advantages over valid rollouts, token_adv (b, T); groups without signal drop out
                adv, token_adv, rows, step_stats = loss_rows(rnd.batch, scores, cfg, tokenizer, comm)
                # 5. num_iterations optimizer steps on the included rows only; the source follows the policy
                with timer("update"):
                    update = learner.update(rnd.update_batch(rows, token_adv), cfg.grpo.num_iterations)
                    source.publish(distributed.unwrap(policy))
                # 6. log and checkpoint
                record = (round_metrics(rnd.batch, scores, adv, len(rows), comm) | step_stats | update | rnd.is_metrics
                          | resample_metrics(rnd, cfg) | alarm | masked.metrics(scorer.outage_s())
                          | tool_rollouts.metrics(rnd.batch, comm)
                          | source.metrics(timer)
                          | timer.record(run_start, comm.sum_int(int(rnd.batch.completion_mask.sum()))))
                log.log(step, record)
                records.append({"step": step, **record})
                done = step == cfg.run.max_steps or reached_target([*history, *records], cfg)
                stop = not done and interrupts.requested(comm)  # SIGINT/SIGTERM: saved, this step is the last
                if done or stop or saver.due(step):
                    saver.save(step, policy, learner, source, sampler)
                if done or stop:
                    break
    finally:
        source.close()  # before the scorer: a pipeline's last groups are still arriving
        log.close()
        scorer.close()
    if stop:  # not the end of the run: no final model; one line says where it stopped and how to resume
        comm.close()
        raise interrupts.stopped(f"after step {step} of {cfg.run.max_steps}", saver.last, comm)
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


def loss_rows(batch: RolloutBatch, scores: Scores, cfg: TrainConfig, tokenizer=None,
              comm: Comm = SINGLE) -> tuple[Advantages, Tensor, Tensor, dict[str, float]]:
    """Group advantages, per-token advantages (b, T) (outcome, plus process ones from step rewards), the
    rows (indices into this rank's b) that enter the loss: valid rollouts of groups with signal, and step
    metrics. The batch std (``scale_rewards: batch``) and the step metrics are the whole round's."""
    g = cfg.grpo
    process_weight = next((v.weight for v in cfg.scoring.verifiers if v.kind == "process"), 0.0)
    adv, token_adv, included, step_stats = round_advantages(batch, scores, g.scale_rewards, g.adv_eps, process_weight,
                                                            tokenizer, comm.sum)  # (b, T), (b,)
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

    def skip(self, counts: MaskCounts, step: int, say) -> bool:
        """Whether to skip the round (``counts`` are every rank's, so every rank decides the same)."""
        if counts.valid:
            if self.streak:
                say(f"step {step + 1}: scored again after {self.streak} fully masked round(s)")
            self.streak = 0
            return False
        self.total += 1
        self.streak += 1
        why = ", ".join(f"{k} x{n}" for k, n in collections.Counter(counts.masked_by).most_common(3))
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
    """Dynamic sampling's count of prompts drawn to replace groups without signal (when it is on; one learner
    process only, so this is the round's)."""
    return {"group/resampled_prompts": float(rnd.resampled)} if cfg.grpo.dynamic_sampling else {}


def round_metrics(batch: RolloutBatch, scores: Scores, adv: Advantages, n_rows: int,
                  comm: Comm = SINGLE) -> dict[str, float]:
    """The round's metrics over every rank's rows: this rank's sums and counts summed over the ranks, then
    divided; ``reward/std`` is the unbiased std of every valid reward; ``verify/latency_s`` the slowest rank's."""
    valid = scores.valid  # (p, G)
    flags = collections.Counter(f for row in scores.flags for fs in row for f in set(fs))
    n = comm.sum_floats({
        "rollouts": valid.numel(), "valid": int(valid.sum()), "reward": float(scores.rewards[valid].sum()),
        "groups": valid.shape[0], "informative": int(adv.informative_groups.sum()),
        "zero_std": int((~adv.informative_groups & (valid.sum(1) >= 2)).sum()),
        "tokens": int(batch.completion_mask.sum()), "truncated": int(batch.truncated.sum()), "rows_in_loss": n_rows,
        **{f"component_sum/{k}": float(v[valid & ~v.isnan()].sum()) for k, v in scores.components.items()},
        **{f"component_n/{k}": int((valid & ~v.isnan()).sum()) for k, v in scores.components.items()},
        **{f"flag/{k}": c for k, c in flags.items()}, **{f"dropped/{k}": 1 for k in scores.dropped}})
    rec = {
        "reward/mean": n["reward"] / n["valid"] if n["valid"] else float("nan"),
        "reward/std": float(batch_std(scores.rewards[valid], comm.sum)),
        "verify/unusable_frac": 1.0 - n["valid"] / n["rollouts"],
        "verify/latency_s": comm.max_float(scores.latency_s),  # submit -> scores ready (the slowest chunk)
        "group/zero_std_frac": n["zero_std"] / n["groups"],
        "group/informative_frac": n["informative"] / n["groups"],
        "rollout/len_mean": n["tokens"] / n["rollouts"],
        "rollout/truncated_frac": n["truncated"] / n["rollouts"],
        "rollout/rows_in_loss": n["rows_in_loss"],
    }
    keys = lambda prefix: sorted(k.removeprefix(prefix) for k in n if k.startswith(prefix))  # noqa: E731
    rec |= {f"reward/{k}": n[f"component_sum/{k}"] / n[f"component_n/{k}"] for k in keys("component_n/")
            if n[f"component_n/{k}"]}
    # flags the verifiers set (``verifier/flag``: a candidate-caused limit scored 0, a hack attempt, ...)
    rec |= {f"verify/flag/{k}": n[f"flag/{k}"] / n["rollouts"] for k in keys("flag/")}
    rec |= {f"verify/dropped/{k}": 1.0 for k in keys("dropped/")}
    return rec


def run(cfg: TrainConfig, early: spawn_workers.Workers | None = None) -> list[dict]:
    """Start local verifier services when needed, then train. TLS files are read first (before the model loads).
    Under ``torchrun`` with the asynchronous pipeline and one learner, ranks 1.. are its rollout workers (with
    DDP/FSDP2 every rank is a learner that spawns its own)."""
    if rank := mode.rollout_worker_rank(cfg):
        from cohort.trainer import rollout_worker

        rollout_worker.run(cfg, rank, int(os.environ["WORLD_SIZE"]), "env://")
        return []
    try:
        client_tls(cfg.scoring)
        with (Interrupts() as interrupts, verifier_endpoints(cfg) as endpoints,
              tool_rollouts.local_servers(cfg) as cfg):
            return train(cfg, endpoints, early, interrupts)
    finally:
        if early:  # the pipeline reaps them too; a run that failed before it started has them reaped here
            early.reap()
