"""The conformance kit: what any verifier server, in any language, must pass before a trainer uses it.

Over the wire only, against ``grpo.verifier.v1``. The rules live in :mod:`cohort.conformance.checks`
(one function each, in the ``RULES`` registry); the known-answer cases file format is described in
:mod:`cohort.conformance.cases`. From the command line::

    cohort conformance 127.0.0.1:50051 --verifier format --cases tests/conformance/cases/format.jsonl \\
        --server-cmd "cohort serve format --port {port}"

From Python (e.g. a plugin's own test)::

    results = run_kit("127.0.0.1:50051", "format", load_cases(path, "format"))
    assert all(r.status != "fail" for r in results)
"""

from cohort.conformance.cases import Case, CasesError, load_cases
from cohort.conformance.checks import RULES
from cohort.conformance.runner import CheckResult, ServerStartError, run_kit
from cohort.conformance.target import EndpointUnreachable, KitOptions, VerifierNotServed

__all__ = [
    "RULES",
    "Case",
    "CasesError",
    "CheckResult",
    "EndpointUnreachable",
    "KitOptions",
    "ServerStartError",
    "VerifierNotServed",
    "load_cases",
    "run_kit",
]
