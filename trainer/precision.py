"""What ``model.dtype`` means: the dtype of the master weights and optimizer state, the dtype of the maths in
the forward and backward passes, and the copy that rollout engines and weight pushes get.

- ``float32``: everything in float32.
- ``bfloat16``: what every peer means by bf16 (TRL's ``bf16=True``, verl's FSDP ``MixedPrecision``): the
  parameters, their gradients and AdamW's state stay float32 (the *master* weights), the forward and backward
  matmuls run in bfloat16 under ``torch.autocast``; the frozen reference, the rollout engines' copies and the
  weights pushed to them are bfloat16. Checkpoints and ``final/`` hold the float32 masters.
- ``bfloat16-pure``: the parameters themselves are bfloat16 and AdamW steps them directly. A weight of scale
  0.02 moves only when the step exceeds half its bfloat16 spacing (2**-14, 6.1e-5): one step at lr 1e-6
  changes about 2 % of such a matrix, and the rest of the update rounds away. Kept for memory experiments,
  under a name that says so; ``cohort train`` prints the share :func:`moved_share` estimates at the start.
- ``auto`` (the default): ``bfloat16`` on a GPU, ``float32`` on the CPU.

Autocast against a separate bf16 compute copy of the weights: both give the same update (float32 masters,
bf16 matmuls) and hold the same bf16 copy during a forward (autocast caches each weight's cast until the
backward is done). Autocast was kept because it needs no second set of parameters to keep in step after every
optimizer step, nor a second path for the optimizer, and it is what accelerate (TRL's ``bf16=True``) does; under
FSDP2 the ``MixedPrecisionPolicy`` all-gathers the bf16 copy itself (``distributed.wrap``). The compute-copy
variant was not built or measured; autocast's memory is measured in ``bench/learner_memory.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch

DTYPES = ("auto", "float32", "bfloat16", "bfloat16-pure")


@dataclass(frozen=True)
class Precision:
    name: str
    """``float32``, ``bfloat16`` (float32 masters, bf16 compute) or ``bfloat16-pure``."""
    master: torch.dtype
    """The parameters', gradients' and optimizer state's dtype (what checkpoints hold)."""
    compute: torch.dtype
    """The matmuls' dtype in the learner's forward and backward passes, and the rollout engines' weights."""
    device_type: str

    @property
    def mixed(self) -> bool:
        return self.master != self.compute

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the learner's forwards run in: autocast to ``compute`` when it differs from the masters."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute)


FLOAT32 = Precision("float32", torch.float32, torch.float32, "cpu")


def resolve(dtype: str, device: torch.device) -> Precision:
    """``model.dtype`` on ``device``."""
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" else "float32"
    if dtype == "float32":
        return Precision("float32", torch.float32, torch.float32, device.type)
    if dtype == "bfloat16":
        return Precision("bfloat16", torch.float32, torch.bfloat16, device.type)
    if dtype == "bfloat16-pure":
        return Precision("bfloat16-pure", torch.bfloat16, torch.bfloat16, device.type)
    raise ValueError(f"model.dtype={dtype!r}: expected one of {', '.join(DTYPES)}")


@torch.no_grad()
def moved_share(params: Iterable[torch.Tensor], lr: float, sample: int = 1 << 16) -> float:
    """The share of bfloat16 weights that one AdamW step of size ``lr`` changes. AdamW's first step moves every
    weight by about ``lr`` (m / sqrt(v) is +-1 there), and later steps by at most a few ``lr``; a bfloat16 weight
    ``w`` changes only when that exceeds half its spacing, 2**(floor(log2 |w|) - 8). Estimated on up to
    ``sample`` entries of each tensor (evenly spaced), weighted by the tensors' sizes."""
    moved = total = 0.0
    for p in params:
        flat = p.detach().reshape(-1)
        if flat.numel() == 0:
            continue
        step = max(1, flat.numel() // sample)
        w = flat[::step].float().abs()
        half_spacing = torch.exp2(torch.floor(torch.log2(w.clamp_min(1e-38))) - 8)  # bf16: 8 significant bits
        share = float((half_spacing < lr).float().mean())
        moved += share * flat.numel()
        total += flat.numel()
    return moved / max(total, 1.0)


def describe(model: torch.nn.Module, precision: Precision, lr: float) -> list[str]:
    """The start's lines about the policy: its size (and the trained share: LoRA adapters), dtypes and device; for
    ``bfloat16-pure`` the share of the weights one update at ``lr`` moves (:func:`moved_share`)."""
    params = list(model.parameters())
    trained = [p for p in params if p.requires_grad]
    total, n_trained = sum(p.numel() for p in params), sum(p.numel() for p in trained)
    adapters = f", {n_trained:,} trained (LoRA adapters)" if n_trained != total else ""
    dtypes = (f"{_short(precision.master)} masters, {_short(precision.compute)} compute" if precision.mixed
              else _short(precision.master))
    lines = [f"policy: {total:,} parameters{adapters}, model.dtype={precision.name} ({dtypes}) on {params[0].device}"]
    if precision.name == "bfloat16-pure":
        share = moved_share((getattr(p, "_local_tensor", p) for p in trained), lr)
        lines.append(f"model.dtype=bfloat16-pure: one update at lr {lr:g} changes about {share:.1%} of the weights "
                     "(smaller steps round away in bf16); model.dtype=bfloat16 keeps float32 master weights")
    return lines


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
