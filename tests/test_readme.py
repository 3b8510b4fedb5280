"""README.md and the pages under docs/ stay true: the client example runs as written, links resolve inside
the repository (and their #anchors to headings that exist), every backticked repository path exists, every
``cohort`` command line in a shell block names a real subcommand with real flags, every trainer config block
validates, the configuration reference equals a fresh generation, and the site builds with ``mkdocs build
--strict``. The README stays a README: under 300 lines."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
COHORT = [sys.executable, "-m", "cohort.cli"]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def text_of(page: Path) -> str:
    """The page as the site renders it: ``--8<-- "FILE:NAME"`` lines replaced by that section of FILE."""
    def include(match: re.Match) -> str:
        text = (ROOT / match[1]).read_text()
        if match[2]:
            text = text.split(f"--8<-- [start:{match[2]}]", 1)[1].split(f"--8<-- [end:{match[2]}]", 1)[0]
            text = text.split("\n", 1)[1].rsplit("\n", 1)[0]  # the rest of the marker lines (HTML comments)
        return text
    return re.sub(r'^--8<-- "([^":]+):?([^"]*)"$', include, page.read_text(), flags=re.MULTILINE)


def blocks(lang: str, page: Path = README) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text_of(page), re.MULTILINE | re.DOTALL)


def prose(page: Path) -> str:
    """The page without its fenced blocks (a `# comment` in a block is no heading, a `](x)` in code no link)."""
    return re.sub(r"^```.*?^```", "", text_of(page), flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", [p for p in PAGES if any("VerifierClient" in b for b in blocks("python", p))], ids=_name)
def test_client_example_prints_what_it_says(page):
    from cohort.rpc.launch import ServiceProcess

    (code,) = [b for b in blocks("python", page) if "VerifierClient" in b]
    expected = [line[2:].split()[:4] for line in code.splitlines() if re.match(r"# \d", line)]
    assert len(expected) == 2
    with ServiceProcess(["format", "math"]) as proc:
        run = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:50051", proc.endpoint)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert [line.split() for line in run.stdout.splitlines()] == expected


def test_the_readme_is_a_readme():
    """Pitch, two commands, architecture, contract, one example and links; the manual lives in docs/."""
    lines = text_of(README).splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines: move sections to docs/"
    first_screen = "\n".join(lines[:40])
    assert "](docs/remote-verifiers.md)" in first_screen, "training against remote verifiers: one click from the top"
    assert "./scripts/quickstart" in first_screen and "./scripts/test" in first_screen


def slug(heading: str) -> str:
    """The anchor of a heading, as both GitHub and MkDocs' toc make it for these pages."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", prose(page), re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_links_resolve_inside_the_repository(page):
    local = [t for t in re.findall(r"\]\(([^)\s]+)[^)]*\)", prose(page)) if not re.match(r"[a-z]+://", t)]
    for target in local:
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.is_relative_to(ROOT), f"{_name(page)} links outside the repository: {target}"
        assert path.exists(), f"{_name(page)} links to a missing file: {target}"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{_name(page)} links to a missing heading: {target}"


def test_snippets_included_from_the_readme_exist():
    """docs/index.md takes sections of README.md (``--8<-- "README.md:name"``); each has its markers."""
    readme = text_of(README)
    for page in PAGES[1:]:
        for file, section in re.findall(r'^--8<-- "([^":]+):?([^"]*)"$', page.read_text(), re.MULTILINE):
            assert (ROOT / file).exists(), f"{_name(page)} includes a missing file {file}"
            if section:
                for mark in ("start", "end"):
                    assert f"--8<-- [{mark}:{section}]" in (ROOT / file).read_text(), \
                        f"{file} has no [{mark}:{section}] marker that {_name(page)} includes"
    assert "--8<-- [start:contract]" in readme


TOP = ("bench", "cli", "conformance", "integrations", "rpc", "deploy", "docs", "examples", "proto", "sandbox", "scripts", "tests", "trainer", "verifiers", ".ci")


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_paths_it_names_exist_inside_the_repository(page):
    """Every backticked repository path exists (globs allowed); nothing points outside the checkout."""
    text = text_of(page)
    named = set(re.findall(r"`(\.{0,2}/?[\w.*-]+(?:/[\w.*-]+)+/?)`", text))
    outside = sorted(p for p in named if p.startswith("../"))  # absolute paths are system paths (/etc/...)
    assert outside == [], f"{_name(page)} names files outside the repository: {outside}"
    generated = {"bench/wheels/"}  # filled by `bench/gpu_check.sh --fetch-wheels`, not committed
    # a path is a folder (`trainer/`) or a file with an extension; `cohort/unusable_frac` is a metric name
    paths = {p for p in named - generated if p.split("/")[0] in TOP and (p.endswith("/") or "." in p.rsplit("/", 1)[1])}
    missing = sorted(p for p in paths if not list(ROOT.glob(p.rstrip("/"))))
    assert missing == [], f"{_name(page)} names missing files: {missing}"
    pages = {p.name for p in PAGES[1:]}
    for doc in set(re.findall(r"\b([A-Z]+\.md)\b", text)) - {"WORKLOAD.md"}:  # WORKLOAD.md: of the shared TRL workload
        assert (ROOT / doc).exists() or list(ROOT.glob(f"*/{doc}")) or doc in pages, \
            f"{_name(page)} mentions {doc}, which does not exist"


def _cohort_lines() -> list[tuple[str, list[str]]]:
    lines = []
    for page in PAGES:
        for block in blocks("bash", page):
            for raw in block.replace("\\\n", " ").splitlines():
                words, command = [], []
                for word in shlex.split(raw, comments=True) + [";"]:
                    if word in ("&&", "||", ";", "|") or word.endswith(";"):
                        if command and command[0].lstrip("(").endswith("cohort") and len(command) > 1:
                            words.append(command)
                        command = []
                    else:
                        command.append(word.lstrip("(") if not command else word.rstrip(")"))
                lines.extend((_name(page), w) for w in words)
    return lines


def _help(path: list[str]) -> subprocess.CompletedProcess:
    return _help_of(tuple(path))


@functools.cache  # many lines share a command (`cohort serve`, `cohort train`): one --help each
def _help_of(path: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([*COHORT, *path, "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "TERM": "dumb"})


@pytest.mark.parametrize(("page", "words"), _cohort_lines(), ids=lambda x: x if isinstance(x, str) else " ".join(x[:3]))
def test_cohort_command_lines_use_real_subcommands_and_flags(page, words):
    path = [words[1]]
    helptext = _help(path)
    assert helptext.returncode == 0, f"{page}: `cohort {path[0]}` is not a command: {helptext.stderr[-300:]}"
    while "Commands" in helptext.stdout and len(words) > 1 + len(path):  # a group: the next word is its command
        path.append(words[1 + len(path)])  # (`cohort serve front ors`: two groups deep)
        helptext = _help(path)
        assert helptext.returncode == 0, f"{page}: `cohort {' '.join(path)}` is not a command"
    for flag in (w.split("=", 1)[0] for w in words[1 + len(path):] if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helptext.stdout), \
            f"{page}: `cohort {' '.join(path)}` has no option {flag}"


def _config_blocks() -> list[tuple[str, str]]:
    from cohort.trainer.config import TrainConfig

    sections = set(TrainConfig.model_fields)
    return [(_name(page), block) for page in PAGES for block in blocks("yaml", page)
            if isinstance(tree := yaml.safe_load(block), dict) and set(tree) <= sections]


@pytest.mark.parametrize(("page", "block"), _config_blocks(), ids=lambda x: x if x.endswith(".md") else x.split(":")[0])
def test_trainer_config_blocks_validate(page, block, tmp_path):
    """A ``yaml`` block made of trainer sections is a ``--config`` file: layered over the default, it validates."""
    from cohort.trainer.config import load_config

    (tmp_path / "block.yaml").write_text(block)
    load_config(tmp_path / "block.yaml")


def test_config_reference_is_generated_from_the_config():
    run = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_config.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_config_reference_documents_every_field():
    """Every field of every section has a row (the docstrings are the config's own: trainer/config.py)."""
    from cohort.trainer.config import TrainConfig

    reference = text_of(ROOT / "docs" / "config.md")
    for section, info in TrainConfig.model_fields.items():
        table = reference.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
        for name in info.annotation.model_fields:
            assert f"\n| `{name}` |" in table, f"docs/config.md: no row for {section}.{name}"
    assert "| `on_outage` | one of `wait`, `drop`, `mask` | `wait` | A verifier that no attempt" in reference


def test_the_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: a broken link, a missing anchor or a page left out of the nav fails it."""
    import importlib.util

    assert importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"), \
        "mkdocs is not installed: ./scripts/setup installs the `docs` extra (or: pip install -e '.[docs]')"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "site" / "remote-verifiers" / "index.html").exists()
    home = (tmp_path / "site" / "index.html").read_text()
    assert "The contract in brief" in home and "--8&lt;--" not in home  # the README's sections, included


TOLERANCE = 0.10
"""How far the README's test count may drift from the suite's (tests are added every day) before it must be
measured again: the count and the time go together, from one run of scripts/test."""


def test_the_readme_states_what_scripts_test_runs(request, deadline):
    """README's "about N minutes (M tests, S s in the last fresh-machine run)": M is what ``scripts/test`` selects
    now (within :data:`TOLERANCE`; counted by this very session when it is that run, else by collecting it),
    and N is S in minutes. The time itself is measured by a run of scripts/test, beside a busy loop per core
    (scripts/ci-fresh), and written here by hand."""
    stated = re.search(r"about (\d+) minutes \((\d[\d,]*) tests, (\d+) s in the last fresh-machine run\)",
                       README.read_text())
    assert stated, "README.md no longer states the test command's count and time in the expected words"
    minutes, count, seconds = int(stated[1]), int(stated[2].replace(",", "")), int(stated[3])
    assert round(seconds / 60) == minutes, (minutes, seconds)
    markers = re.search(r'-m "([^"]+)"', (ROOT / "scripts" / "test").read_text())[1]
    opt = request.config.option
    whole_run = (opt.markexpr == markers and not opt.keyword and not getattr(opt, "deselect", None)
                 and {Path(a).resolve() for a in request.config.args} == {ROOT / "tests"})
    if whole_run:
        selected = len(request.session.items)
    else:
        run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "-m", markers], capture_output=True, text=True, timeout=deadline(120), cwd=ROOT,
                             env={**os.environ, "PYTHONSAFEPATH": "1", "HF_HUB_OFFLINE": "1"})
        found = re.search(r"^(\d+)(?:/\d+)? tests? collected", run.stdout, re.MULTILINE)
        assert found, run.stdout[-2000:] + run.stderr[-2000:]
        selected = int(found[1])
    assert abs(selected - count) <= TOLERANCE * selected, (
        f"README.md says scripts/test runs {count} tests; it selects {selected}: run it (beside a busy loop per "
        "core) and write the count and time it reports")
