"""When a guard on time can first become true: a pure reading of its source.

A guard such as ``seconds_in_phase >= 600 and state.acknowledged != true`` can start to
hold with no new message, only because time passed. The session fires such a guard as a
timer (docs/format.md, "Timers"): it needs the moments - seconds in the phase - at which
the guard *can first* become true. :func:`time_moments` reads them from the guard:

- ``seconds_in_phase >= N`` (or ``N <= seconds_in_phase``): at ``N``; ``> N``: just after
  ``N`` (:data:`STRICT` later); ``N`` a number, or arithmetic of numbers (``10 * 60``);
- ``<``, ``<=``: no moment (such a term only stops holding as time passes);
- ``a and b``: the latest moment of the two (both must hold), for each pair of their
  moments; ``a or b``: the moments of either; ``not`` turns a comparison round (and
  ``and``/``or`` by De Morgan's rules);
- a term without ``seconds_in_phase`` adds no moment (it changes only when the state or
  the conversation does, at a boundary the session runs anyway).

Anything else that reads ``seconds_in_phase`` - compared against the state, in
arithmetic (``seconds_in_phase * 2 > x``), ``==``, a function's argument - has no moment
the session can derive: :attr:`TimeTerms.problem` says why (``validate`` warns, PF209).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

#: the context name guards read time in a phase by
SECONDS = "seconds_in_phase"
#: how long after ``N`` a strict ``seconds_in_phase > N`` is taken to hold (one millisecond)
STRICT = 0.001

_RISING = {ast.GtE: 0.0, ast.Gt: STRICT}
_FALLING = (ast.Lt, ast.LtE)
#: each comparison with its sides swapped (``N <= s`` is ``s >= N``), and negated
_SWAPPED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.GtE: ast.LtE,
    ast.Gt: ast.Lt,
    ast.LtE: ast.GtE,
    ast.Lt: ast.Gt,
    ast.Eq: ast.Eq,
    ast.NotEq: ast.NotEq,
}
_NEGATED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Lt: ast.GtE,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_SYMBOL = {ast.GtE: ">=", ast.Gt: ">", ast.LtE: "<=", ast.Lt: "<", ast.Eq: "==", ast.NotEq: "!="}


@dataclass(frozen=True, slots=True)
class TimeTerms:
    """A guard's moments (seconds in the phase, ascending, each once) at which it can
    first become true; ``problem``: why a use of ``seconds_in_phase`` in it has none
    (``""``: every use was read)."""

    moments: tuple[float, ...] = ()
    problem: str = ""


#: a guard that does not read the time in its phase
NO_TIME = TimeTerms()


class _Underivable(Exception):
    """A use of ``seconds_in_phase`` with no moment to derive (its reason)."""


def time_moments(source: str) -> TimeTerms:
    """The moments at which the guard ``source`` (a compiled guard's text) can first
    become true by time alone. Never raises: a source that does not parse has none."""
    if SECONDS not in source:
        return NO_TIME
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return NO_TIME
    try:
        moments = _read(tree.body, negated=False)
    except _Underivable as exc:
        return TimeTerms(problem=str(exc))
    except RecursionError:
        return TimeTerms(problem="the guard is too deep to read")
    if moments is None:
        return NO_TIME
    return TimeTerms(tuple(sorted({m for m in moments if math.isfinite(m)})))


def _read(node: ast.expr, *, negated: bool) -> tuple[float, ...] | None:
    """The moments of ``node`` (of ``not node`` when ``negated``); ``None``: it adds
    none (no time term, or one that only stops holding)."""
    if isinstance(node, ast.BoolOp):
        conjunction = isinstance(node.op, ast.And) != negated  # De Morgan
        parts = [r for r in (_read(v, negated=negated) for v in node.values) if r is not None]
        if not parts:
            return None
        if not conjunction:
            return tuple(m for part in parts for m in part)
        combined = parts[0]
        for part in parts[1:]:
            # (each moment is one of the guard's numbers: deduplicated, they stay few)
            combined = tuple(sorted({max(a, b) for a in combined for b in part}))
        return combined
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _read(node.operand, negated=not negated)
    if isinstance(node, ast.Compare):
        pairs = list(zip([node.left, *node.comparators], node.comparators, strict=False))
        if len(pairs) > 1:  # a chain: each comparison, all of them holding
            joined = ast.BoolOp(
                ast.And(),
                [ast.Compare(a, [op], [b]) for (a, b), op in zip(pairs, node.ops, strict=True)],
            )
            return _read(joined, negated=negated)
        return _compare(node.left, node.ops[0], node.comparators[0], negated)
    if _reads_time(node):
        raise _Underivable(
            f"{_shown(node)} reads {SECONDS} in a way whose moment cannot be derived"
        )
    return None


def _compare(
    left: ast.expr, op: ast.cmpop, right: ast.expr, negated: bool
) -> tuple[float, ...] | None:
    if not (_reads_time(left) or _reads_time(right)):
        return None
    kind: type[ast.cmpop] = type(op)
    if _is_time(right) and not _is_time(left):
        left, right = right, left
        kind = _SWAPPED.get(kind, kind)
    shown = f"{_shown(left)} {_SYMBOL.get(kind, '?')} {_shown(right)}"
    if not _is_time(left):
        raise _Underivable(f"{shown}: {SECONDS} is compared only when it stands alone on one side")
    bound = _number(right)
    if bound is None:
        raise _Underivable(f"{shown}: {SECONDS} is compared with something other than a number")
    if negated:
        kind = _NEGATED.get(kind, kind)
    if kind in _RISING:
        return (bound + _RISING[kind],)
    if kind in _FALLING:
        return None
    raise _Underivable(
        f"{shown}: {SECONDS} compared with == or != holds at no moment "
        "a timer can wait for (use >= or >)"
    )


def _is_time(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == SECONDS


def _reads_time(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == SECONDS for n in ast.walk(node))


def _number(node: ast.expr) -> float | None:
    """A number the expression is, from numbers alone (``600``, ``10 * 60``, ``-1``)."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _number(node.operand)
        if inner is None:
            return None
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        a, b = _number(node.left), _number(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div) and b != 0:
            return a / b
    return None


def _shown(node: ast.expr) -> str:
    """The expression as a message quotes it (a long one cut)."""
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover - a node ast made
        return SECONDS
    return text if len(text) <= 60 else text[:57] + "..."
