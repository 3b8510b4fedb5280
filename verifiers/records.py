"""JSONL records of rollouts to score (the input of ``cohort verify``), parsed with clear errors.

One group per line::

    {"group_id": "q1", "prompt": "2+2=?", "answer": "4",
     "rollouts": ["<think>..</think><answer>4</answer>", {"completion": "5", "truncated": true}],
     "verifiers": ["math", "format"],            # optional: default every configured verifier
     "options": {"format": {"mode": "soft"}}}    # optional: per-verifier options

The reference is ``"answer": "..."`` or ``"code_tests": {"asserts": [...], "setup_code": ""}`` /
``{"test_code": "...", "entry_point": "f"}`` / ``{"io": [{"stdin": "", "expected_stdout": ""}], "comparison": "exact"}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cohort.verifiers.base import CodeTests, IoCase, Reference, Rollout


class RecordError(ValueError):
    pass


class _RolloutIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    completion: str
    truncated: bool = False
    index: int | None = Field(default=None, ge=0, lt=2**32)


class _IoCaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stdin: str = ""
    expected_stdout: str


class _CodeTestsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    asserts: list[str] | None = None
    setup_code: str = ""
    test_code: str | None = None
    entry_point: str = ""
    io: list[_IoCaseIn] | None = None
    comparison: str = "whitespace"

    def to_domain(self) -> CodeTests:
        kinds = [k for k in ("asserts", "test_code", "io") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"code_tests needs exactly one of asserts / test_code / io, got {kinds or 'none'}")
        if self.asserts is not None:
            return CodeTests("asserts", asserts=tuple(self.asserts), setup_code=self.setup_code)
        if self.test_code is not None:
            if not self.entry_point:
                raise ValueError("code_tests.test_code needs entry_point")
            return CodeTests("function", test_code=self.test_code, entry_point=self.entry_point)
        if self.comparison not in ("exact", "whitespace"):
            raise ValueError("code_tests.comparison must be 'exact' or 'whitespace'")
        return CodeTests("io", io_cases=tuple(IoCase(c.stdin, c.expected_stdout) for c in self.io or ()), comparison=self.comparison)  # type: ignore[arg-type]


class _RecordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_id: str | None = None
    prompt: str = ""
    answer: str | int | float | None = None
    code_tests: _CodeTestsIn | None = None
    rollouts: list[str | _RolloutIn] = Field(min_length=1)
    verifiers: list[str] | None = None
    options: dict[str, dict[str, str]] = {}
    rollout_timeout_s: float | None = Field(default=None, gt=0)

    @field_validator("answer")
    @classmethod
    def _answer_str(cls, v):
        return None if v is None else str(v)


@dataclass(frozen=True)
class Record:
    group_id: str
    prompt: str
    reference: Reference
    rollouts: tuple[Rollout, ...]
    verifiers: tuple[str, ...] | None
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    rollout_timeout_s: float | None = None


def parse_record(obj: object, default_id: str) -> Record:
    try:
        rec = _RecordIn.model_validate(obj)
        if rec.answer is not None and rec.code_tests is not None:
            raise ValueError("give either answer or code_tests, not both")
        reference = Reference(answer=rec.answer, code_tests=rec.code_tests.to_domain() if rec.code_tests else None)
    except (ValidationError, ValueError) as exc:
        raise RecordError(str(exc)) from None
    rollouts = []
    for i, r in enumerate(rec.rollouts):
        if isinstance(r, str):
            rollouts.append(Rollout(i, r))
        else:
            rollouts.append(Rollout(i if r.index is None else r.index, r.completion, r.truncated))
    return Record(rec.group_id or default_id, rec.prompt, reference, tuple(rollouts),
                  tuple(rec.verifiers) if rec.verifiers else None, rec.options, rec.rollout_timeout_s)


def read_records(path: Path) -> Iterator[Record]:
    """Records of a JSONL file; raises :class:`RecordError` naming the file and line."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{path}:{lineno}: not JSON: {exc.msg}") from None
            try:
                yield parse_record(obj, default_id=f"line{lineno}")
            except RecordError as exc:
                raise RecordError(f"{path}:{lineno}: {exc}") from None
