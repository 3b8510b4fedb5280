"""The one registry of verifiers: the entry-point group ``cohort.verifiers``.

Built-ins register exactly like third-party plugins (see pyproject.toml), so the
server, the client and the trainer never name a verifier in code. An entry point
resolves to a factory: a class or callable returning an object satisfying
:class:`verifiers.base.Verifier`. A factory with server-side settings declares them as its ``Options``
model (:mod:`verifiers.options`) and is called with an instance of it; one without takes no arguments.
Loading is lazy (a verifier's heavy imports happen only when it is served) and validated: options the model
refuses raise :class:`OptionsError` (one line, naming the key), a factory that fails or returns something
that is not a Verifier raises :class:`PluginError` naming the plugin. The serve config's ``allow`` list
(``cohort serve``, formerly ``COHORT_VERIFIERS_ALLOW``) restricts which plugins may load.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import ValidationError

from cohort.verifiers.base import Verifier
from cohort.verifiers.options import VerifierOptions, explain

GROUP = "cohort.verifiers"


class PluginError(RuntimeError):
    pass


class OptionsError(PluginError):
    """Options a verifier's model refuses (an unknown key, a bad value): bad input, not a broken plugin."""


def available(allow: Collection[str] | None = None) -> dict[str, EntryPoint]:
    """Registered names -> entry points (only those in ``allow`` when given); duplicate names are an error."""
    found = _registered()
    if allow is not None:
        found = {name: ep for name, ep in found.items() if name in allow}
    return found


@cache
def _registered() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        other = found.get(ep.name)
        if other is not None and other.value != ep.value:
            raise PluginError(f"verifier name {ep.name!r} registered twice: {other.value} and {ep.value}")
        found[ep.name] = ep
    return dict(sorted(found.items()))


def factory(name: str, allow: Collection[str] | None = None) -> Any:
    """The factory registered as ``name`` (imported now)."""
    registered = available(allow)
    if name not in registered:
        held = "" if allow is None or name not in _registered() else " (registered, but not in the serve config's allow list)"
        raise PluginError(f"unknown verifier {name!r}{held}; registered: {', '.join(registered) or 'none'}")
    ep = registered[name]
    try:
        return ep.load()
    except Exception as exc:  # a plugin's own failure, reported with its name
        raise PluginError(f"verifier plugin {name!r} ({ep.value}) failed to load: {exc!r}") from exc


def options_model(made_by: Any) -> type[VerifierOptions] | None:
    """The options model a factory declares (its ``Options`` attribute), or None: it takes no options."""
    model = getattr(made_by, "Options", None)
    return model if isinstance(model, type) and issubclass(model, VerifierOptions) else None


def parse_options(name: str, made_by: Any, given: Mapping[str, Any] | VerifierOptions | None) -> VerifierOptions | None:
    """``given`` validated against the factory's model (its defaults when None); raises :class:`OptionsError`."""
    model = options_model(made_by)
    if isinstance(given, VerifierOptions):
        if model is None or not isinstance(given, model):
            raise OptionsError(f"verifier {name!r} takes {model.__name__ if model else 'no options'}, "
                               f"not {type(given).__name__}")
        return given
    if model is None:
        if given:
            raise OptionsError(f"verifiers.{name}: this verifier takes no options (got {', '.join(map(str, given))})")
        return None
    try:
        return model.model_validate(dict(given or {}))
    except ValidationError as exc:
        raise OptionsError(explain(exc, model, prefix=f"verifiers.{name}.")) from None


def load(name: str, options: Mapping[str, Any] | VerifierOptions | None = None,
         allow: Collection[str] | None = None) -> Verifier:
    """Instantiate the verifier registered as ``name`` with ``options`` (validated by its model)."""
    made_by = factory(name, allow)
    parsed = parse_options(name, made_by, options)
    try:
        verifier = made_by() if parsed is None else made_by(parsed)
    except Exception as exc:  # a plugin's own failure, reported with its name
        ep = available()[name]
        raise PluginError(f"verifier plugin {name!r} ({ep.value}) failed to load: {exc}") from exc
    validate(name, verifier)
    return verifier


def validate(name: str, verifier: object) -> None:
    if not isinstance(verifier, Verifier):
        members = ("name", "version", "description", "reference_kinds", "verify_group", "max_concurrency", "options",
                   "ready", "close")
        missing = [a for a in members if not hasattr(verifier, a)]
        raise PluginError(f"verifier plugin {name!r} does not implement the Verifier protocol (missing {missing}; "
                          "subclass cohort.verifiers.base.VerifierBase for the defaults of the optional ones)")
    if verifier.name != name:
        raise PluginError(f"verifier plugin registered as {name!r} calls itself {verifier.name!r}")
    if not verifier.version:
        raise PluginError(f"verifier plugin {name!r} has an empty version")


def load_many(names: list[str] | Mapping[str, Mapping[str, Any] | VerifierOptions | None],
              allow: Collection[str] | None = None) -> dict[str, Verifier]:
    """Verifiers by name: a list (their default options) or a mapping name -> options. All options are
    validated before any verifier is made (a typo in the last does not wait for the first's start-up)."""
    if not isinstance(names, Mapping):
        if len(set(names)) != len(names):
            raise PluginError(f"verifier names repeated: {names}")
        names = dict.fromkeys(names)
    parsed = {name: parse_options(name, factory(name, allow), given) for name, given in names.items()}
    return {name: load(name, options, allow) for name, options in parsed.items()}
