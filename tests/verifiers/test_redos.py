"""Regular expressions that read model output must match in linear time.

A verifier reads every completion with regexes in its server's threads, and Python's regex engine holds
the GIL for the whole of one match: one pattern that backtracks exponentially freezes the whole server,
health checks included, for as long as the match runs. The math verifier's plain-math pattern did: 9 s
on the answer ``"0" * 26 + " dollars!"``, over a day on 40 digits, doubling per digit (a ``cohort eval`` on GSM8K once hung on a
math server that answered nothing, likely this). These tests keep the whole class out:

- a static scan with regexploit of every regex literal in the source folders and of every compiled
  pattern that the modules build at import (concatenated patterns the literal scan cannot see): no
  sequence of quantifiers that compete for the same characters (cubic or worse);
- the inputs that froze the fixed patterns, timed against a harmless text of the same length;
- long runs of one character (blanks, newlines, digits, dollars, brackets...) in every place of a
  completion, through the math extraction and the steps parser: as fast as a harmless text (the scan
  above cannot see quadratic matching, nor Python loops that are);
- each fixed pattern still matches what it matched before (its documented examples).

The end-to-end check (a real ``cohort serve math`` answering those completions in time and staying
SERVING) is in tests/verifiers/test_math_pathological.py.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import time
import warnings
from pathlib import Path

import pytest
from regexploit.ast.sre import SreOpParser
from regexploit.languages.python_node_visitor import PythonNodeVisitor
from regexploit.redos import find

from cohort.verifiers import steps
from cohort.verifiers.judge import parse
from cohort.verifiers.math import extract, normalize, structures

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ["cli", "conformance", "integrations", "rpc", "sandbox", "tools", "trainer", "verifiers"]
"""The folders of the installed package (tests, bench and scripts never read model output in a server)."""
PACKAGES = [f"cohort.{name}" for name in SOURCE]


def _backtracking(pattern: str, flags: int) -> list[str]:
    try:
        parsed = SreOpParser().parse_sre(pattern, flags)
    except re.error:
        return []  # a string that is not a regex (the literal scan sees every string passed to re.*)
    return [f"{r.starriness}-star: {r.example()[:80]}" for r in find(parsed) if r.starriness > 2]


def _literals() -> list[tuple[str, int, str, int]]:
    found = []
    for folder in SOURCE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            visitor = PythonNodeVisitor()
            visitor.visit(ast.parse(path.read_bytes()))
            found += [(str(path.relative_to(ROOT)), p.lineno, p.pattern, p.flags) for p in visitor.patterns]
    return found


def _compiled() -> dict[str, tuple[str, int]]:
    """Every ``re.Pattern`` a module of the package holds at import (alone or in a tuple/list), by pattern."""
    found: dict[str, tuple[str, int]] = {}
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if info.name.endswith(".__main__"):
                continue  # running it is running the CLI
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # an optional dependency (vLLM, the judge's HTTP client) not installed here
                continue
            for attr, value in vars(module).items():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(item, re.Pattern):
                        found.setdefault(item.pattern, (f"{info.name}.{attr}", item.flags))
    return found


def test_the_scans_see_the_patterns_that_read_model_output():
    literals = {p for _, _, p, _ in _literals()}
    compiled = _compiled()
    assert extract._PLAIN_MATH.pattern in literals and extract._CHOICE_LABEL.pattern in compiled
    assert steps._RESULT_RE.pattern in compiled and normalize._UNIT_TEXT.pattern in compiled  # built by concatenation
    assert len(literals) > 100 and len(compiled) > 80


def test_no_regex_in_the_package_backtracks_polynomially_or_worse():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # regexploit parses some patterns with sre's deprecated spellings
        bad = [(f"{path}:{line}", pattern[:100], why) for path, line, pattern, flags in _literals()
               for why in _backtracking(pattern, flags)]
        bad += [(where, pattern[:100], why) for pattern, (where, flags) in _compiled().items()
                for why in _backtracking(pattern, flags)]
    assert not bad, "regexes whose quantifiers compete for the same characters (see the module docstring):\n" + \
        "\n".join(map(str, bad))


HOSTILE = [  # (what, call, hostile text, harmless text of the same length); each froze a pattern before
    ("math: a long digit run", extract.extract_answer,
     "The answer is " + "0" * 40 + " dollars!", "The answer is " + "0 " * 20 + " dollars!"),
    ("math: a choice label then blanks", extract.extract_answer,
     "The answer is \\text{A)}" + " " * 3000 + "$$", "The answer is \\text{A)}" + " x" * 1500 + "$$"),
    ("steps: blanks after '='", steps._steps_of, "3 + 4 =" + " " * 3000 + "x", "3 + 4 =" + " x" * 1500 + "x"),
    ("steps: blanks after '####'", steps.final_number, "#### " + " \t" * 1500 + "x", "#### " + " x" * 1500 + "x"),
    ("judge: blanks after 'score'", parse._SCORE_RE.findall, "score" + " " * 3000 + "x", "score" + " x" * 1500 + "x"),
    ("math: a set builder's blanks", structures._SET_BUILDER.match, "\\{x|" + " " * 3000, "\\{x|" + " x" * 1500),
    ("math: a unit's blanks", normalize._UNIT_TEXT.match, "m" + " " * 3000 + "0", "m" + " x" * 1500 + "0"),
]


@pytest.mark.parametrize("what, call, hostile, harmless", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_inputs_that_froze_a_pattern_take_about_as_long_as_harmless_ones(what, call, hostile, harmless, slowdown):
    def timed(text: str) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            call(text)
            best = min(best, time.perf_counter() - t0)
        return best

    base, took = timed(harmless), timed(hostile)
    # Before the fix each took seconds to days (cubic to exponential); linear matching takes about as long
    # as the harmless text. The bound leaves 50x for noise, plus 0.2 s scaled by how loaded the machine is.
    assert took <= 50 * base + 0.2 * slowdown(), f"{what}: {took:.3f} s against {base:.5f} s for a harmless text"


def test_the_fixed_patterns_match_what_they_matched_before():
    assert extract._PLAIN_MATH.match("2 * sqrt(3) + 1.5 = x") and not extract._PLAIN_MATH.match("5 dollars")
    assert extract._PLAIN_MATH.match("sin(pi/2)") and not extract._PLAIN_MATH.match("1" * 40 + "%")
    for label in ["(A) $x^2$", "B. $5$ .", "C: $\\frac{1}{2}$  ", "\\text{(D)} $7$", "\\textbf{E)} 12 .", "\\text{A)} $3"]:
        assert extract._CHOICE_LABEL.match(label), label
    assert not extract._CHOICE_LABEL.match("(A) 5") and not extract._CHOICE_LABEL.match("\\text{A)} $$")
    assert structures.set_builder("\\{x \\mid  x > 2 \\}") == "x > 2"
    assert structures.set_builder("\\{x | y > 2\\}") == "\\{x | y > 2\\}"  # the variable is not in the body
    m = steps._RESULT_RE.match("= - $1,234.5 and", 1)
    assert m and m.group(1) == "-" and m.group(2) == "1,234.5"
    m = steps._RESULT_RE.match("=  €12", 1)
    assert m and not m.group(1) and m.group(2) == "12"
    m = normalize._UNIT_TEXT.match(" km / h ^{ 2 } ")
    assert m and m.groups() == ("km", "/", "h", "2")
    assert normalize._UNIT_TEXT.match("square meters") and not normalize._UNIT_TEXT.match("m ^ {x}")
    assert parse.parse_score("Score: ** 7 / 10", 10) == (0.7, "Score: ** 7 / 10")
    assert parse.parse_score("rating = 3", 5)[0] == 0.6


FILLERS = [" ", "\n", "\t", "7", "$", "\\", "(", "{", "a", ",", "=", "#", "*", ".", "-", " 1", "1 ", "x=", "1+", ", "]
PLACES = ["The answer is {F} 5.", "So the answer is 5{F}", "{F}The answer is 5", "\\boxed{{5{F}}}", "Final answer: {F}",
          "#### {F}", "3 + 4 = {F}7", "The answer is $5{F}$"]
LONG = 16_000
"""Characters of filler: a quadratic pass takes seconds on it, a linear one milliseconds."""


def test_long_runs_of_one_character_anywhere_cost_what_a_harmless_text_costs(slowdown):
    from cohort.verifiers.base import Rollout
    from cohort.verifiers.math.compare import DEFAULT_POLICY, cheap_leaf, compare
    from cohort.verifiers.math.verifier import _extract
    from fractions import Fraction

    def score(text: str) -> float:
        t0 = time.perf_counter()
        ex = _extract(text)
        try:
            compare("5", ex.answers, cheap_leaf, DEFAULT_POLICY, ex.kind == "forms")
        except Exception:  # NeedSympy, OverLimits: the cheap pass is what runs in the server's threads
            pass
        steps.score_rollout(Rollout(0, text), Fraction(5), frozenset({Fraction(3), Fraction(4)}))
        return time.perf_counter() - t0

    harmless = min(score(place.replace("{F}", "the cat sat on the mat. " * (LONG // 24))) for place in PLACES)
    slow = []
    for filler in FILLERS:
        for place in PLACES:
            text = place.replace("{F}", filler * (LONG // len(filler)))
            took = score(text)
            if took > 50 * harmless:  # timed again (best of 3) before it counts: a busy machine may preempt one call
                took = min(took, score(text), score(text))
                if took > 50 * harmless + 0.2 * slowdown():  # the load sampled only when needed
                    slow.append((repr(filler), place, round(took, 3)))
    assert not slow, f"slower than 50 x {harmless:.4f} s (a harmless text of the same length): {slow}"


OTHER_FILLERS = [" ", "\n", "7", "<", "`", "```", "```python\n", "<tool_call>", "<think>", "<answer>", "score", "\\boxed{", "{\""]
OTHER_PLACES = ["The answer is {F} 5.", "```python\n{F}\n```", "<think>{F}</think><answer>5</answer>", "Score: {F} 7"]
OTHER_LONG = 64_000
"""These parsers are cheaper per character than math extraction: a longer text shows a quadratic one."""


def test_the_other_parsers_of_model_output_are_linear_too(slowdown):
    """The same check for arith, format, code extraction, the judge's reply and tool calls (a lazy
    ``<tool_call>(.*?)</tool_call>`` search took 26 s on 256 KB of openers without a closer)."""
    from cohort.tools.calls import find_call
    from cohort.verifiers import format as fmt
    from cohort.verifiers.arith import first_int, last_int
    from cohort.verifiers.code.extract import extract_code

    rules = fmt.FormatRules()
    parsers = {"arith": lambda t: (first_int(t), last_int(t)), "format": lambda t: fmt.check(t, rules),
               "code": extract_code, "tool_call": lambda t: find_call(t, "tool_call"),
               "fenced": lambda t: find_call(t, "fenced")}

    def judge(text: str) -> None:
        for parse_reply in (lambda t: parse.parse_score(t, 10), parse.parse_pair):
            try:
                parse_reply(text)
            except parse.Unparseable:
                pass

    parsers["judge"] = judge

    def timed(call, text: str) -> float:
        t0 = time.perf_counter()
        call(text)
        return time.perf_counter() - t0

    slow = []
    for name, call in parsers.items():
        harmless = min(timed(call, place.replace("{F}", "the cat sat on the mat. " * (OTHER_LONG // 24))) for place in OTHER_PLACES)
        for filler in OTHER_FILLERS:
            for place in OTHER_PLACES:
                text = place.replace("{F}", filler * (OTHER_LONG // len(filler)))
                took = timed(call, text)
                if took > 50 * harmless + 0.01:  # timed again (best of 3) before it counts, as above
                    took = min(took, timed(call, text), timed(call, text))
                    if took > 50 * harmless + 0.01 and took > 50 * harmless + 0.2 * slowdown():
                        slow.append((name, repr(filler), place, round(took, 3), f"harmless {harmless:.4f}"))
    assert not slow, slow
