"""The ``calculator`` tool: exact arithmetic on one expression, written against the tool contract alone.

It proves the contract is general (it imports no sandbox: it never runs code, it evaluates a parsed
expression tree). Integers are exact (Python ints), ``/`` is true division (a float unless exact),
``//`` ``%`` ``**`` and unary minus work as in Python; names, calls, attributes and everything else are
refused. Bounds keep every call short: the expression's length, each power's size (its result at most
``MAX_DIGITS`` digits, judged before computing it) and every intermediate result's digits.

Serve it: ``cohort serve calculator`` (loopback, port 50061 by default).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from cohort import __version__
from cohort.tools.base import ToolOutput, ToolSpec

MAX_LENGTH = 2000
MAX_DIGITS = 4000

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """The expression's own fault: reported to the model."""


def _digits(x: int | float) -> float:
    return 1 if x == 0 or isinstance(x, float) else math.log10(abs(x)) + 1


def _check(x: int | float) -> int | float:
    if isinstance(x, int) and x.bit_length() > MAX_DIGITS * 3.33:
        raise CalculatorError(f"a result has more than {MAX_DIGITS} digits")
    if isinstance(x, float) and not math.isfinite(x):
        raise CalculatorError("a result is not a finite number")
    return x


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if isinstance(right, float) or right < 0:
                return _check(float(left) ** right if left or right > 0 else _fail("0 to a negative power"))
            if _digits(left) * right > MAX_DIGITS + 1:
                raise CalculatorError(f"the power would have more than {MAX_DIGITS} digits")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("a result is too large") from None
    raise CalculatorError(f"not allowed in an expression: {type(node).__name__}"
                          + (f" {node.id!r}" if isinstance(node, ast.Name) else ""))


def _fail(message: str):
    raise CalculatorError(message)


def evaluate(expression: str) -> int | float:
    """The value of ``expression``; raises :class:`CalculatorError` for anything the model got wrong."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"the expression does not parse: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):  # nesting too deep for the parser; NUL bytes
        raise CalculatorError("the expression does not parse") from None
    try:
        return _eval(tree)
    except OverflowError:
        raise CalculatorError("a result is too large") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None


class Calculator:
    spec = ToolSpec(
        name="calculator",
        description="Evaluate one arithmetic expression exactly (+ - * / // % ** and parentheses; "
                    "integers of any size). Returns the value.",
        parameters={"type": "object", "properties": {"expression": {"type": "string"}},
                    "required": ["expression"], "additionalProperties": False},
        max_wall_s=1.0, max_output_bytes=MAX_DIGITS + 16)

    def run(self, arguments: dict[str, Any], session_id: str) -> ToolOutput:
        try:
            value = evaluate(arguments["expression"])
        except CalculatorError as exc:
            return ToolOutput(f"error: {exc}", "bad_expression")
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        return ToolOutput(str(value))


VERSION = f"cohort-calculator {__version__}"
