"""Checkpoints with exact resume, one format for every world size (``torch.distributed.checkpoint``).

Layout: ``<output_dir>/checkpoints/step_<N>/`` with

- ``dcp/``: model and optimizer state as DCP shards (each rank writes its own; one process writes
  one). The metadata records the global shapes, so any world size, a single process with no
  process group included, loads the same files: DCP reshards on load;
- ``meta.pt`` (rank 0): step, scheduler, data position, the world size that wrote it;
- ``rank_<r>.pt`` (every rank): the rank's RNG states (python, numpy, torch) and its rollout
  engine's sampler state;
- ``COMPLETE``: written last, after a barrier, so an interrupted save never looks like a checkpoint.

Exact resume (bit-identical weights and metrics) holds at the same world size. Loaded into another
world size, weights, optimizer, scheduler and data position are exact; the ranks keep the RNGs
they were seeded with (rollouts then differ from the uninterrupted run's).

One format, so no world size can miss another's checkpoint: a step folder in the older
single-process layout (``state.pt``, no ``COMPLETE``) is refused with a one-line error rather than
skipped, since skipping it would restart the run from step 0 over its metrics. The frozen reference
model is not saved: it is rebuilt from the config (the same source as step 0). The policy at the end
is saved apart, in transformers format, in ``<output_dir>/final``.

The loop's calls are :class:`Saver` (when to save: every ``run.save_every`` steps, every
``run.save_every_s`` seconds, the end, an interrupt) over :func:`save_run`, and :func:`resume`;
:func:`save` and :func:`load` are the model/optimizer layer under them. Every function here is
collective (all ranks call it).
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

TRAINED = StateDictOptions(ignore_frozen_params=True)
"""What a checkpoint holds of the model: the trained parameters (all of them, or a LoRA policy's adapters; the
frozen base is rebuilt from the config, as the reference is)."""

from cohort.trainer.distributed import SINGLE, Comm

STEP_RE = re.compile(r"step_(\d+)$")
FRESH = "run.resume=false starts afresh (deleting the old checkpoints), or choose another run.output_dir"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])


@contextlib.contextmanager
def _quiet_single_process() -> Iterator[None]:
    """DCP warns on every call without a process group that it assumes one process: that is the point."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _step_folders(output_dir: str | Path) -> list[tuple[int, Path]]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), d) for d in root.iterdir() if (m := STEP_RE.search(d.name)) and d.is_dir())


def _free(folder: Path) -> str:
    """Free space on the nearest existing folder above ``folder`` (a failed write is often a full disk)."""
    for above in (folder, *folder.parents):
        if above.is_dir():
            return f"{shutil.disk_usage(above).free / 1e9:.1f} GB free there"
    return "free space unknown"


def _last_line(exc: BaseException) -> str:
    """The cause in one line: dcp's CheckpointException carries each rank's whole traceback as text."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def save(output_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         shared: dict[str, Any], per_rank: dict[str, Any], comm: Comm = SINGLE, keep: int = 0) -> Path:
    """Write step ``step``'s folder. ``shared`` is identical on all ranks (rank 0 writes it). A folder
    already there (an interrupted save) is removed first, so no stale file mixes into the new one.
    ``keep`` > 0: once this one is complete, only the newest ``keep`` complete folders are kept."""
    folder = Path(output_dir) / "checkpoints" / f"step_{step:06d}"
    if comm.is_main and folder.exists():
        shutil.rmtree(folder)
    comm.barrier()
    model_state, optim_state = get_state_dict(model, optimizer, options=TRAINED)  # outside the try: not a write
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _quiet_single_process():
            # no_dist: a single learner is alone (its rollout workers, torchrun's ranks 1.. too, take no part)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder / "dcp",
                     no_dist=not comm.distributed)
        if comm.is_main:
            torch.save({**shared, "step": step, "world_size": comm.world_size}, folder / "meta.pt")
        torch.save({**per_rank, "rng": rng_state()}, folder / f"rank_{comm.rank}.pt")
    except (OSError, RuntimeError, CheckpointException) as exc:  # a full disk, a file where a folder goes
        raise RuntimeError(f"could not write the checkpoint {folder} ({_free(folder)}): {_last_line(exc)}") from None
    comm.barrier()
    if comm.is_main:
        (folder / "COMPLETE").touch()
        if keep:
            complete = [d for _, d in _step_folders(output_dir) if (d / "COMPLETE").exists()]
            for old in complete[:-keep]:
                shutil.rmtree(old)
    comm.barrier()
    return folder


def latest(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint folder in ``output_dir``, or None. A folder in the old single-file
    layout raises ``ValueError`` (see the module docstring)."""
    folders = _step_folders(output_dir)
    for _, d in folders:
        if (d / "state.pt").exists() and not (d / "COMPLETE").exists():
            raise ValueError(f"{d} is a checkpoint in the old single-file layout (state.pt), which this "
                             f"version cannot resume: {FRESH}")
    complete = [d for _, d in folders if (d / "COMPLETE").exists()]
    return complete[-1] if complete else None


def load(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         comm: Comm = SINGLE) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Load weights and optimizer state in place (resharded to this job's layout); restore this rank's
    RNG when the checkpoint was written at this world size. Returns (shared, per_rank or None)."""
    folder = Path(folder)
    if not (folder / "COMPLETE").exists():
        raise ValueError(f"{folder} is not a complete checkpoint (no COMPLETE marker)")
    model_state, optim_state = get_state_dict(model, optimizer, options=TRAINED)  # the target layout (initialises Adam)
    state = {"model": model_state, "optim": optim_state}
    with _quiet_single_process():
        dcp.load(state, checkpoint_id=folder / "dcp", no_dist=not comm.distributed)
    # dcp.load found every trained key (it fails on one the checkpoint lacks); the frozen ones are not in it
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=StateDictOptions(ignore_frozen_params=True, strict=False))
    shared = torch.load(folder / "meta.pt", map_location="cpu", weights_only=False)
    rank_file = folder / f"rank_{comm.rank}.pt"
    per_rank = None
    if shared["world_size"] == comm.world_size and rank_file.exists():
        per_rank = torch.load(rank_file, map_location="cpu", weights_only=False)
        set_rng_state(per_rank["rng"])
    return shared, per_rank


def save_run(output_dir: str | Path, step: int, policy: torch.nn.Module, learner: Any, engine: Any, sampler: Any,
             comm: Comm = SINGLE, keep: int = 0) -> Path:
    """The training loop's checkpoint: policy, optimizer, scheduler, data position, RNGs, sampler state."""
    engine_state = engine.state_dict()  # first: the pipeline's learners draw to one sampler position here
    return save(output_dir, step, policy, learner.optimizer,
                {"scheduler": learner.scheduler.state_dict(), "sampler_position": sampler.position},
                {"engine": engine_state}, comm, keep)


class Saver:
    """The training loop's checkpoints: :meth:`due` every ``run.save_every`` steps and once ``run.save_every_s``
    seconds have passed since the last save (or the start), :meth:`save` also when the loop asks (the last
    step, an interrupt). Collective: the ranks agree on a time-based save (any rank's clock that is due)."""

    def __init__(self, run: Any, comm: Comm = SINGLE) -> None:
        self.run, self.comm = run, comm
        self.since = time.monotonic()
        self.last: Path | None = None  # the newest folder this run saved

    def due(self, step: int) -> bool:
        every, every_s = self.run.save_every, self.run.save_every_s
        if every and step % every == 0:
            return True
        return bool(every_s) and bool(self.comm.max_int(int(time.monotonic() - self.since >= every_s)))

    def save(self, step: int, policy: torch.nn.Module, learner: Any, engine: Any, sampler: Any) -> Path:
        self.last = save_run(self.run.output_dir, step, policy, learner, engine, sampler, self.comm,
                             self.run.keep_checkpoints)
        self.since = time.monotonic()
        return self.last


def resume(run: Any, policy: torch.nn.Module, learner: Any, engine: Any, sampler: Any, comm: Comm = SINGLE) -> int:
    """Restore the newest complete checkpoint in ``run.output_dir`` (``run``: the config's ``RunSection``)
    and return its step; 0 when there is none, or with ``run.resume=false``, which deletes the old
    checkpoints so that a later resume cannot pick one of them up."""
    out_dir = Path(run.output_dir)
    if not run.resume:
        old = out_dir / "checkpoints"
        if old.is_dir():
            comm.barrier()
            if comm.is_main:
                shutil.rmtree(old)
            comm.barrier()
            comm.say(f"run.resume=false: starting {out_dir} afresh (its old checkpoints are deleted)")
        return 0
    folder = latest(out_dir)
    if folder is None:
        if interrupted := [d.name for _, d in _step_folders(out_dir)]:
            comm.say(f"no complete checkpoint in {out_dir / 'checkpoints'} (interrupted saves: "
                     f"{', '.join(interrupted)}): starting from step 0")
        return 0
    shared, per_rank = load(folder, policy, learner.optimizer, comm)
    learner.scheduler.load_state_dict(shared["scheduler"])
    sampler.position = shared["sampler_position"]
    # another world size: this rank's sampler keeps its seed; loading its own state back still makes an
    # engine that holds a copy of the weights (vLLM) reload them from the policy just restored
    engine.load_state_dict(per_rank["engine"] if per_rank is not None else engine.state_dict())
    return int(shared["step"])
