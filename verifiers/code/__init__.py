"""The ``code`` verifier (see :mod:`verifiers.code.verifier`)."""

from cohort.verifiers.code.backend import GrpcBackend, LocalBackend, SandboxUnavailable
from cohort.verifiers.code.extract import extract_code
from cohort.verifiers.code.verifier import CodeOptions, CodeVerifier

__all__ = ["CodeOptions", "CodeVerifier", "GrpcBackend", "LocalBackend", "SandboxUnavailable", "extract_code"]
