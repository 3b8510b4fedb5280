"""Tests are laid out as the source: each folder under tests/ is a source folder's, or one of the few kinds of
test that cut across the tree (named here with the reason), so no test folder mirrors a folder that is gone."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACROSS = {
    "interop": "the adapters of verifiers/interop/ and integrations/ against the other standards' own servers",
    "packaging": "the wheel, its install in a fresh venv, the generated stubs",
    "plugins": "a third-party verifier plugin (an installable distribution the tests install)",
    "security": "attacks on every service (TLS, fuzzing, connection errors)",
    "vllm": "the vLLM engines, the tests marked vllm that CI runs in their own venv",
}


def test_every_test_folder_is_a_source_folder_or_named_here():
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    strays = sorted(f for f in folders if f not in ACROSS and not (ROOT / f).is_dir())
    assert strays == [], f"test folders with no source folder of that name: {strays}"
    assert sorted(f for f in ACROSS if f not in folders) == []  # the list stays current


def test_a_source_file_over_400_lines_says_why():
    """The house rule: a module stays under 400 lines, or its docstring says why it is one file."""
    sources = [p for folder in ("cli", "conformance", "integrations", "rpc", "sandbox", "tools", "trainer", "verifiers")
               for p in (ROOT / folder).rglob("*.py") if "_pb2" not in p.name]
    long = [p for p in sources if p.read_text().count("\n") > 400 and "400 lines" not in p.read_text()]
    assert [str(p.relative_to(ROOT)) for p in long] == []
