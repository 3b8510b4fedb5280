"""Distributed checkpoints (``torch.distributed.checkpoint``): exact resume, any world size, one process.

Layout: ``<output_dir>/checkpoints/step_<N>/`` with

- ``dcp/``: model and optimizer state as DCP shards (each rank writes its own shard; the metadata
  records the global shapes, so a different world size, or a single process with no process group,
  loads the same files: DCP reshards on load);
- ``meta.pt`` (rank 0): step, scheduler, data position, the world size that wrote it;
- ``rank_<r>.pt`` (every rank): the rank's RNG states and its rollout engine's sampler state;
- ``COMPLETE``: written last, after a barrier, so an interrupted save never looks like a checkpoint.

Exact resume (bit-identical weights and metrics) holds at the same world size. Loaded into another
world size, weights, optimizer, scheduler and data position are exact; a rank without a saved
RNG file keeps the RNG it was seeded with (rollouts then differ from the uninterrupted run's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from cohort.trainer.checkpoint import rng_state, set_rng_state
from cohort.trainer.distributed import SINGLE, Comm

STEP_RE = re.compile(r"step_(\d+)$")


def save(output_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         shared: dict[str, Any], per_rank: dict[str, Any], comm: Comm = SINGLE) -> Path:
    """Collective: every rank calls it. ``shared`` is identical on all ranks (rank 0 writes it)."""
    folder = Path(output_dir) / "checkpoints" / f"step_{step:06d}"
    folder.mkdir(parents=True, exist_ok=True)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder / "dcp")
    if comm.is_main:
        torch.save({**shared, "step": step, "world_size": comm.world_size}, folder / "meta.pt")
    torch.save({**per_rank, "rng": rng_state()}, folder / f"rank_{comm.rank}.pt")
    comm.barrier()
    if comm.is_main:
        (folder / "COMPLETE").touch()
    comm.barrier()
    return folder


def latest(output_dir: str | Path) -> Path | None:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), d) for d in root.iterdir() if (m := STEP_RE.search(d.name)) and (d / "COMPLETE").exists()]
    return max(found)[1] if found else None


def is_distributed_checkpoint(folder: str | Path) -> bool:
    return (Path(folder) / "dcp").is_dir()


def load(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         comm: Comm = SINGLE) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Load weights and optimizer state in place (resharded to this job's layout); restore this rank's
    RNG when the checkpoint has its file. Returns (shared, per_rank or None). Collective."""
    folder = Path(folder)
    if not (folder / "COMPLETE").exists():
        raise ValueError(f"{folder} is not a complete distributed checkpoint (no COMPLETE marker)")
    model_state, optim_state = get_state_dict(model, optimizer)  # the target layout (initialises Adam state)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder / "dcp")
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    shared = torch.load(folder / "meta.pt", map_location="cpu", weights_only=False)
    rank_file = folder / f"rank_{comm.rank}.pt"
    per_rank = None
    if shared["world_size"] == comm.world_size and rank_file.exists():
        per_rank = torch.load(rank_file, map_location="cpu", weights_only=False)
        set_rng_state(per_rank["rng"])
    return shared, per_rank


def save_run(output_dir: str | Path, step: int, policy: torch.nn.Module, learner: Any, engine: Any, sampler: Any,
             comm: Comm) -> Path:
    """The training loop's checkpoint (what ``trainer.checkpoint`` saves in one process)."""
    return save(output_dir, step, policy, learner.optimizer,
                {"scheduler": learner.scheduler.state_dict(), "sampler_position": sampler.position},
                {"engine": engine.state_dict()}, comm)


def resume(output_dir: str | Path, policy: torch.nn.Module, learner: Any, engine: Any, sampler: Any,
           comm: Comm) -> int:
    """Restore the newest complete checkpoint in ``output_dir``; returns its step (0 when there is none)."""
    folder = latest(output_dir)
    if folder is None:
        return 0
    shared, per_rank = load(folder, policy, learner.optimizer, comm)
    learner.scheduler.load_state_dict(shared["scheduler"])
    sampler.position = shared["sampler_position"]
    if per_rank is not None:
        engine.load_state_dict(per_rank["engine"])
    return int(shared["step"])
