"""What a tool is, for authors of tools in Python (other languages implement ``grpo.tool.v1`` directly).

A tool's failure has one of two causes, and the contract keeps them apart:

1. **The call's content** (code that raises or loops, an expression that does not parse, arguments
   that do not match the schema): the tool returns a :class:`ToolOutput` with ``error_kind`` set and
   the error as ``output``. The model wrote it, so the model reads it and the rollout is scored.
2. **The infrastructure** (the sandbox is down, a dependency fails): the tool raises
   :class:`ToolUnavailable`. The rollout is masked, never scored. Any other exception a tool raises is
   a bug of the tool (``CALL_STATUS_INTERNAL``, also masked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jsonschema


class ToolUnavailable(Exception):
    """The tool's infrastructure failed: not the call's fault (the rollout is masked)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    max_wall_s: float = 10.0
    max_output_bytes: int = 4096


@dataclass(frozen=True)
class ToolOutput:
    output: str
    error_kind: str = ""
    """"" when the call succeeded; else a word such as ``runtime_error`` (:data:`ERROR_KINDS`)."""
    truncated: bool = False


ERROR_KINDS = ("bad_arguments", "unknown_tool", "runtime_error", "time_limit", "memory_limit", "output_limit",
               "busy")
"""The error kinds every tool shares (a tool may add its own ``[a-z_]+`` word)."""


@runtime_checkable
class Tool(Protocol):
    spec: ToolSpec

    def run(self, arguments: dict[str, Any], session_id: str) -> ToolOutput:
        """Execute one call whose arguments already match ``spec.parameters``. Blocking; called from a
        thread pool, so it must be thread-safe."""


MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects a call's JSON may have: deeper is the call's own error. It
keeps every later walk of the value (the schema check, ``json.dumps``) far from Python's recursion limit."""


def load_json(text: str) -> tuple[Any, str]:
    """``(value, "")``, or ``(None, why)`` when ``text`` is not JSON this process can take: the one bounded
    parser of text a model or a client wrote. It never raises: nesting past Python's recursion limit
    (``json`` raises RecursionError), an integer past ``sys.int_info``'s digit limit (ValueError) and nesting
    past :data:`MAX_JSON_DEPTH` all come back as the reason."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, f"not valid JSON here: arrays and objects nest deeper than {MAX_JSON_DEPTH} levels"
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        return None, f"not valid JSON here: {exc}"
    if json_depth(value) > MAX_JSON_DEPTH:
        return None, f"not valid JSON here: arrays and objects nest deeper than {MAX_JSON_DEPTH} levels"
    return value, ""


def json_depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:  # past the limit the answer is already known
            stack.extend((c, depth + 1) for c in children)
    return deepest


def parse_arguments(spec: ToolSpec, arguments_json: str) -> dict[str, Any] | ToolOutput:
    """The call's arguments, or the model-facing error when they are not a JSON object matching the schema.
    Never raises, whatever ``arguments_json`` holds (:func:`load_json`)."""
    arguments, why = load_json(arguments_json or "{}")
    if why:
        return ToolOutput(f"arguments are {why}", "bad_arguments")
    try:
        jsonschema.validate(arguments, spec.parameters)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return ToolOutput(f"arguments do not match the schema of {spec.name}: {exc.message}"
                          + (f" (at {where})" if where else ""), "bad_arguments")
    except (RecursionError, ValueError) as exc:  # a pathological value the schema's checks cannot walk
        return ToolOutput(f"arguments cannot be checked against the schema of {spec.name}: {type(exc).__name__}",
                          "bad_arguments")
    return arguments


def cut(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to ``max_bytes`` of UTF-8 (never inside a character), and whether it was cut."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text, False
    return data[:max_bytes].decode(errors="ignore"), True


@dataclass(frozen=True)
class CallResult:
    """One call's result as the learner sees it (``cohort.tools.client``)."""

    ok: bool
    """False: an infrastructure failure (the rollout is masked)."""
    output: str = ""
    error_kind: str = ""
    truncated: bool = False
    seconds: float = 0.0
    detail: str = ""
