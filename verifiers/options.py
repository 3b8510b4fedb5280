"""A verifier's server-side options: one validated model per verifier, given to its factory.

A verifier declares its model as the ``Options`` attribute of its factory (the class the entry point names)
and takes an instance of it::

    class ExactOptions(VerifierOptions):
        strip: bool = True
        \"\"\"Compare the completion and the gold answer with surrounding white space removed.\"\"\"

    class ExactMatch(VerifierBase):
        Options = ExactOptions

        def __init__(self, options: ExactOptions | None = None) -> None:
            self.options = options or ExactOptions()

The registry validates what a serve config gives (``verifiers.<name>`` of ``cohort serve``'s file) against the
model before it calls the factory, so a typo is refused at startup, naming the key; a factory without an
``Options`` takes none. The models are frozen, refuse unknown keys and document each field with the string under
it (docs/config.md, "Serve config", is generated from them).
"""

from __future__ import annotations

import difflib
import types
import typing

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["VerifierOptions", "NoOptions", "explain"]


class VerifierOptions(BaseModel):
    """Base of every verifier's options: frozen, unknown keys refused, each field documented."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class NoOptions(VerifierOptions):
    """A verifier without server-side options (its behaviour is set per request, by the row's ``options``)."""


def explain(exc: ValidationError, root: type[BaseModel], prefix: str = "") -> str:
    """A validation error of ``root`` in one line; an unknown key names the closest known one
    (``verifiers.math.worker`` -> ``did you mean verifiers.math.workers?``)."""
    problems = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        where = prefix + ".".join(loc) if loc else prefix.rstrip(".") or "config"
        if err["type"] == "extra_forbidden":
            known = list(_model_at(root, err["loc"][:-1]).model_fields)
            close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
            stem = prefix + ".".join(loc[:-1] + [""])
            hint = f"did you mean {stem}{close[0]}?" if close else f"known keys here: {', '.join(known) or 'none'}"
            problems.append(f"unknown key {where} ({hint})")
        elif err["type"] == "missing":
            problems.append(f"{where} is required")
        else:
            got = err.get("input")
            shown = f" (got {got!r})" if isinstance(got, (str, int, float, bool)) else ""
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{msg if msg.startswith(where + ':') else f'{where}: {msg}'}{shown}")
    return "; ".join(problems)


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel]:
    model = root
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue
        found = [t for t in _flatten(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
        if found:
            model = found[0]
    return model


def _flatten(annotation: object) -> list[object]:
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    return [t for arg in args for t in _flatten(arg)] if typing.get_origin(annotation) in (
        typing.Union, types.UnionType, list, tuple, dict) else [annotation]
