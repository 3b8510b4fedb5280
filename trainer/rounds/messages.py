"""What the learner and a rollout worker send each other (``trainer.wire`` carries them): the one module both
sides import, so that a rollout worker never imports the learner's side nor the learner the worker's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cohort.trainer.rollout import RolloutBatch

STOP = "stop"
"""Learner -> worker: finish the generation in hand, say :data:`BYE`, leave."""
BYE = "bye"
"""Worker -> learner: the worker's last message."""


@dataclass(frozen=True)
class Order:
    """Learner -> worker: G completions for each of these prompts."""

    id: int
    idx: list[int]  # example indices (the learner's)
    prompts: list[list[int]]  # their token ids
    min_version: int  # generate with weights at least this new


@dataclass(frozen=True)
class Generated:
    """Worker -> learner: an order's rows."""

    order: int
    worker: int
    version: int  # the weight version that sampled these rows
    batch: RolloutBatch  # rollout_logprobs: the behaviour policy's log-probs
    generate_s: float
    idle_s: float  # waiting for an order or for weights, since the previous message
    ref_logprobs: torch.Tensor | None = None  # (B, T) the frozen reference's, when this worker computes them
    reference_s: float = 0.0
