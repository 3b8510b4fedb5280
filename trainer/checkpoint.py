"""Checkpoints with exact resume: weights, optimizer, scheduler, sampler RNG, global RNGs, data position.

Layout: ``<output_dir>/checkpoints/step_<N>/state.pt`` (one file, written to a temp name then
renamed, so a crash never leaves a half checkpoint that looks complete). The policy at the end is
also saved in transformers format in ``<output_dir>/final`` (loadable with ``from_pretrained``).
The frozen reference model is not saved: it is rebuilt from the config (the same source as step 0).
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

CKPT_RE = re.compile(r"step_(\d+)$")


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])


def save(output_dir: str | Path, step: int, state: dict[str, Any]) -> Path:
    folder = Path(output_dir) / "checkpoints" / f"step_{step:06d}"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "state.pt.tmp"
    torch.save({**state, "step": step, "rng": rng_state()}, tmp)
    os.replace(tmp, folder / "state.pt")
    return folder


def latest(output_dir: str | Path) -> Path | None:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), d) for d in root.iterdir() if (m := CKPT_RE.search(d.name)) and (d / "state.pt").exists()]
    return max(found)[1] / "state.pt" if found else None


def load(path: str | Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)
