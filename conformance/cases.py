"""Known-answer cases for the conformance kit: a JSONL file, one group per line.

Each line is a JSON object::

    {"name": "think-then-answer",
     "request": {"reference": {"answer": "4"}, "options": {"mode": "strict"},
                 "rollouts": [{"index": 0, "completion": "<think>2+2</think><answer>4</answer>"},
                              {"index": 1, "completion": "4"}]},
     "expect": [{"index": 0, "status": "OK", "verdict": "CORRECT", "reward": 1.0},
                {"index": 1, "verdict": "NO_ANSWER", "reward": 0.0, "components": {"answer": 0.0}}]}

- ``request`` is a ``grpo.verifier.v1.VerifyGroupRequest`` in protobuf's JSON mapping
  (snake_case or lowerCamelCase field names). ``verifier`` may be left out: the kit fills in the
  name it was given (a different name is an error). ``group_id`` defaults to ``name``.
- ``expect`` has one entry per rollout, matched by ``index``. ``status`` defaults to ``OK``;
  ``verdict``, ``reward`` (compared within 1e-6) and ``components`` (a subset of the returned
  components, same tolerance) and ``steps`` (``[[end, reward], ...]``, the step rewards exactly, ends
  equal and rewards within the tolerance) are checked when present. Enum names may be short (``CORRECT``)
  or full (``VERDICT_CORRECT``). A non-OK status takes no reward: it is not a judgement.
- Blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

REWARD_TOLERANCE = 1e-6


class CasesError(ValueError):
    """The cases file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class Expectation:
    index: int
    status: str  # full enum name, e.g. ROLLOUT_STATUS_OK
    verdict: str | None = None  # full enum name, e.g. VERDICT_CORRECT
    reward: float | None = None
    components: tuple[tuple[str, float], ...] = ()
    steps: tuple[tuple[int, float], ...] | None = None  # (end, reward) per step, when the case says


@dataclass(frozen=True)
class Case:
    name: str
    request: pb.VerifyGroupRequest
    expect: tuple[Expectation, ...]


def _enum_name(value: object, enum: str, prefix: str, where: str) -> str:
    if not isinstance(value, str):
        raise CasesError(f"{where}: expected a string, got {value!r}")
    name = value.upper()
    if not name.startswith(prefix):
        name = prefix + name
    valid = pb.DESCRIPTOR.enum_types_by_name[enum].values_by_name
    if name not in valid or name.endswith("_UNSPECIFIED") and enum == "RolloutStatus":
        choices = ", ".join(n.removeprefix(prefix) for n in valid if not n.endswith("UNSPECIFIED"))
        raise CasesError(f"{where}: unknown {enum} {value!r}; expected one of {choices}")
    return name


def _expectation(raw: object, where: str) -> Expectation:
    if not isinstance(raw, dict) or "index" not in raw:
        raise CasesError(f"{where}: each expectation is an object with an 'index'")
    unknown = set(raw) - {"index", "status", "verdict", "reward", "components", "steps"}
    if unknown:
        raise CasesError(f"{where}: unknown keys {sorted(unknown)}")
    status = _enum_name(raw.get("status", "OK"), "RolloutStatus", "ROLLOUT_STATUS_", where)
    verdict = None if raw.get("verdict") is None else _enum_name(raw["verdict"], "Verdict", "VERDICT_", where)
    reward = raw.get("reward")
    if reward is not None and not isinstance(reward, (int, float)):
        raise CasesError(f"{where}: reward must be a number, got {reward!r}")
    if status != "ROLLOUT_STATUS_OK" and reward is not None:
        raise CasesError(f"{where}: status {status} carries no reward; drop 'reward' (only OK rewards are judgements)")
    components = raw.get("components") or {}
    if not isinstance(components, dict) or not all(isinstance(v, (int, float)) for v in components.values()):
        raise CasesError(f"{where}: components must map names to numbers")
    steps = raw.get("steps")
    if steps is not None and not (isinstance(steps, list) and all(
            isinstance(s, list) and len(s) == 2 and isinstance(s[0], int) and isinstance(s[1], (int, float)) for s in steps)):
        raise CasesError(f"{where}: steps must be a list of [end, reward] pairs")
    return Expectation(
        index=int(raw["index"]),
        status=status,
        verdict=verdict,
        reward=None if reward is None else float(reward),
        components=tuple(sorted((str(k), float(v)) for k, v in components.items())),
        steps=None if steps is None else tuple((int(e), float(r)) for e, r in steps),
    )


def parse_case(line: str, verifier: str, where: str) -> Case:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CasesError(f"{where}: not JSON: {exc}") from None
    if not isinstance(raw, dict) or "request" not in raw or "expect" not in raw:
        raise CasesError(f"{where}: each line is an object with 'request' and 'expect' (and optionally 'name')")
    name = str(raw.get("name") or f"line-{where.rsplit(':', 1)[-1]}")
    request = pb.VerifyGroupRequest()
    try:
        json_format.ParseDict(raw["request"], request)
    except json_format.ParseError as exc:
        raise CasesError(f"{where}: request is not a VerifyGroupRequest: {exc}") from None
    if request.verifier and request.verifier != verifier:
        raise CasesError(f"{where}: case is for verifier {request.verifier!r}, the kit checks {verifier!r}")
    request.verifier = verifier
    request.group_id = request.group_id or name
    if not request.rollouts:
        raise CasesError(f"{where}: request has no rollouts")
    indexes = [r.index for r in request.rollouts]
    if len(set(indexes)) != len(indexes):
        raise CasesError(f"{where}: duplicate rollout indexes {indexes}")
    if not isinstance(raw["expect"], list):
        raise CasesError(f"{where}: 'expect' is a list with one entry per rollout")
    expect = tuple(_expectation(e, f"{where} expect[{i}]") for i, e in enumerate(raw["expect"]))
    got = sorted(e.index for e in expect)
    if got != sorted(indexes):
        raise CasesError(f"{where}: expectations cover indexes {got}, the rollouts are {sorted(indexes)}")
    return Case(name, request, expect)


def load_cases(path: Path, verifier: str) -> list[Case]:
    """Parse and validate a cases file; raises :class:`CasesError` with file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CasesError(f"cannot read cases file {path}: {exc.strerror}") from None
    cases: list[Case] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cases.append(parse_case(line, verifier, f"{path}:{lineno}"))
    if not cases:
        raise CasesError(f"{path}: no cases (one JSON object per line)")
    names = [c.request.group_id for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CasesError(f"{path}: group ids used twice: {duplicates} (give each case its own 'name')")
    return cases
