"""No completion makes a verifier's extraction raise (issue 49): deep nesting (1,000 brackets, braces,
``\\boxed{`` and ``\\frac{``), huge literals, NUL bytes and floods of delimiters, through the verifier host as
the server runs it. A raise would come back VERIFIER_ERROR (masked: the policy would escape its gradient);
every rollout must be OK, and none of these earns a reward."""

from __future__ import annotations

import time

import pytest

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, VerifyContext
from cohort.verifiers.hosting.host import ServerLimits, VerifierHost

HOSTILE = [
    "\\boxed{" * 1000 + "2" + "}" * 1000, "(" * 1000 + "2" + ")" * 1000 + " = 1", "[" * 1000, "{" * 5000,
    "<answer>" + "(" * 1000 + "</answer>", "\\frac{" * 800 + "1", "1" * 5000 + " = 1", "\\boxed{" + "\\frac{" * 500 + "}" * 500 + "}",
    "<think>" * 1000, "\x00", "$" * 10000, "\\sqrt{" * 900 + "2" + "}" * 900, "#### " + "-" * 1000 + "1",
    '<tool_call>' + '{"a":' * 1000 + '</tool_call>', "<answer>" * 500 + "</answer>" * 500,
]


@pytest.fixture(scope="module")
def verifiers():
    from cohort.verifiers.arith import ArithVerifier
    from cohort.verifiers.format import FormatVerifier
    from cohort.verifiers.math import MathVerifier
    from cohort.verifiers.steps import StepsVerifier

    found = {"format": FormatVerifier(), "arith": ArithVerifier(), "steps": StepsVerifier(),
             "math": MathVerifier(workers=1, cache_size=0)}
    host = VerifierHost(found, ServerLimits())
    yield host
    host.close()


@pytest.mark.parametrize("name", ["format", "arith", "steps", "math"])
def test_hostile_completions_are_scored_never_raised(verifiers, name):
    reference = Reference() if name == "format" else Reference(answer="7")
    group = GroupRequest(name, tuple(Rollout(i, c) for i, c in enumerate(HOSTILE)), reference, "g")
    [result] = verifiers.score_now([group], VerifyContext(time.monotonic() + 120))
    for text, r in zip(HOSTILE, result.results):
        assert r.status is RolloutStatus.OK, (name, text[:30], r.detail[:200])
        if name != "format":
            assert r.reward < 1.0, (name, text[:30], r)
