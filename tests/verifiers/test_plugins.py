"""Plugins through the `cohort.verifiers` entry points: a third-party package served with no code change."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from cohort.rpc.launch import ServiceProcess
from cohort.verifiers import registry
from cohort.verifiers.base import Reference, Rollout, VerifierBase
from cohort.verifiers.client import VerifierClient, WeightedVerifier
from cohort.verifiers.records import Record, Task


def test_builtins_register_through_entry_points():
    names = registry.available()
    assert {"format", "math", "code"} <= set(names)
    assert names["format"].value == "cohort.verifiers.format:FormatVerifier"
    assert registry.load("format").name == "format"


def test_unknown_and_invalid_plugins_fail_with_their_name():
    with pytest.raises(registry.PluginError, match="unknown verifier 'nope'"):
        registry.load("nope")

    class NotAVerifier:
        name = "broken"

    with pytest.raises(registry.PluginError, match="'broken' does not implement the Verifier protocol"):
        registry.validate("broken", NotAVerifier())

    class WrongName(VerifierBase):
        name, version, description, reference_kinds = "other", "1", "", ()

        def verify_group(self, group, ctx):
            return []

    with pytest.raises(registry.PluginError, match="registered as 'x' calls itself 'other'"):
        registry.validate("x", WrongName())


def test_third_party_plugin_is_served_and_scored(testplugin):
    """Installed with pip, found by entry point, served by `cohort serve`, scored by the stock client."""
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "list-verifiers"], capture_output=True, text=True, check=True)
    assert "cohort_testplugin:ExactMatch" in out.stdout
    with ServiceProcess(["exact", "format"]) as sp:

        async def run():
            verifiers = [WeightedVerifier("exact", 1.0, (sp.endpoint,)), WeightedVerifier("format", 0.5, (sp.endpoint,))]
            async with VerifierClient(verifiers) as client:
                await client.handshake()
                return await client.score([Record(Task("g", "", Reference(answer="42")), (Rollout(0, "42"), Rollout(1, "41")))])

        (scored,) = asyncio.run(run())
    assert [s.reward for s in scored] == [1.0, 0.0]
    assert scored[0].components["exact/exact"] == 1.0


def test_serving_an_unknown_name_exits_2():
    r = subprocess.run([sys.executable, "-m", "cohort.cli", "serve", "nope", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "unknown verifier 'nope'" in r.stderr


def test_allowlist_restricts_plugins():
    """The serve config's `allow` (COHORT_VERIFIERS_ALLOW overrides it): a plugin outside it does not load."""
    import os

    assert list(registry.available(allow={"format"})) == ["format"]
    with pytest.raises(registry.PluginError, match="registered, but not in the serve config's allow list"):
        registry.load("math", allow={"format"})
    r = subprocess.run([sys.executable, "-m", "cohort.cli", "serve", "math", "--port", "0"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "COHORT_VERIFIERS_ALLOW": "format"})
    assert r.returncode == 2 and "unknown verifier 'math' (registered, but not in the serve config's allow list)" in r.stderr
