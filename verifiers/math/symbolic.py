"""SymPy leaf comparison. Runs only inside a worker process (it can be slow; the parent kills it).

Parsing is latex2sympy2_extended's; this module only decides equality of two parsed objects:
numbers with the decimal policy of :mod:`verifiers.math.numbers`, expressions by ``simplify(a - b) == 0``
then by evaluation at random points, equations by proportional ``lhs - rhs``, inequalities by a
positive factor, sets by symmetric difference, matrices entrywise.

Over 400 lines on purpose: every equality rule that runs in the worker process, read in order; the
parse itself is latex2sympy's.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction

import sympy
from latex2sympy2_extended import latex2sympy
from sympy.parsing.sympy_parser import convert_xor, implicit_multiplication_application, parse_expr, standard_transformations
from latex2sympy2_extended.latex2sympy2 import ConversionConfig
from latex2sympy2_extended.math_normalization import NormalizationConfig

from cohort.verifiers.math.numbers import close_decimal, rounded_match
from cohort.verifiers.math.outcome import Outcome
from cohort.verifiers.math.policy import current_policy
from cohort.verifiers.math.syntax import relation_chain

_NORM = NormalizationConfig(basic_latex=True, units=False, malformed_operators=False, nits=False, boxed="none", equations=False)
_CONV = ConversionConfig(interpret_as_mixed_fractions=True, interpret_simple_eq_as_assignment=False, interpret_contains_as_eq=True, lowercase_symbols=False)
_I = sympy.Symbol("i")
_E = sympy.Symbol("e")


def parse(s: str):
    s = s.replace("\\mathrm{e}", "e").replace("\\text{e}", "e")
    if re.search(r"\\(?:sin|cos|tan|cot|sec|csc)", s):  # sin 30^\circ: degrees inside a trig function
        s = re.sub(r"(\d+(?:\.\d+)?)\s*\^\s*\\circ", r"(\1\\cdot\\frac{\\pi}{180})", s)
    s = re.sub(r"\^\s*\\circ", "", s)
    expr = latex2sympy(s, normalization_config=_NORM, conversion_config=_CONV)
    if isinstance(expr, sympy.Basic):
        subs = {}
        # 'i' and 'e' are the constants only when no other variable is around ('3+4i', 'e^2');
        # in 'aei' they are variables.
        if expr.free_symbols and expr.free_symbols <= {_I, _E}:
            subs = {s: sympy.I if s == _I else sympy.E for s in expr.free_symbols}
        if subs:
            expr = expr.xreplace(subs)
    return expr


# A fast path for plain algebra: '\\frac', '\\sqrt', '\\pi', digits, single-letter variables, + - * / ^.
# Braces become parentheses and SymPy's own ``parse_expr`` does the parsing (antlr-based
# latex2sympy costs ~10-100x more per call). Anything else goes to latex2sympy, for both sides.
_FAST_OK = re.compile(r"^(?:[0-9.+\-*/^(){}\[\] ]|(?<![A-Za-z])[A-IK-Za-ik-z](?![A-Za-z])|\\frac|\\sqrt|\\pi|\\cdot|\\times)+$")
_FAST_T = standard_transformations + (implicit_multiplication_application, convert_xor)
_FAST_LOCALS = {"pi": sympy.pi, "sqrt": sympy.sqrt, "root": sympy.root}
# Only what parse_expr's own transformations need: single letters must become Symbols, never SymPy's
# E, I, N, S, O, Q (and 'j' is excluded above: Python reads '3j' as a complex literal).
_FAST_GLOBALS = {name: getattr(sympy, name) for name in ("Integer", "Float", "Rational", "Symbol", "Add", "Mul", "Pow", "Function")}


def fast_string(s: str) -> str | None:
    """Plain algebra in LaTeX -> a SymPy expression string, or None when ``s`` is anything more."""
    if not _FAST_OK.match(s) or "\\sqrt[" in s.replace(" ", "") and "]" not in s:
        return None
    s = re.sub(r"\^\s*([0-9A-Za-z])", r"^(\1)", s)  # x^23 is x^{2}3 in TeX
    s = re.sub(r"\\(frac|sqrt)\s+", r"\\\1", s)
    s = re.sub(r"\}\s+\{", "}{", s)
    for _ in range(60):
        new = re.sub(r"\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))", s)
        new = re.sub(r"\\sqrt\s*\[([^\[\]{}]*)\]\s*\{([^{}]*)\}", r" root((\2),(\1))", new)  # spaced: 'i\\sqrt3' is i*sqrt(3)
        new = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r" sqrt(\1)", new)
        new = re.sub(r"(?<!\\frac)(?<!\\sqrt)(?<![}\]])\{([^{}]*)\}", r"(\1)", new)
        if new == s:
            break
        s = new
    s = s.replace("\\pi", " pi ").replace("\\cdot", "*").replace("\\times", "*")
    if "\\" in s or "{" in s or "}" in s or "[" in s or "]" in s or not s.strip():
        return None
    return s


def _fast_parse(text: str):
    expr = parse_expr(text, transformations=_FAST_T, local_dict=dict(_FAST_LOCALS), global_dict=dict(_FAST_GLOBALS), evaluate=False)
    if not isinstance(expr, sympy.Expr):
        raise ValueError("not an expression")
    return expr


_RELATIONS = {"=": sympy.Eq, "\\ne": sympy.Ne, "<": sympy.Lt, ">": sympy.Gt, "\\le": sympy.Le, "\\ge": sympy.Ge}


def _fast_side(s: str):
    """A plain expression, or one relation 'lhs op rhs' between plain expressions; None otherwise."""
    terms, ops = relation_chain(s)
    if len(ops) > 1 or (ops and ops[0] not in _RELATIONS):
        return None
    texts = [fast_string(t) for t in terms]
    if any(t is None for t in texts):
        return None
    sides = [_with_constants(_fast_parse(t)) for t in texts]
    return _RELATIONS[ops[0]](sides[0], sides[1], evaluate=False) if ops else sides[0]


def parse_pair(gold: str, answer: str):
    """Both sides with the same parser: SymPy's parse_expr for plain algebra, latex2sympy otherwise."""
    try:
        g = _fast_side(gold)
        a = _fast_side(answer) if g is not None else None
    except Exception:  # tokenizer/parse errors: let latex2sympy decide
        return None
    if g is None or a is None:
        return None
    return g, a


def _with_constants(expr):
    if isinstance(expr, sympy.Basic) and expr.free_symbols and expr.free_symbols <= {_I, _E}:
        return expr.xreplace({s: sympy.I if s == _I else sympy.E for s in expr.free_symbols})
    return expr


def _decimals(s: str) -> int | None:
    found = [len(m.group(1)) for m in re.finditer(r"\d\.(\d+)", s)]
    return min(found) if found else None


def _exact_decimals(obj):
    """Decimal literals as the exact rationals they denote (``0.5x`` is ``x/2``): a 15-digit binary Float
    would make ``0.5x + 4`` and ``x/2 + 4`` differ in the 45-digit comparison. Only for expressions with
    variables; constants keep the decimal tolerance policy in :func:`_constants`."""
    if not isinstance(obj, sympy.Basic) or not obj.free_symbols:
        return obj
    return _decimal_literals_exact(obj)


_IRRATIONAL = re.compile(r"\\(?:pi|sqrt|ln|log|sin|cos|tan|exp)(?![a-zA-Z])|(?<![a-zA-Z\\])e\^|\\mathrm\{e\}")
_PLAIN_NUMBER = re.compile(r"^\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)\s*$")


def _plain_decimals(s: str) -> int | None:
    """Digits after the point when ``s`` is one plain number (0 for an integer); None for anything else."""
    if not _PLAIN_NUMBER.match(s):
        return None
    return len(s.strip().split(".")[1]) if "." in s else 0


def _decimal_literals_exact(obj):
    floats = obj.atoms(sympy.Float) if isinstance(obj, sympy.Basic) else ()
    if not floats:
        return obj
    try:
        return obj.xreplace({f: sympy.Rational(str(f)) for f in floats})
    except (TypeError, ValueError):
        return obj


def sympy_leaf_equal(gold: str, answer: str) -> Outcome:
    decimals = [d for d in (_decimals(gold), _decimals(answer)) if d is not None]
    plain = _Plain(_plain_decimals(gold), _plain_decimals(answer), _decimals(gold) is None or bool(_IRRATIONAL.search(gold)))
    fast = parse_pair(gold, answer)
    if fast is not None:
        return objects_equal(_exact_decimals(fast[0]), _exact_decimals(fast[1]), min(decimals) if decimals else None, plain)
    try:
        g = parse(gold)
    except Exception as exc:  # latex2sympy raises plain Exception on syntax errors
        raise GoldUnparseable(f"{gold!r}: {exc}") from None
    try:
        a = parse(answer)
    except Exception as exc:
        return Outcome(False, f"answer does not parse: {str(exc).splitlines()[0][:80]}")
    return objects_equal(_exact_decimals(g), _exact_decimals(a), min(decimals) if decimals else None, plain)


class GoldUnparseable(Exception):
    pass


def self_work(term: str) -> None:
    """The SymPy work a comparison does on one term alone: parse it, evaluate it at 60 digits (at random
    points when it has variables), simplify it. Raises what SymPy raises on the term's own expression
    (MemoryError, RecursionError) and may run past any budget (the parent kills it): that is the point, it
    measures the term. A term that does not parse, or that SymPy cannot evaluate, is no work."""
    try:
        fast = _fast_side(term)
    except (MemoryError, RecursionError):
        raise
    except Exception:
        fast = None
    try:
        expr = fast if fast is not None else parse(term)
    except (MemoryError, RecursionError):
        raise
    except Exception:  # latex2sympy raises plain Exception on syntax errors: nothing to measure
        return
    if isinstance(expr, sympy.core.relational.Relational):
        expr = expr.lhs - expr.rhs
    if not isinstance(expr, sympy.Expr):
        return
    try:
        expr = _exact_decimals(expr)
        if expr.free_symbols:
            rng = random.Random(12345)
            for _ in range(5):
                sympy.N(expr.xreplace({s: sympy.Rational(rng.randint(11, 290), 97) for s in expr.free_symbols}), 60)
        else:
            sympy.N(expr, 60)
        sympy.simplify(expr)
    except (MemoryError, RecursionError):
        raise
    except Exception:  # SymPy internals raise anything; an error here is not a limit of the term
        return


@dataclass(frozen=True)
class _Plain:
    """How the two sides of a constant comparison are written: the digits after the point of a side
    that is one plain number (0: an integer), None for an expression."""

    gold: int | None = None
    answer: int | None = None
    gold_exact: bool = False
    """The gold is an exact value: no decimal literal (``2\\sqrt2``, ``\\frac{1+i}{2}``), or decimals that only
    scale a constant (``2.5\\pi``). A decimal gold without one (``0.71+0.71i``) keeps the decimal policy."""


def objects_equal(g, a, decimals: int | None, plain: _Plain = _Plain()) -> Outcome:
    if g == a:
        return Outcome(True, "sympy structural")
    if isinstance(g, sympy.MatrixBase) or isinstance(a, sympy.MatrixBase) or isinstance(g, sympy.MatrixExpr) or isinstance(a, sympy.MatrixExpr):
        return _matrices(g, a, decimals)
    if isinstance(g, sympy.Set) or isinstance(a, sympy.Set):
        return _sets(g, a)
    if _is_logical(g) or _is_logical(a):  # not isinstance(Boolean): a Symbol is a Boolean too
        return _relations(g, a)
    if isinstance(g, (tuple, list)) or isinstance(a, (tuple, list)):
        return Outcome(False, "tuple vs value")
    if not isinstance(g, sympy.Expr) or not isinstance(a, sympy.Expr):
        return Outcome(False, f"cannot compare {type(g).__name__} with {type(a).__name__}")
    return expressions_equal(g, a, decimals, plain)


def _is_logical(x) -> bool:
    return isinstance(x, (sympy.core.relational.Relational, sympy.And, sympy.Or, sympy.Not, sympy.logic.boolalg.BooleanAtom))


def expressions_equal(g: sympy.Expr, a: sympy.Expr, decimals: int | None, plain: _Plain | None = None) -> Outcome:
    g_syms = {s.name.lower() for s in g.free_symbols}
    a_syms = {s.name.lower() for s in a.free_symbols}
    if g_syms != a_syms:
        trig = (g - a).has(sympy.sin, sympy.cos, sympy.tan, sympy.sec, sympy.csc, sympy.cot, sympy.log, sympy.exp)
        if trig and len(g_syms ^ a_syms) == len(g_syms | a_syms) and sympy.simplify(g - a) == 0:
            return Outcome(True, "simplify(gold - answer) == 0")  # sin^2 x + cos^2 x vs 1
        return Outcome(False, f"different variables {sorted(g_syms)} vs {sorted(a_syms)}")
    if not g.free_symbols:
        return _constants(g, a, decimals, plain)
    numeric = _random_points(g, a)
    if numeric is not None:
        return numeric
    if sympy.simplify(g - a) == 0:
        return Outcome(True, "simplify(gold - answer) == 0")
    return Outcome(False, "not provably equal")


def _constants(g: sympy.Expr, a: sympy.Expr, decimals: int | None, plain: _Plain | None = None) -> Outcome:
    """Two numbers. Exact to 45 digits, else the rounding rules of :mod:`verifiers.math.compare`: a decimal
    gold keeps its precision; a plain decimal answer for an exact gold is judged by the prompt's rounding
    request, else by the decimal policy when the gold is rational, else (an irrational gold) INCORRECT."""
    g, a = _decimal_literals_exact(g), _decimal_literals_exact(a)  # '0.6 - 0.8i' is exactly 3/5 - 4/5 i
    gv, av = sympy.N(g, 60), sympy.N(a, 60)
    if not (gv.is_number and av.is_number):
        return Outcome(False, "not numbers")
    if gv.has(sympy.zoo, sympy.nan) or av.has(sympy.zoo, sympy.nan):
        return Outcome(False, "undefined value")
    if gv.is_infinite or av.is_infinite:
        return Outcome(bool(gv == av), "infinities")
    g_re, g_im = gv.as_real_imag()
    a_re, a_im = av.as_real_imag()
    scale = max(abs(gv), abs(av), 1)
    if abs(gv - av) <= scale * sympy.Float("1e-45", 60):
        return Outcome(True, "equal to 45 significant digits")
    if plain is not None and decimals is not None and plain.gold_exact:
        if plain.answer is None or g_im != 0 or a_im != 0:  # '0.33\\pi' for '\\pi/3', '0.71+0.71i': rounded, not the value
            return Outcome(False, f"values differ: {sympy.N(g, 8)} vs {sympy.N(a, 8)}")
        gold_value, answer_value = Fraction(str(sympy.Float(g_re, 40))), Fraction(str(sympy.Float(a_re, 40)))
        rounding = current_policy().rounding
        if rounding is not None:
            return rounded_match(gold_value, answer_value, plain.answer or None, rounding)
        if g.is_rational:
            return close_decimal(gold_value, answer_value, plain.answer) if plain.answer else Outcome(False, "exact numbers differ")
        return Outcome(False, "a rounded decimal for an exact irrational gold (the prompt asks for no rounding)")
    if plain is not None and decimals is None and plain.answer == 0 and current_policy().rounding is not None and g_im == 0 and a_im == 0:
        # 'to the nearest whole number': an integer answer for an exact gold
        return rounded_match(Fraction(str(sympy.Float(g_re, 40))), Fraction(str(sympy.Float(a_re, 40))), None, current_policy().rounding)
    if decimals is not None:
        ok_re = close_decimal(Fraction(str(sympy.Float(g_re, 40))), Fraction(str(sympy.Float(a_re, 40))), decimals)
        ok_im = close_decimal(Fraction(str(sympy.Float(g_im, 40))), Fraction(str(sympy.Float(a_im, 40))), decimals) if (g_im != 0 or a_im != 0) else Outcome(True, "")
        return Outcome(ok_re.equal and ok_im.equal, ok_re.how)
    return Outcome(False, f"values differ: {sympy.N(g, 8)} vs {sympy.N(a, 8)}")


def _random_points(g: sympy.Expr, a: sympy.Expr) -> Outcome | None:
    """Equal at 5 random positive rational points to 45 digits -> equal; differ at one -> different;
    None when the expressions cannot be evaluated (symbolic sums, undefined functions)."""
    if _unevaluable(g) or _unevaluable(a):
        return None
    symbols = sorted(g.free_symbols | a.free_symbols, key=lambda s: s.name)
    rng = random.Random(12345)
    checked = 0
    for _ in range(8):
        point = {s: sympy.Rational(rng.randint(11, 290), 97) for s in symbols}
        try:
            gv = sympy.N(g.xreplace(point), 60)
            av = sympy.N(a.xreplace(point), 60)
            if not (gv.is_number and av.is_number) or gv.has(sympy.nan, sympy.zoo) or av.has(sympy.nan, sympy.zoo):
                continue
            far = abs(gv - av) > sympy.Float("1e-45", 60) * max(1, abs(gv), abs(av))
        except (TypeError, ValueError, ZeroDivisionError):
            continue
        if far:
            return Outcome(False, "differ at a random point")
        checked += 1
        if checked >= 5:
            if _differ_where_real(g, a, symbols, rng):
                return Outcome(False, "equal for positive values, different for negative ones")
            return Outcome(True, "equal at 5 random points (45 digits)")
    return None


def _differ_where_real(g: sympy.Expr, a: sympy.Expr, symbols, rng: random.Random) -> bool:
    """|x| vs x: also try points with negative coordinates, where both sides are real numbers
    (points where either side is complex, e.g. sqrt(x)sqrt(y) vs sqrt(xy), are skipped)."""
    for k in range(4):
        point = {s: sympy.Rational(rng.randint(11, 290), 97) * (-1 if (k == 0 or (i + k) % 2) else 1) for i, s in enumerate(symbols)}
        try:
            gv = sympy.N(g.xreplace(point), 60)
            av = sympy.N(a.xreplace(point), 60)
            if not (gv.is_number and av.is_number) or gv.has(sympy.nan, sympy.zoo) or av.has(sympy.nan, sympy.zoo):
                continue
            if not (gv.is_real and av.is_real):
                continue
            if abs(gv - av) > sympy.Float("1e-45", 60) * max(1, abs(gv), abs(av)):
                return True
        except (TypeError, ValueError, ZeroDivisionError):
            continue
    return False


def _matrices(g, a, decimals) -> Outcome:
    try:
        gm = sympy.Matrix(g.doit() if hasattr(g, "doit") else g)
        am = sympy.Matrix(a.doit() if hasattr(a, "doit") else a)
    except Exception as exc:  # MatAdd of incompatible shapes etc.
        return Outcome(False, f"not a matrix: {exc}")
    if gm.shape != am.shape:
        return Outcome(False, "matrices of different shape")
    for x, y in zip(gm, am):
        sub = expressions_equal(sympy.sympify(x), sympy.sympify(y), decimals)
        if not sub.equal:
            return Outcome(False, f"matrix entry {x} vs {y}: {sub.how}")
    return Outcome(True, "matrix entries equal")


def _sets(g, a) -> Outcome:
    if not (isinstance(g, sympy.Set) and isinstance(a, sympy.Set)):
        g, a = _as_set(g), _as_set(a)
        if g is None or a is None:
            return Outcome(False, "set vs value")
    if g.symmetric_difference(a) == sympy.EmptySet:
        return Outcome(True, "same set")
    return Outcome(False, "different sets")


def _as_set(x):
    if isinstance(x, sympy.Set):
        return x
    if _is_logical(x) and len(x.free_symbols) == 1:
        try:
            return x.as_set()
        except Exception:  # not solvable as a set of reals
            return None
    return None


def _relations(g, a) -> Outcome:
    if isinstance(g, sympy.Set) or isinstance(a, sympy.Set) or isinstance(g, (sympy.And, sympy.Or)) or isinstance(a, (sympy.And, sympy.Or)):
        return _sets(g, a)
    if not (isinstance(g, sympy.core.relational.Relational) and isinstance(a, sympy.core.relational.Relational)):
        return Outcome(False, "relation vs value")
    g_kind, g_expr = _canonical(g)
    a_kind, a_expr = _canonical(a)
    if g_kind != a_kind:
        return Outcome(False, f"different relations {g.rel_op} vs {a.rel_op}")
    if {s.name.lower() for s in g_expr.free_symbols} != {s.name.lower() for s in a_expr.free_symbols}:
        return Outcome(False, "different variables")
    if a_expr == 0 or g_expr == 0:
        return Outcome(bool(a_expr == g_expr), "trivial relation")
    if sympy.expand(g_expr - a_expr) == 0 or sympy.expand(g_expr + a_expr) == 0:
        ratio = sympy.Integer(1) if sympy.expand(g_expr - a_expr) == 0 else sympy.Integer(-1)
    else:
        ratio = _constant_ratio(g_expr, a_expr)
        if ratio is None:
            ratio = sympy.simplify(g_expr / a_expr)
    if ratio is sympy.zoo or ratio.has(sympy.zoo, sympy.nan) or ratio.free_symbols or not ratio.is_number or ratio == 0:
        return Outcome(False, "relations not proportional")
    if g_kind in ("==", "!="):
        return Outcome(True, "proportional equations")
    return Outcome(bool(ratio > 0), "inequalities with a positive factor" if ratio > 0 else "inequality flipped")


def _unevaluable(e) -> bool:
    from sympy.core.function import AppliedUndef

    return e.has(sympy.Sum, sympy.Product, sympy.Integral, sympy.Derivative, sympy.Limit) or bool(e.atoms(AppliedUndef))


def _constant_ratio(g: sympy.Expr, a: sympy.Expr):
    """g/a when it is the same number at 4 random points; zoo when it is not constant; None if unknown."""
    if _unevaluable(g) or _unevaluable(a):
        return None
    symbols = sorted(g.free_symbols | a.free_symbols, key=lambda s: s.name)
    rng = random.Random(54321)
    ratios = []
    for _ in range(6):
        point = {s: sympy.Rational(rng.randint(11, 290), 97) for s in symbols}
        try:
            gv, av = sympy.N(g.xreplace(point), 60), sympy.N(a.xreplace(point), 60)
        except (TypeError, ValueError, ZeroDivisionError):
            continue
        if not (gv.is_number and av.is_number) or av == 0 or gv.has(sympy.nan, sympy.zoo) or av.has(sympy.nan, sympy.zoo):
            continue
        ratios.append(gv / av)
        if len(ratios) >= 4:
            break
    if len(ratios) < 4:
        return None
    first = ratios[0]
    if all(abs(r - first) <= sympy.Float("1e-40", 60) * max(1, abs(first)) for r in ratios):
        return sympy.nsimplify(first, rational=True) if abs(first) > sympy.Float("1e-40", 60) else sympy.Integer(0)
    return sympy.zoo


def _canonical(rel):
    """(kind, expr) with expr (op) 0 and op in ==, !=, >, >=."""
    op = rel.rel_op
    expr = rel.lhs - rel.rhs
    if op in ("<", "<="):
        return {"<": ">", "<=": ">="}[op], -expr
    return op, expr
