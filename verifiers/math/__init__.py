"""The ``math`` verifier (see :mod:`verifiers.math.verifier`)."""

from cohort.verifiers.math.verifier import MathOptions, MathVerifier

__all__ = ["MathOptions", "MathVerifier"]
