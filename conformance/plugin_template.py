"""Files of a new verifier plugin package, written by ``cohort new-verifier NAME``.

Each template is a :class:`string.Template` over ``$name`` (the verifier name), ``$module`` (the
import package), ``$dist`` (the distribution name) and ``$cls`` (the verifier class). The generated
package passes the conformance kit as written; its author then changes the scoring.
"""

from __future__ import annotations

from string import Template

PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "A Cohort verifier plugin: $name"
readme = "README.md"
requires-python = ">=3.11"
# cohort-rl brings the verifier interface, the server (`cohort serve`) and the conformance kit.
dependencies = ["cohort-rl"]

[project.optional-dependencies]
test = ["pytest>=8"]

# The one line that makes `cohort serve $name` find this verifier.
[project.entry-points."cohort.verifiers"]
$name = "$module.verifier:$cls"

[tool.setuptools.packages.find]
where = ["src"]
"""

INIT = '''\
"""The `$name` verifier for Cohort."""

from $module.verifier import $cls

__all__ = ["$cls"]
'''

VERIFIER = '''\
"""The `$name` verifier: exact match of the final answer against ``reference.answer``.

Replace :func:`score` with your own judgement; keep the contract:

- Return one :class:`RolloutResult` per rollout, with the rollout's index, never raise for a bad
  rollout. ``RolloutResult.ok(index, reward, verdict)`` is a real judgement of the policy's output:
  a wrong answer, no answer, or a program of the policy that crashed are OK with reward 0.
- When *you* cannot judge (your gold answer is unusable, your own time budget ran out, a service
  you need is down), return ``RolloutResult.unusable(index, RolloutStatus.INVALID_REFERENCE |
  VERIFIER_TIMEOUT | DEPENDENCY_UNAVAILABLE, detail)``: the trainer masks it instead of
  learning from a fake 0.
- Raise :class:`InvalidRequest` for a request that can never be scored (a bad option): the
  server answers INVALID_ARGUMENT.
- Be pure: the same group gives the same results, in any thread, at any concurrency.
  Hard time limits come from killable worker processes, never ``signal.alarm``.
- Optional process supervision: ``RolloutResult.ok(..., steps=[StepReward(end, reward), ...])``
  rewards steps of the completion, each ending at a character offset (a ``str`` index; increasing,
  within the completion). A trainer with this verifier as ``kind: process`` turns them into
  per-token advantages. :func:`score` shows one step: the last answer block.

>>> v = $cls()
>>> g = GroupRequest("$name", (Rollout(0, "<answer>4</answer>"), Rollout(1, "five")), Reference(answer="4"))
>>> [(r.verdict.name, r.reward) for r in v.verify_group(g, VerifyContext())]
[('CORRECT', 1.0), ('INCORRECT', 0.0)]
"""

from __future__ import annotations

import re

from cohort.verifiers.base import (
    GroupRequest,
    Reference,
    Rollout,
    RolloutResult,
    RolloutStatus,
    StepReward,
    Verdict,
    VerifierBase,
    VerifyContext,
    option,
)

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def final_answer(completion: str) -> str:
    """The last ``<answer>...</answer>`` block, or the whole completion when there is none."""
    blocks = ANSWER_RE.findall(completion)
    return blocks[-1] if blocks else completion


def normalise(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.lower()


def score(rollout: Rollout, gold: str, case_sensitive: bool) -> RolloutResult:
    answer = normalise(final_answer(rollout.completion), case_sensitive)
    if not answer:
        return RolloutResult.ok(rollout.index, 0.0, Verdict.NO_ANSWER, {"match": 0.0}, "no answer")
    match = answer == normalise(gold, case_sensitive)
    # optional step rewards: here one step, ending where the last answer block ends
    blocks = list(ANSWER_RE.finditer(rollout.completion))
    steps = [StepReward(blocks[-1].end(), float(match))] if blocks else []
    return RolloutResult.ok(rollout.index, float(match), None, {"match": float(match)}, f"answer {answer[:60]!r}",
                            steps=steps)


class $cls(VerifierBase):
    name = "$name"
    version = "0.1.0"
    description = "exact match of the final answer (a template: change score())"
    reference_kinds: tuple[str, ...] = ("answer",)

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        case_sensitive = option(group, "case_sensitive", "false", ("true", "false")) == "true"
        gold = group.reference.answer or ""
        if not gold.strip():
            return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, "empty gold answer") for r in group.rollouts]
        return [score(r, gold, case_sensitive) for r in group.rollouts]
'''

CASES = """\
{"name": "basics", "request": {"reference": {"answer": "42"}, "rollouts": [{"index": 0, "completion": "<think>6*7</think><answer>42</answer>"}, {"index": 1, "completion": "<answer>41</answer>"}, {"index": 2, "completion": "<answer> </answer>"}]}, "expect": [{"index": 0, "verdict": "CORRECT", "reward": 1.0, "components": {"match": 1}, "steps": [[37, 1.0]]}, {"index": 1, "verdict": "INCORRECT", "reward": 0.0, "steps": [[19, 0.0]]}, {"index": 2, "verdict": "NO_ANSWER", "reward": 0.0}]}
{"name": "case", "request": {"reference": {"answer": "Paris"}, "options": {"case_sensitive": "true"}, "rollouts": [{"index": 3, "completion": "<answer>paris</answer>"}, {"index": 8, "completion": "<answer>Paris</answer>"}]}, "expect": [{"index": 3, "verdict": "INCORRECT", "reward": 0.0}, {"index": 8, "verdict": "CORRECT", "reward": 1.0}]}
{"name": "bad-gold", "request": {"reference": {"answer": " "}, "rollouts": [{"index": 0, "completion": "<answer>1</answer>"}]}, "expect": [{"index": 0, "status": "INVALID_REFERENCE"}]}
"""

TEST_VERIFIER = '''\
"""In-process tests of the `$name` verifier's logic."""

import pytest

from cohort.verifiers.base import GroupRequest, InvalidRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext

from $module import $cls


def run(*completions: str, gold: str = "4", **options: str):
    group = GroupRequest("$name", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(answer=gold), options=options)
    return $cls().verify_group(group, VerifyContext())


def test_scores_the_final_answer():
    right, wrong, empty = run("<answer>5</answer> no, <answer>4</answer>", "<answer>5</answer>", "<answer></answer>")
    assert (right.verdict, right.reward) == (Verdict.CORRECT, 1.0)
    assert (wrong.verdict, wrong.reward) == (Verdict.INCORRECT, 0.0)
    assert (empty.verdict, empty.reward) == (Verdict.NO_ANSWER, 0.0)


def test_unusable_gold_is_masked_not_zero():
    [r] = run("<answer>4</answer>", gold="  ")
    assert r.status is RolloutStatus.INVALID_REFERENCE and not r.usable


def test_bad_option_is_an_invalid_request():
    with pytest.raises(InvalidRequest):
        run("4", case_sensitive="maybe")
'''

TEST_CONFORMANCE = '''\
"""`cohort serve $name` in a subprocess on a free loopback port must pass the conformance kit."""

import sys
from pathlib import Path

from cohort.conformance import load_cases, run_kit

CASES = Path(__file__).with_name("cases.jsonl")


def test_passes_the_conformance_kit():
    server_cmd = f"{sys.executable} -m cohort.cli serve $name --port {{port}}"
    results = run_kit("127.0.0.1:0", "$name", load_cases(CASES, "$name"), server_cmd=server_cmd)
    not_passed = [(r.rule, r.status, r.detail) for r in results if r.status != "pass"]
    assert not not_passed, not_passed
'''

README = """\
# $dist

A [Cohort](https://github.com/cohort-rl/cohort) verifier plugin: `$name`.

```bash
pip install -e '.[test]'        # registers `$name` under the `cohort.verifiers` entry points
cohort list-verifiers            # `$name` is listed
cohort serve $name --port 50051  # serve it (health, reflection, metrics, graceful SIGTERM)
pytest                           # unit tests + the conformance kit against a real server
cohort conformance 127.0.0.1:0 --verifier $name --cases tests/cases.jsonl \\
    --server-cmd "cohort serve $name --port {port}"
```

Edit `score()` in `src/$module/verifier.py`, add known answers to `tests/cases.jsonl`
(one group per line: a `VerifyGroupRequest` in protobuf JSON plus the expected status, verdict
and reward per rollout), and keep `pytest` green. The contract, in short:

- **status vs verdict**: `OK` + a verdict and reward is a judgement of the policy's output (a wrong
  or missing answer is `OK` with reward 0). Return `INVALID_REFERENCE`, `VERIFIER_TIMEOUT` or
  `DEPENDENCY_UNAVAILABLE` when *the verifier* cannot judge: the trainer masks those rollouts.
- one result per rollout, index echoed; deterministic; safe to call concurrently.
- a request that can never be scored raises `InvalidRequest` (INVALID_ARGUMENT on the wire).

Train with it by naming it in the trainer's verifier config (endpoints and a weight): the learner
does not change.
"""

FILES: dict[str, str] = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "src/$module/__init__.py": INIT,
    "src/$module/verifier.py": VERIFIER,
    "tests/cases.jsonl": CASES,
    "tests/test_verifier.py": TEST_VERIFIER,
    "tests/test_conformance.py": TEST_CONFORMANCE,
}


def render(name: str) -> dict[str, str]:
    """Relative path -> file content for the plugin named ``name`` (a valid verifier name)."""
    module = f"cohort_verifier_{name}"
    values = {
        "name": name,
        "module": module,
        "dist": f"cohort-verifier-{name.replace('_', '-')}",
        "cls": "".join(part.capitalize() for part in name.split("_")) + "Verifier",
    }
    return {Template(path).substitute(values): Template(text).substitute(values) for path, text in FILES.items()}
