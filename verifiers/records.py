"""One row schema for training, evaluation and ``cohort verify``, parsed with clear errors.

A *task row* is a prompt with its reference and, optionally, the verifiers that score it::

    {"id": "gsm8k/7", "source": "gsm8k",
     "prompt": "2+2=?",                                  # or "messages": [{"role": "user", "content": "..."}]
     "answer": "4",                                      # or "code_tests": {...} (below); or neither (format only)
     "verifiers": ["math", {"name": "format", "weight": 0.2, "options": {"mode": "soft"}}],   # optional
     "options": {"math": {"tolerance": "1e-6"}}}         # optional: per-verifier options

``code_tests`` is the proto's ``CodeTests``: ``{"asserts": [...], "setup_code": ""}`` (MBPP),
``{"test_code": "def check(candidate): ...", "entry_point": "f", "setup_code": ""}`` (HumanEval) or
``{"io": [{"stdin": "", "expected_stdout": ""}], "comparison": "exact"}``.

A *record* (the input of ``cohort verify``) is a task row plus ``"rollouts"``: completions as strings
or ``{"completion": str, "truncated": bool, "index": int}``. ``group_id`` is accepted for ``id``.

Rows come from JSONL (``.jsonl``, ``.jsonl.gz``), Parquet, or a Hugging Face ``datasets`` folder
(``save_to_disk`` output, or a folder of json/parquet data files), see :func:`read_tasks`; a column
mapping (``{"prompt": "question", "code_tests.test_code": "test"}``, dotted targets build nested
fields) adapts datasets whose names differ. A bad row raises :class:`RecordError` naming its file and
line (or row number): rows are never dropped silently.

Routing (:func:`route`): a row that names verifiers is scored by exactly those (row weight and options
over the configured defaults); a row that names none is scored by every configured verifier that
accepts its reference kind (as each server reports in ``ListVerifiers``; no kinds = any row).
This module imports neither torch nor gRPC; ``pyarrow``/``datasets`` load only for those formats.

Over 400 lines on purpose: the row schema, its parse errors and the rows' routing are one contract
(docs/verifiers.md).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cohort.verifiers.base import CodeTests, GroupRequest, IoCase, Reference, Rollout


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
            if not self.asserts:
                raise ValueError("code_tests.asserts is empty")
            return CodeTests("asserts", asserts=tuple(self.asserts), setup_code=self.setup_code)
        if self.test_code is not None:
            if not self.entry_point:
                raise ValueError("code_tests.test_code needs entry_point")
            return CodeTests("function", test_code=self.test_code, entry_point=self.entry_point,
                             setup_code=self.setup_code)
        if self.comparison not in ("exact", "whitespace"):
            raise ValueError("code_tests.comparison must be 'exact' or 'whitespace'")
        return CodeTests("io", io_cases=tuple(IoCase(c.stdin, c.expected_stdout) for c in self.io or ()), comparison=self.comparison)  # type: ignore[arg-type]


def code_tests_record(tests: CodeTests) -> dict[str, Any]:
    """``tests`` in the row schema's ``code_tests`` form (what :class:`_CodeTestsIn` reads back), for a front
    that shows a row to another standard's client (an ORS task spec, an OpenEnv episode's task)."""
    if tests.kind == "asserts":
        return {"asserts": list(tests.asserts), "setup_code": tests.setup_code}
    if tests.kind == "function":
        return {"test_code": tests.test_code, "entry_point": tests.entry_point, "setup_code": tests.setup_code}
    return {"io": [{"stdin": c.stdin, "expected_stdout": c.expected_stdout} for c in tests.io_cases],
            "comparison": tests.comparison}


class _VerifierUseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    weight: float | None = None
    options: dict[str, str] = {}


class _MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class _TaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | int | None = None
    group_id: str | None = None
    source: str | None = None
    prompt: str | None = None
    messages: list[_MessageIn] | None = None
    answer: str | int | float | None = None
    code_tests: _CodeTestsIn | None = None
    verifiers: list[str | _VerifierUseIn] | None = None
    options: dict[str, dict[str, str]] = {}
    rollout_timeout_s: float | None = Field(default=None, gt=0)

    @field_validator("answer")
    @classmethod
    def _answer_str(cls, v):
        return None if v is None else str(v)


class _RecordIn(_TaskIn):
    rollouts: list[str | _RolloutIn] = Field(min_length=1)


@dataclass(frozen=True)
class VerifierUse:
    """A verifier a row asks for; ``weight`` None means the configured weight."""

    name: str
    weight: float | None = None
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One prompt with its reference: a training, evaluation or ``cohort verify`` row."""

    id: str
    prompt: str
    """The prompt text (for ``messages`` rows: the last user message), as verifiers see it."""
    reference: Reference = field(default_factory=Reference)
    messages: tuple[tuple[str, str], ...] | None = None
    """Chat turns ``(role, content)``, or None for a plain ``prompt``."""
    verifiers: tuple[VerifierUse, ...] | None = None
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    source: str = ""
    rollout_timeout_s: float | None = None

    @property
    def answer(self) -> str | None:
        return self.reference.answer

    @classmethod
    def with_answer(cls, prompt: str, answer: str, id: str = "", source: str = "") -> Task:
        return cls(id=id or prompt, prompt=prompt, reference=Reference(answer=str(answer)), source=source)


@dataclass(frozen=True)
class Record:
    """A ``cohort verify`` row: a :class:`Task` (the one row type) with the rollouts to score."""

    task: Task
    rollouts: tuple[Rollout, ...]


def _task_from(rec: _TaskIn, default_id: str, source: str) -> Task:
    if rec.answer is not None and rec.code_tests is not None:
        raise ValueError("give either answer or code_tests, not both")
    if rec.prompt is not None and rec.messages is not None:
        raise ValueError("give either prompt or messages, not both")
    if rec.id is not None and rec.group_id is not None:
        raise ValueError("give either id or group_id, not both")
    messages = None
    prompt = rec.prompt or ""
    if rec.messages is not None:
        users = [m.content for m in rec.messages if m.role == "user"]
        if not users:
            raise ValueError("messages needs at least one user message")
        messages = tuple((m.role, m.content) for m in rec.messages)
        prompt = users[-1]
    reference = Reference(answer=rec.answer, code_tests=rec.code_tests.to_domain() if rec.code_tests else None)
    uses = None
    if rec.verifiers is not None:
        uses = tuple(VerifierUse(v) if isinstance(v, str) else VerifierUse(v.name, v.weight, dict(v.options))
                     for v in rec.verifiers)
        names = [u.name for u in uses]
        if len(set(names)) != len(names):
            raise ValueError(f"verifiers named twice: {names}")
        if not uses:
            raise ValueError("verifiers is empty (leave it out for the configured defaults)")
    ident = rec.id if rec.id is not None else rec.group_id
    return Task(str(ident) if ident is not None else default_id, prompt, reference, messages, uses,
                {k: dict(v) for k, v in rec.options.items()}, rec.source or source, rec.rollout_timeout_s)


def parse_task(obj: object, default_id: str, source: str = "") -> Task:
    """A training or evaluation row (no rollouts) from a JSON-like object, with its reference (``answer`` or
    ``code_tests``); raises :class:`RecordError`."""
    try:
        task = _task_from(_TaskIn.model_validate(obj), default_id, source)
    except (ValidationError, ValueError) as exc:
        raise RecordError(_one_line(exc)) from None
    if task.messages is None and not task.prompt:
        raise RecordError("needs a non-empty prompt (or messages)")
    if task.reference.kind == "none":
        raise RecordError("needs a reference: answer or code_tests")
    return task


def parse_record(obj: object, default_id: str) -> Record:
    try:
        rec = _RecordIn.model_validate(obj)
        task = _task_from(rec, default_id, "")
    except (ValidationError, ValueError) as exc:
        raise RecordError(_one_line(exc)) from None
    rollouts = tuple(Rollout(i, r) if isinstance(r, str) else Rollout(i if r.index is None else r.index, r.completion,
                                                                         r.truncated) for i, r in enumerate(rec.rollouts))
    return Record(task, rollouts)


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith(("str", "_")))
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
        return "; ".join(dict.fromkeys(parts))
    return str(exc)


def _json_lines(path: Path) -> Iterator[tuple[str, object]]:
    """(location, parsed object) per non-blank line of a JSONL (optionally gzipped) file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{path}:{lineno}: not JSON: {exc.msg}") from None
            yield f"{path}:{lineno}", obj


def read_records(path: Path) -> Iterator[Record]:
    """Records of a JSONL file; raises :class:`RecordError` naming the file and line."""
    for where, obj in _json_lines(Path(path)):
        try:
            yield parse_record(obj, default_id=f"line{where.rsplit(':', 1)[1]}")
        except RecordError as exc:
            raise RecordError(f"{where}: {exc}") from None


# ---- task rows from files and datasets --------------------------------------------------------

Format = Literal["auto", "jsonl", "parquet", "hf"]
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")


def map_columns(raw: object, columns: Mapping[str, str] | None) -> object:
    """Project a dataset row onto the schema: ``{field: column}``; dotted fields build nested objects.

    Without a mapping the row is taken as it is (unknown keys are errors). With one, only the mapped
    columns are read (the rest of the dataset's columns are ignored) and a missing column is an error.
    """
    if not columns:
        return raw
    if not isinstance(raw, Mapping):
        raise RecordError(f"expected an object, got {type(raw).__name__}")
    out: dict[str, Any] = {}
    for target, column in columns.items():
        if column not in raw:
            raise RecordError(f"column {column!r} (mapped to {target!r}) is missing; row has {sorted(raw)}")
        node = out
        *parents, leaf = target.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = raw[column]
    return out


def _rows(path: Path, fmt: Format, split: str | None) -> Iterator[tuple[str, object]]:
    if fmt == "auto":
        if path.is_dir():
            fmt = "hf"
        elif path.name.endswith((".jsonl", ".jsonl.gz", ".json")):
            fmt = "jsonl"
        elif path.suffix == ".parquet":
            fmt = "parquet"
        else:
            raise RecordError(f"{path}: cannot tell the format from the name (use .jsonl, .parquet or a folder)")
    if fmt == "jsonl":
        yield from _json_lines(path)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}:row {i}", row
    elif (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        import datasets

        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split is None and len(ds) != 1:
                raise RecordError(f"{path}: a dataset with splits {list(ds)}; choose one with split")
            name = split or next(iter(ds))
            if name not in ds:
                raise RecordError(f"{path}: no split {name!r} (have {list(ds)})")
            ds = ds[name]
        for i, row in enumerate(ds):
            yield f"{path}[{split or 'dataset'}]:row {i}", row
    else:  # a folder of data files (the Hub layout): those whose name mentions the split
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(DATA_SUFFIXES))
        if split is not None:
            files = [p for p in files if split in p.relative_to(path).as_posix()]
        if not files:
            raise RecordError(f"{path}: no {'/'.join(DATA_SUFFIXES)} files" + (f" for split {split!r}" if split else ""))
        for f in files:
            yield from _rows(f, "auto", None)


def read_tasks(path: str | Path, *, format: Format = "auto", columns: Mapping[str, str] | None = None,
               split: str | None = None, answer_delimiter: str | None = None, template: str | None = None,
               source: str = "", limit: int | None = None) -> list[Task]:
    """Task rows of a file or dataset folder, in order.

    ``answer_delimiter``: keep only the text after its last occurrence in ``answer`` (GSM8K's ``####``).
    ``template``: a ``str.format`` pattern for the prompt, e.g. ``"Solve: {prompt}"``.
    Every row needs a reference (``answer`` or ``code_tests``).
    """
    path = Path(path)
    if not path.exists():
        raise RecordError(f"{path}: no such file or folder")
    out: list[Task] = []
    for where, raw in _rows(path, format, split):
        if limit is not None and len(out) >= limit:
            break
        try:
            obj = map_columns(raw, columns)
            if isinstance(obj, dict):
                obj = _shape(obj, answer_delimiter, template)
            out.append(parse_task(obj, default_id=f"{source or path.stem}/{len(out)}", source=source))
        except RecordError as exc:
            raise RecordError(f"{where}: {exc}") from None
    return out


def _shape(obj: dict, answer_delimiter: str | None, template: str | None) -> dict:
    if answer_delimiter is not None and obj.get("answer") is not None:
        text = str(obj["answer"])
        if answer_delimiter not in text:
            raise RecordError(f"answer has no {answer_delimiter!r}")
        obj = {**obj, "answer": text.rsplit(answer_delimiter, 1)[1].strip().replace(",", "")}
    if template is not None and isinstance(obj.get("prompt"), str):
        obj = {**obj, "prompt": template.format(prompt=obj["prompt"])}
    return obj


# ---- routing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """One verifier scoring one row: its weight and merged options."""

    name: str
    weight: float
    options: Mapping[str, str]


def accepts(kinds: Sequence[str], reference: Reference) -> bool:
    """Does a verifier advertising ``kinds`` apply to this reference? (no kinds: any row)"""
    return not kinds or reference.kind in kinds


def route(task: Task, defaults: Mapping[str, tuple[float, Mapping[str, str]]],
          kinds: Mapping[str, Sequence[str]] | None = None) -> tuple[Route, ...]:
    """The verifiers that score ``task``: its own list, else every default that accepts its reference.

    ``defaults``: configured verifier name -> (weight, options). ``kinds``: name -> reference kinds
    from the handshake (None before it: no kind checks). Raises :class:`RecordError` for a verifier
    that is not configured, one that does not accept the row's reference, or a row nothing applies to.
    """
    if task.verifiers is not None:
        unknown = [u.name for u in task.verifiers if u.name not in defaults]
        if unknown:
            raise RecordError(f"row {task.id!r} asks for verifiers that are not configured: {unknown} "
                              f"(configured: {sorted(defaults)})")
        routes = []
        for u in task.verifiers:
            weight, options = defaults[u.name]
            if kinds is not None and not accepts(kinds.get(u.name, ()), task.reference):
                raise RecordError(f"row {task.id!r}: verifier {u.name!r} accepts {list(kinds[u.name])} references, "
                                  f"the row has {task.reference.kind!r}")
            routes.append(Route(u.name, weight if u.weight is None else u.weight,
                                {**options, **u.options, **task.options.get(u.name, {})}))
        return tuple(routes)
    names = [n for n in defaults if kinds is None or accepts(kinds.get(n, ()), task.reference)]
    if not names:
        raise RecordError(f"row {task.id!r}: no configured verifier accepts a {task.reference.kind!r} reference "
                          f"(configured: {sorted(defaults)})")
    return tuple(Route(n, defaults[n][0], {**defaults[n][1], **task.options.get(n, {})}) for n in names)


def group_requests(task: Task, rollouts: tuple[Rollout, ...], routes: Sequence[Route], group_id: str | None = None
                   ) -> list[GroupRequest]:
    """One ``GroupRequest`` per route of ``task`` (group id: ``group_id``, else the task's id)."""
    return [GroupRequest(r.name, rollouts, task.reference, task.id if group_id is None else group_id, task.prompt,
                         task.rollout_timeout_s, dict(r.options)) for r in routes]


def check_routes(tasks: Iterable[Task], defaults: Mapping[str, tuple[float, Mapping[str, str]]],
                 kinds: Mapping[str, Sequence[str]] | None = None) -> None:
    """Route every row once (start-up): the first problem raises."""
    for task in tasks:
        route(task, defaults, kinds)
