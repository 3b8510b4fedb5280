"""The ``code`` verifier (see :mod:`verifiers.code.verifier`)."""

from cohort.verifiers.code.backend import ENDPOINT_ENV, GrpcBackend, LocalBackend, SandboxUnavailable
from cohort.verifiers.code.extract import extract_code
from cohort.verifiers.code.verifier import CodeVerifier

__all__ = ["CodeVerifier", "ENDPOINT_ENV", "GrpcBackend", "LocalBackend", "SandboxUnavailable", "extract_code"]
