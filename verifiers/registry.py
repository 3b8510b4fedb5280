"""The one registry of verifiers: the entry-point group ``cohort.verifiers``.

Built-ins register exactly like third-party plugins (see pyproject.toml), so the
server, the client and the trainer never name a verifier in code. An entry point
resolves to a factory: a class or callable that takes no arguments and returns an
object satisfying :class:`verifiers.base.Verifier`. Loading is lazy (a verifier's
heavy imports happen only when it is served) and validated: a factory that fails,
or returns something that is not a Verifier, raises :class:`PluginError` naming the
plugin. ``COHORT_VERIFIERS_ALLOW`` (comma-separated names) restricts which plugins may load.
"""

from __future__ import annotations

import os
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from cohort.verifiers.base import Verifier

GROUP = "cohort.verifiers"


class PluginError(RuntimeError):
    pass


@cache
def available() -> dict[str, EntryPoint]:
    """Registered names -> entry points; duplicate names are an error."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        other = found.get(ep.name)
        if other is not None and other.value != ep.value:
            raise PluginError(f"verifier name {ep.name!r} registered twice: {other.value} and {ep.value}")
        found[ep.name] = ep
    allow = os.environ.get("COHORT_VERIFIERS_ALLOW")
    if allow:
        allowed = {name.strip() for name in allow.split(",") if name.strip()}
        found = {name: ep for name, ep in found.items() if name in allowed}
    return dict(sorted(found.items()))


def load(name: str) -> Verifier:
    """Instantiate the verifier registered as ``name``."""
    registered = available()
    if name not in registered:
        raise PluginError(f"unknown verifier {name!r}; registered: {', '.join(registered) or 'none'}")
    ep = registered[name]
    try:
        factory = ep.load()
        verifier = factory()
    except Exception as exc:  # a plugin's own failure, reported with its name
        raise PluginError(f"verifier plugin {name!r} ({ep.value}) failed to load: {exc!r}") from exc
    validate(name, verifier)
    return verifier


def validate(name: str, verifier: object) -> None:
    if not isinstance(verifier, Verifier):
        missing = [a for a in ("name", "version", "description", "reference_kinds", "verify_group") if not hasattr(verifier, a)]
        raise PluginError(f"verifier plugin {name!r} does not implement the Verifier protocol (missing {missing})")
    if verifier.name != name:
        raise PluginError(f"verifier plugin registered as {name!r} calls itself {verifier.name!r}")
    if not verifier.version:
        raise PluginError(f"verifier plugin {name!r} has an empty version")


def load_many(names: list[str]) -> dict[str, Verifier]:
    if len(set(names)) != len(names):
        raise PluginError(f"verifier names repeated: {names}")
    return {name: load(name) for name in names}
