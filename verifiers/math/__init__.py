"""The ``math`` verifier (see :mod:`verifiers.math.verifier`)."""

from cohort.verifiers.math.verifier import MathVerifier

__all__ = ["MathVerifier"]
