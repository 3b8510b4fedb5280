"""Data parallelism on torch.distributed: ``torchrun`` + DDP or FSDP2, with exact global statistics.

One :class:`Comm` per process carries everything the loop and the learner need to know about the
other ranks; :data:`SINGLE` (one process, no launcher) makes every collective the identity, so the
single-process path runs the same code with no process group. Decisions, declared:

1. **One row space per rank.** Every rank draws the same P prompts (same sampler, same seed) and
   generates the G completions of its P/world of them (``shard``), so verifier calls scale with the
   ranks and a group never spans two ranks. Each rank scores, computes advantages and builds its
   update batch on its own rows only; no rollout, text or reward crosses to another rank. What needs
   the whole round is a reduction of sums and counts (:meth:`Comm.sum` for tensors,
   :meth:`Comm.sum_floats` for named totals): the std of ``scale_rewards: batch``, the round's
   metrics, the masked-share alarm and the fully-masked-round skip, so every rank takes the same
   decisions.
2. **Gradients are summed, never averaged.** Each rank's loss is its share of the *global* loss: the
   normaliser (rows or tokens) is summed over ranks before the micro-batches run
   (``trainer.loss.normaliser(..., reduce=comm.sum)``), so the per-rank token mean (the
   common bug) never happens. DDP gets a SUM comm hook; FSDP2 a gradient divide factor of 1 (and,
   on gloo, which has no AVG/PREMUL_SUM reduce-scatter, ``set_force_sum_reduction_for_comms``).
3. **Every rank runs the same number of micro-batches** (the max over ranks); the short ranks pad
   with zero-loss rows (``loss_mask`` all False: weight 0, gradient exactly 0), so the collectives
   in each backward (and in each FSDP2 forward) line up.
4. **Metrics are global**: the learner and the round's metrics sum their totals (sums, counts) over
   the ranks before dividing; maxima take the max over ranks (``verify/latency_s``).
5. **Generation while sharded** gathers the FSDP2 parameters once per generation call (``unshard``)
   and samples locally with no per-token collectives, then reshards: ranks finish their own rows
   independently (no synced decode loop waiting on the slowest rank). It needs the full weights to
   fit on one device for the duration of sampling; for models that do not, see docs/training.md ("Multi-GPU and multi-node").
6. ``bnpo`` (per-micro-batch normalisation) is refused with ``parallel != none``: its normaliser is
   not defined across ranks. The frozen reference model (beta > 0) is replicated, not sharded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

Parallel = Literal["none", "ddp", "fsdp2"]


class Comm:
    """One process, no launcher: every collective is the identity (the default, unchanged path)."""

    rank: int = 0
    world_size: int = 1
    parallel: Parallel = "none"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or self.parallel != "none"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order (picklable objects: small CPU tensors, dataclasses)."""
        return [obj]

    def sum(self, x: Tensor) -> Tensor:
        return x

    def max(self, x: Tensor) -> Tensor:
        return x

    def sum_int(self, n: int) -> int:
        return int(self.sum(torch.tensor([n], dtype=torch.int64)))

    def max_int(self, n: int) -> int:
        return int(self.max(torch.tensor([n], dtype=torch.int64)))

    def max_float(self, x: float) -> float:
        return float(self.max(torch.tensor([x], dtype=torch.float64)))

    def sum_floats(self, values: dict[str, float]) -> dict[str, float]:
        """Sum a dict of floats over ranks (one collective). Keys may differ between ranks (a flag or a
        status only some ranks saw): the result has every rank's keys, a key absent on a rank counting 0
        there, in the same order on every rank. Summed in rank order, so every rank gets the same bits."""
        out: dict[str, float] = {}
        for part in self.all_gather(values):
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out

    def shard(self, items: list) -> list:
        """This rank's contiguous share of ``items`` (len(items) must divide by the world size)."""
        n = len(items) // self.world_size
        return items[self.rank * n : (self.rank + 1) * n]

    def grad_sync(self, model: torch.nn.Module, enabled: bool) -> None:
        """Whether the next backward reduces gradients (off for all but a step's last micro-batch)."""
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model.require_backward_grad_sync = enabled
        elif self.parallel == "fsdp2":
            model.set_requires_gradient_sync(enabled)

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass

    def say(self, message: str) -> None:
        """A one-off line for the person running the job (rank 0 prints it)."""
        if self.is_main:
            print(message, flush=True)


SINGLE = Comm()


class TorchComm(Comm):
    """A process of a ``torchrun`` job: collectives over the default process group."""

    def __init__(self, parallel: Parallel):
        self.rank, self.world_size, self.parallel = dist.get_rank(), dist.get_world_size(), parallel

    def all_gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def sum(self, x: Tensor) -> Tensor:
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    def max(self, x: Tensor) -> Tensor:
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def launched() -> bool:
    """True inside a ``torchrun`` worker (its environment names a rank and a world)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def local_device(name: str) -> torch.device:
    """``model.device`` as a device: ``auto`` and ``cuda`` mean this process's GPU (``$LOCAL_RANK`` under
    torchrun, else 0), made the current one (NCCL's collectives use it). ``auto`` takes it only when every
    process torchrun started on this machine has one (``$LOCAL_WORLD_SIZE`` GPUs at least), else the CPU for
    all of them: DDP and FSDP2 need one kind of device on every rank, and NCCL one GPU per rank."""
    if name == "cpu" or (name == "auto" and torch.cuda.device_count() < int(os.environ.get("LOCAL_WORLD_SIZE", 1))):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"model.device={name} but torch sees no GPU (torch {torch.__version__}, CUDA "
                         f"{torch.version.cuda or 'not built in'}); use model.device=cpu or auto")
    gpu = torch.device(name if ":" in name else f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
    if gpu.index >= torch.cuda.device_count():
        raise ValueError(f"model.device={name} names GPU {gpu.index} but torch sees {torch.cuda.device_count()}")
    torch.cuda.set_device(gpu)
    return gpu


def setup(parallel: Parallel, backend: str = "auto") -> Comm:
    """Join the ``torchrun`` job (env:// rendezvous) for ``parallel`` ddp/fsdp2; :data:`SINGLE` for none."""
    if parallel == "none":
        if launched() and int(os.environ["WORLD_SIZE"]) > 1:
            raise ValueError("launched by torchrun with several processes but distributed.parallel is none; "
                             "set distributed.parallel=ddp or fsdp2")
        return SINGLE
    if not launched():
        raise ValueError(f"distributed.parallel={parallel} needs a launcher: "
                         "torchrun --nproc_per_node N -m cohort.cli train ... (see docs/training.md)")
    if backend == "auto":
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return TorchComm(parallel)


def init(cfg: Any) -> Comm:
    """The ``Comm`` for a ``TrainConfig``: join the job, and fail fast on a round that cannot be split."""
    comm = setup(cfg.distributed.parallel, cfg.distributed.backend)
    if cfg.grpo.prompts_per_step % comm.world_size:
        comm.close()
        raise ValueError(f"grpo.prompts_per_step={cfg.grpo.prompts_per_step} must be divisible by the world size "
                         f"{comm.world_size} (each rank generates whole groups)")
    return comm


def rank_dir(output_dir: str | Path, comm: Comm) -> Path:
    """Rank 0 writes the run's files in ``output_dir``; rank r > 0 its own copy in ``output_dir/rank_<r>``."""
    return Path(output_dir) if comm.is_main else Path(output_dir) / f"rank_{comm.rank}"


# --- the model: wrap, unwrap, gather --------------------------------------------------------------


def _sum_allreduce_hook(group, bucket):  # no annotations: DDP checks them, and they are strings here
    """DDP comm hook: SUM the bucket over ranks (DDP's default divides by the world size)."""
    fut = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def fsdp_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def wrap(model: torch.nn.Module, comm: Comm, precision: Any = None) -> torch.nn.Module:
    """DDP or FSDP2 around ``model`` (identical weights on every rank); the model itself for none.

    FSDP2 shards each transformer block (``model._no_split_modules``, e.g. LlamaDecoderLayer) and
    then the root (embeddings, final norm, head). Build the optimizer *after* this call. Mixed precision
    (``trainer.precision``, float32 masters): FSDP2 all-gathers bf16 copies of the shards and reduce-scatters
    gradients in float32 (``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``); DDP's
    parameters, and so its gradients and their all-reduce, are the float32 masters (autocast casts per op).
    """
    if comm.parallel == "none":
        return model
    if comm.parallel == "ddp":
        ddp = torch.nn.parallel.DistributedDataParallel(model, forward_sync_buffers=False)  # no collective per forward
        ddp.register_comm_hook(None, _sum_allreduce_hook)
        return ddp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = next(model.parameters()).device.type
    mesh = init_device_mesh(device, (comm.world_size,))
    mixed = precision is not None and precision.mixed
    mp = MixedPrecisionPolicy(param_dtype=precision.compute, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    for module in list(model.modules()):
        if module is not model and type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    sum_only = dist.get_backend() == "gloo"
    for module in fsdp_modules(model):
        module.set_gradient_divide_factor(1.0)  # gradients are summed: the loss is already a global share
        if sum_only:
            module.set_force_sum_reduction_for_comms(True)  # gloo: no AVG / PREMUL_SUM reduce-scatter
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers module (DDP's ``.module``; FSDP2 shards in place, so the module itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def full_state_dict(model: torch.nn.Module, comm: Comm) -> dict[str, Tensor]:
    """The full, unsharded weights on rank 0 (CPU); an empty dict on the other ranks. Collective."""
    if comm.parallel == "none":
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_pretrained(model: torch.nn.Module, tokenizer: Any, folder: str | Path, comm: Comm) -> None:
    """transformers format from rank 0 (the full state dict gathered from the shards). Collective. A LoRA policy
    (peft) is saved merged, as a plain model any engine loads: its adapters are folded into the base in place, so
    call this last."""
    if not comm.distributed:
        if hasattr(model, "peft_config"):
            model = model.merge_and_unload()
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return
    state = full_state_dict(model, comm)
    if comm.is_main:
        unwrap(model).save_pretrained(folder, state_dict=state)
        tokenizer.save_pretrained(folder)
    comm.barrier()


@contextlib.contextmanager
def gathered(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Unshard every FSDP2 block for a while (one all-gather each), reshard after. Collective on entry.

    Inside, the module's parameters are the full tensors and forward calls issue no collectives,
    so each rank can sample its own rows at its own pace. A no-op for DDP and single process.
    """
    modules = fsdp_modules(unwrap(model))
    for m in modules:
        m.set_reshard_after_forward(False)  # forward inside must not reshard (it would all-gather again)
        m.unshard()
    try:
        yield model
    finally:
        for m in modules:
            m.reshard()
            m.set_reshard_after_forward(True)


class GatheredEngine:
    """A rollout engine whose ``generate`` runs inside :func:`gathered` (for FSDP2 policies)."""

    def __init__(self, engine: Any, policy: torch.nn.Module):
        self.engine, self.policy = engine, policy

    def generate(self, prompts: list[list[int]], num_generations: int, max_new_tokens: int | None = None):
        with gathered(self.policy):
            return self.engine.generate(prompts, num_generations, max_new_tokens)

    def sync_weights(self, policy: torch.nn.Module) -> None:
        self.engine.sync_weights(policy)

    def state_dict(self) -> dict[str, Any]:
        return self.engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.engine.load_state_dict(state)

    def close(self) -> None:
        self.engine.close()


def for_generation(engine: Any, policy: torch.nn.Module, comm: Comm) -> Any:
    """The engine itself, or (FSDP2) the engine wrapped so that sampling sees full weights."""
    return GatheredEngine(engine, policy) if comm.parallel == "fsdp2" else engine


# --- the batch ------------------------------------------------------------------------------------


def pad_rows(batch: Any, rows: int) -> Any:
    """Append zero-loss rows (``loss_mask`` False) until ``batch`` has ``rows`` rows.

    ``batch`` is a ``trainer.learner.UpdateBatch``. Pad rows copy row 0 (or, for an empty batch,
    an all-attending row of token 0) so their forward is finite; their loss weight is exactly 0.
    """
    n = batch.input_ids.shape[0]
    if n >= rows:
        return batch
    extra = rows - n

    def pad(x: Tensor | None, fill: float = 0) -> Tensor | None:
        if x is None:
            return None
        if n:
            block = x[:1].expand(extra, *x.shape[1:])
        else:
            block = torch.full((extra, *x.shape[1:]), fill, dtype=x.dtype, device=x.device)
        return torch.cat([x, block])

    return dataclasses.replace(
        batch,
        input_ids=pad(batch.input_ids),
        attention_mask=pad(batch.attention_mask, 1),
        loss_mask=torch.cat([batch.loss_mask, batch.loss_mask.new_zeros(extra, batch.loss_mask.shape[1])]),
        advantages=pad(batch.advantages),
        old_logprobs=pad(batch.old_logprobs),
        ref_logprobs=pad(batch.ref_logprobs),
        is_weights=pad(batch.is_weights),
        behaviour_logprobs=pad(batch.behaviour_logprobs),
    )
