"""The ``judge`` verifier: an LLM judge as a reward (see :mod:`verifiers.judge.verifier` and docs/judge.md)."""

from cohort.verifiers.judge.verifier import JudgeVerifier

__all__ = ["JudgeVerifier"]
