"""Cohort: GRPO training with rewards from verifier services over gRPC."""

__version__ = "0.1.0"
