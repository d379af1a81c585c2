"""Run-time helpers that compiled guards call instead of Python's own operators.

A compiled guard never touches a Python attribute, never calls a method of a value and
never uses a builtin: every attribute access, subscript, ordering comparison, arithmetic
operation and function call in the author's expression is rewritten into a call of one of
the functions below. That is where the guard language's semantics live:

* ``null`` (``None``) propagates: an ordering comparison or arithmetic with ``null`` is
  ``null``, and so is a function applied to ``null``. ``null`` is falsy, so a guard that
  touches a missing key is simply false.
* Values are JSON-like. Numbers are ``int``/``float`` but **not** ``bool``: ``true + 1`` and
  ``true < 2`` are type errors, because a flag used as a number is almost always a mistake
  in a workflow. (``==`` keeps Python's meaning, so ``true == 1`` is true.)
* A type error raises :class:`GuardTypeError`; :meth:`Guard.evaluate` turns it into a false
  result carrying the message. Nothing here mutates its arguments.
* Memory and time stay bounded: no repetition (``*`` is numeric only), integer products are
  capped, and string conversions are capped.
* Work is metered: each evaluation may walk at most :data:`WORK_LIMIT` list items and
  mapping entries in all (the cost model is in ``docs/workflows.md``, "Guard expressions").
  The helpers that walk a value whose size the expression does not bound - ``in`` on a
  list, ``min``/``max`` of a list, ``startswith``/``endswith`` with a list of
  alternatives, ``+`` of two lists, and ``==``/``!=``/``is`` between two lists or
  mappings - have a metered twin (``*_m``) taking the evaluation's meter, a one-item list
  holding what is left; the compiler calls the twin only where neither operand is
  bounded (a scalar, or a literal), so a typical guard never touches a meter. Running out
  raises :class:`GuardWorkLimit` *before* the walk, so an evaluation stays short.

These functions are hot (a guard runs at every turn boundary), so each starts with a fast
path on exact types and only falls back to ``isinstance`` checks for subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

__all__ = ["HELPERS", "WORK_LIMIT", "GuardTypeError", "GuardWorkLimit"]

#: Largest integer (in bits) a product may have. Multiplication is the only operation whose
#: result can grow much faster than the expression, so it is the one that is capped.
MAX_INT_BITS = 10_000
#: Longest string or list ``+`` may build.
MAX_CONCAT = 1_000_000
#: Longest string ``int()``/``float()`` will parse; real numbers in a state are short.
MAX_NUMBER_STRING = 100
#: ``round(x, n)`` with a huge negative ``n`` makes CPython compute ``10 ** -n``.
MAX_ROUND_DIGITS = 100


class GuardTypeError(Exception):
    """A value of the wrong type reached an operator or function at run time.

    Internal: :meth:`Guard.evaluate` catches it and reports the message in
    :class:`GuardResult.error`; it never reaches the host.
    """


#: Most list items and mapping entries one evaluation of a guard may walk, in all.
WORK_LIMIT = 1_000_000


class GuardWorkLimit(GuardTypeError):
    """An evaluation would walk more than :data:`WORK_LIMIT` items: the guard is false
    (reported like a type error), and the walk never starts."""


#: An evaluation's meter: ``[items left]``, then (once ``min``/``max`` ran on a list) the
#: evaluation's memo of their results.
Meter = list[Any]


def _charge(meter: Meter, items: int) -> None:
    """Take ``items`` from the evaluation's ``meter``, or raise :class:`GuardWorkLimit`."""
    left = meter[0] - items
    if left < 0:
        raise GuardWorkLimit(
            f"guard exceeded its work limit ({WORK_LIMIT:,} list items or mapping entries "
            "walked in one evaluation)"
        )
    meter[0] = left


def _tname(value: Any) -> str:
    """The name an author sees for a value's type (``null`` rather than ``NoneType``)."""
    if value is None:
        return "null"
    return type(value).__name__


def _is_num(value: Any) -> bool:
    """True for ``int``/``float`` (and subclasses) but not ``bool``."""
    t = type(value)
    if t is int or t is float:
        return True
    return t is not bool and isinstance(value, int | float)


def _is_str(value: Any) -> bool:
    return type(value) is str or isinstance(value, str)


def _is_seq(value: Any) -> bool:
    """Lists (and tuples, which a host may put in its state) - never strings."""
    t = type(value)
    return t is list or t is tuple or isinstance(value, list | tuple)


def _binary_type_error(op: str, a: Any, b: Any) -> NoReturn:
    raise GuardTypeError(f"'{op}' not supported between '{_tname(a)}' and '{_tname(b)}'")


# --- access -----------------------------------------------------------------------------


def get(obj: Any, key: str) -> Any:
    """``obj.key``: key lookup on a mapping, ``null`` on anything else.

    Attribute syntax never reaches a Python attribute; that is what makes ``state.x.__class__``
    style walks impossible even if the compile-time ``_`` check were bypassed.
    """
    if type(obj) is dict:
        return obj.get(key)
    if isinstance(obj, Mapping):
        return obj.get(key)
    return None


def index(obj: Any, key: Any) -> Any:
    """``obj[key]``: a string key on a mapping, an integer index on a list or string.

    Anything else - a missing key, an index out of range, a key of the wrong type, a
    subscript of ``null`` - is ``null``, never an error: guards are written against data
    that may not be there yet.
    """
    if type(key) is str or (isinstance(key, str)):
        if isinstance(obj, Mapping):
            return obj.get(key)
        return None
    if _is_num(key) and isinstance(key, int) and (_is_seq(obj) or _is_str(obj)):
        n = len(obj)
        if -n <= key < n:
            return obj[key]
    return None


def visit(visits: Any, key: Any) -> Any:
    """``visits.name`` / ``visits[name]``: times a phase was entered, 0 when never."""
    if not _is_str(key):
        return None
    if isinstance(visits, Mapping):
        count = visits.get(key)
        return 0 if count is None else count
    return 0


# --- comparisons ------------------------------------------------------------------------


def _order_slow(op: str, a: Any, b: Any) -> bool:
    """Decide whether ``a op b`` is a legal ordering; False means 'return null'."""
    if a is None or b is None:
        return False
    if (_is_num(a) and _is_num(b)) or (_is_str(a) and _is_str(b)):
        return True
    _binary_type_error(op, a, b)


def lt(a: Any, b: Any) -> Any:
    """``a < b`` for two numbers or two strings; ``null`` if either is ``null``."""
    ta, tb = type(a), type(b)
    if ((ta is int or ta is float) and (tb is int or tb is float)) or (ta is str and tb is str):
        return a < b
    return a < b if _order_slow("<", a, b) else None


def le(a: Any, b: Any) -> Any:
    """``a <= b``; see :func:`lt`."""
    ta, tb = type(a), type(b)
    if ((ta is int or ta is float) and (tb is int or tb is float)) or (ta is str and tb is str):
        return a <= b
    return a <= b if _order_slow("<=", a, b) else None


def gt(a: Any, b: Any) -> Any:
    """``a > b``; see :func:`lt`."""
    ta, tb = type(a), type(b)
    if ((ta is int or ta is float) and (tb is int or tb is float)) or (ta is str and tb is str):
        return a > b
    return a > b if _order_slow(">", a, b) else None


def ge(a: Any, b: Any) -> Any:
    """``a >= b``; see :func:`lt`."""
    ta, tb = type(a), type(b)
    if ((ta is int or ta is float) and (tb is int or tb is float)) or (ta is str and tb is str):
        return a >= b
    return a >= b if _order_slow(">=", a, b) else None


def is_(a: Any, b: Any) -> bool:
    """``a is b``: identity for ``null``/``true``/``false``, "same type and equal" otherwise.

    Python's ``is`` on numbers and strings depends on interning, which would make a guard's
    result depend on the interpreter; this definition is deterministic and agrees with
    Python wherever Python's answer is reliable.
    """
    return a is b or (type(a) is type(b) and bool(a == b))


def is_not(a: Any, b: Any) -> bool:
    """``a is not b``; see :func:`is_`."""
    return not is_(a, b)


def in_(a: Any, b: Any) -> Any:
    """``a in b``: substring, list membership or mapping key; ``null`` container is ``null``."""
    if b is None:
        return None
    if _is_str(b):
        if _is_str(a):
            return a in b
        if a is None:
            return None
        raise GuardTypeError(f"'in <str>' requires a str on the left, not '{_tname(a)}'")
    if _is_seq(b):
        return a in b
    if isinstance(b, Mapping):
        return _is_str(a) and a in b
    raise GuardTypeError(f"'in' needs a str, list or mapping on the right, not '{_tname(b)}'")


def not_in(a: Any, b: Any) -> Any:
    """``a not in b``; ``null`` stays ``null``."""
    r = in_(a, b)
    return None if r is None else not r


# --- arithmetic -------------------------------------------------------------------------


def add(a: Any, b: Any) -> Any:
    """``a + b``: numbers add, strings and lists concatenate (bounded by their sizes)."""
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):
        return a + b
    if a is None or b is None:
        return None
    if _is_num(a) and _is_num(b):
        return a + b
    if _is_str(a) and _is_str(b):
        _check_concat(a, b)
        return str(a) + str(b)
    if _is_seq(a) and _is_seq(b):
        _check_concat(a, b)
        return [*a, *b]
    _binary_type_error("+", a, b)


def _check_concat(a: Any, b: Any) -> None:
    """Cap concatenation: 50 chained ``+`` of a large state value would copy it 50 times."""
    if len(a) + len(b) > MAX_CONCAT:
        raise GuardTypeError(f"'+' result too long (over {MAX_CONCAT:,} items or characters)")


def _numeric(op: str, a: Any, b: Any) -> bool:
    """Common check of ``- * / // %``: False means 'return null'."""
    if a is None or b is None:
        return False
    if _is_num(a) and _is_num(b):
        return True
    _binary_type_error(op, a, b)


def sub(a: Any, b: Any) -> Any:
    """``a - b`` on numbers."""
    return a - b if _numeric("-", a, b) else None


def mul(a: Any, b: Any) -> Any:
    """``a * b`` on numbers only: strings and lists are never repeated (bounded memory)."""
    if not _numeric("*", a, b):
        return None
    if isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > MAX_INT_BITS:
        raise GuardTypeError(f"integer product too large (over {MAX_INT_BITS} bits)")
    return a * b


def truediv(a: Any, b: Any) -> Any:
    """``a / b`` on numbers; division by zero is a run-time error (guard false)."""
    return a / b if _numeric("/", a, b) else None


def floordiv(a: Any, b: Any) -> Any:
    """``a // b`` on numbers."""
    return a // b if _numeric("//", a, b) else None


def mod(a: Any, b: Any) -> Any:
    """``a % b`` on numbers; never string formatting."""
    return a % b if _numeric("%", a, b) else None


def neg(a: Any) -> Any:
    """``-a`` on a number."""
    if a is None:
        return None
    if _is_num(a):
        return -a
    raise GuardTypeError(f"bad operand type for unary -: '{_tname(a)}'")


def pos(a: Any) -> Any:
    """``+a`` on a number."""
    if a is None:
        return None
    if _is_num(a):
        return +a
    raise GuardTypeError(f"bad operand type for unary +: '{_tname(a)}'")


# --- functions --------------------------------------------------------------------------


def f_len(x: Any) -> Any:
    """``len(x)`` of a string, list or mapping."""
    if x is None:
        return None
    if _is_str(x) or _is_seq(x) or isinstance(x, Mapping):
        return len(x)
    raise GuardTypeError(f"len() of '{_tname(x)}' is not supported")


def _recased(case: Callable[[str], str], x: Any) -> Any:
    """``lower(s)`` or ``upper(s)`` (``case``): a new string; the argument is not touched."""
    if x is None:
        return None
    if _is_str(x):
        return case(x)
    raise GuardTypeError(f"{case.__name__}() needs a str, not '{_tname(x)}'")


def f_lower(x: Any) -> Any:
    return _recased(str.lower, x)


def f_upper(x: Any) -> Any:
    return _recased(str.upper, x)


def _affix(name: str, s: Any, affix: Any) -> tuple[str, str | tuple[str, ...]] | None:
    if s is None or affix is None:
        return None
    if not _is_str(s):
        raise GuardTypeError(f"{name}() needs a str first, not '{_tname(s)}'")
    if _is_str(affix):
        return str(s), str(affix)
    if _is_seq(affix) and all(_is_str(p) for p in affix):
        return str(s), tuple(str(p) for p in affix)
    raise GuardTypeError(f"{name}() needs a str or a list of str second, not '{_tname(affix)}'")


def f_startswith(s: Any, prefix: Any) -> Any:
    """``startswith(s, prefix)``; ``prefix`` may be a list of alternatives."""
    args = _affix("startswith", s, prefix)
    return None if args is None else args[0].startswith(args[1])


def f_endswith(s: Any, suffix: Any) -> Any:
    """``endswith(s, suffix)``; ``suffix`` may be a list of alternatives."""
    args = _affix("endswith", s, suffix)
    return None if args is None else args[0].endswith(args[1])


_NONE_TYPE = type(None)
_NUMBER_TYPES = frozenset({int, float})
_STR_TYPE = frozenset({str})


def _extreme(name: str, args: tuple[Any, ...]) -> Any:
    """Items for ``min``/``max``: ``f(list)`` or ``f(a, b, ...)``; ``null`` if any is null."""
    items: Any = args
    if len(args) == 1:
        items = args[0]
        if items is None:
            return None
        if not _is_seq(items):
            raise GuardTypeError(f"{name}() of one argument needs a list, not '{_tname(items)}'")
    if not items:
        raise GuardTypeError(f"{name}() of an empty list")
    kinds = set(map(type, items))  # at C speed: the common cases need no per-item call
    if _NONE_TYPE in kinds:
        return None
    if kinds <= _NUMBER_TYPES or kinds == _STR_TYPE:
        return items  # min/max read it in place: no copy
    if all(_is_num(v) for v in items) or all(_is_str(v) for v in items):
        return items
    names = sorted({_tname(v) for v in items})
    raise GuardTypeError(f"{name}() needs all numbers or all strings, got {', '.join(names)}")


def f_min(*args: Any) -> Any:
    """``min(list)`` or ``min(a, b, ...)`` of numbers or of strings."""
    items = _extreme("min", args)
    return None if items is None else min(items)


def f_max(*args: Any) -> Any:
    """``max(list)`` or ``max(a, b, ...)`` of numbers or of strings."""
    items = _extreme("max", args)
    return None if items is None else max(items)


def f_abs(x: Any) -> Any:
    """``abs(x)`` of a number."""
    if x is None:
        return None
    if _is_num(x):
        return abs(x)
    raise GuardTypeError(f"abs() needs a number, not '{_tname(x)}'")


def f_round(x: Any, ndigits: Any = None) -> Any:
    """``round(x)`` / ``round(x, n)``; ``n`` is capped because CPython computes ``10**-n``."""
    if x is None:
        return None
    if not _is_num(x):
        raise GuardTypeError(f"round() needs a number, not '{_tname(x)}'")
    if ndigits is None:
        return round(x)
    if not (_is_num(ndigits) and isinstance(ndigits, int)):
        raise GuardTypeError(f"round() digits must be an int, not '{_tname(ndigits)}'")
    if abs(ndigits) > MAX_ROUND_DIGITS:
        raise GuardTypeError(
            f"round() digits must be between -{MAX_ROUND_DIGITS} and {MAX_ROUND_DIGITS}"
        )
    return round(x, ndigits)


def _number_text(name: str, x: Any) -> str:
    text = str(x).strip()
    if len(text) > MAX_NUMBER_STRING:
        raise GuardTypeError(f"{name}() of a string longer than {MAX_NUMBER_STRING} characters")
    return text


def _convert(convert: type[int] | type[float], x: Any) -> Any:
    """``int(x)`` or ``float(x)`` of a number, a bool or a short numeric string: what a
    guard's ``int()`` and ``float()`` convert, each by this one rule."""
    if x is None:
        return None
    if type(x) is bool or _is_num(x):
        return convert(x)
    name = convert.__name__
    if _is_str(x):
        return convert(_number_text(name, x))
    raise GuardTypeError(f"{name}() needs a number or a str, not '{_tname(x)}'")


def f_int(x: Any) -> Any:
    return _convert(int, x)


def f_float(x: Any) -> Any:
    return _convert(float, x)


def f_str(x: Any) -> Any:
    """``str(x)`` of a scalar; lists and mappings are refused (no host ``repr`` is run)."""
    if x is None:
        return None
    if _is_str(x):
        return str(x)
    if type(x) is bool:
        return "True" if x else "False"
    if _is_num(x):
        # int -> str is bounded by CPython's digit limit (ValueError, reported as an error).
        return str(int(x)) if isinstance(x, int) else repr(float(x))
    raise GuardTypeError(f"str() needs a str, number or bool, not '{_tname(x)}'")


# --- metered twins (see the module docstring) ------------------------------------------


def _container(value: Any) -> bool:
    """A list, tuple or mapping: what ``==`` would walk."""
    t = type(value)
    if t is list or t is dict or t is tuple:
        return True
    if t is str or t is int or t is float or t is bool or value is None:
        return False
    return isinstance(value, Mapping | list | tuple)


def _equal(meter: Meter, a: Any, b: Any) -> Any:
    """``a == b``, walking two lists or two mappings item by item at a charge of one per
    item (Python's ``==`` would walk them in C with no way to stop). Same answer as
    ``==``: items are compared identity first, as Python does."""
    ta = type(a)
    if a is b and (ta is list or ta is dict or ta is tuple):
        return True  # what Python answers too: its items compare identity first
    if ta is type(b) and (ta is list or ta is tuple):
        n = len(a)
        if n != len(b):
            return False
        _charge(meter, n)
        if _SCALAR_TYPES.issuperset(map(type, a)):  # C speed: each item compares in O(1)
            return a == b
        return all(x is y or _equal(meter, x, y) for x, y in zip(a, b, strict=True))
    if ta is dict and type(b) is dict:
        n = len(a)
        if n != len(b):
            return False
        _charge(meter, n)
        for key, x in a.items():
            y = b.get(key, _ABSENT)
            if y is _ABSENT or (x is not y and not _equal(meter, x, y)):
                return False
        return True
    if _container(a) and _container(b):  # a host's own containers: charged by their size
        _charge(meter, len(a) + len(b))
    return a == b


_ABSENT: Any = object()
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


def eq_m(meter: Meter, a: Any, b: Any) -> Any:
    """``a == b`` where neither side is bounded."""
    return _equal(meter, a, b)


def ne_m(meter: Meter, a: Any, b: Any) -> Any:
    """``a != b`` where neither side is bounded."""
    return not _equal(meter, a, b)


def is_m(meter: Meter, a: Any, b: Any) -> bool:
    """:func:`is_` where neither side is bounded."""
    return a is b or (type(a) is type(b) and bool(_equal(meter, a, b)))


def is_not_m(meter: Meter, a: Any, b: Any) -> bool:
    """:func:`is_not` where neither side is bounded."""
    return not is_m(meter, a, b)


def in_m(meter: Meter, a: Any, b: Any) -> Any:
    """:func:`in_` on a right side of unbounded size: a list costs its length (and a
    list or mapping on the left is compared item by item, charged)."""
    tb = type(b)
    if tb is list or tb is tuple or _is_seq(b):
        left = meter[0] - len(b)  # _charge, inlined: ``'vip' in state.tags`` is common
        if left < 0:
            _charge(meter, len(b))
        meter[0] = left
        ta = type(a)
        if ta is str or ta is int or ta is float or ta is bool or a is None or not _container(a):
            return a in b  # each item compared in O(1)
        return any(x is a or bool(_equal(meter, x, a)) for x in b)
    return in_(a, b)


def not_in_m(meter: Meter, a: Any, b: Any) -> Any:
    """:func:`not_in` on a right side of unbounded size."""
    r = in_m(meter, a, b)
    return None if r is None else not r


def add_m(meter: Meter, a: Any, b: Any) -> Any:
    """:func:`add` where both sides may be lists: concatenation costs both lengths."""
    if _is_seq(a) and _is_seq(b):
        _charge(meter, len(a) + len(b))
    return add(a, b)


def _extreme_m(meter: Meter, function: Any, args: tuple[Any, ...]) -> Any:
    """``function`` (:func:`f_min` or :func:`f_max`) of one list costs its length, once per
    evaluation: the result is remembered for that list object (an evaluation changes
    nothing, and the memo holds the list, so its identity cannot be reused meanwhile)."""
    if len(args) != 1 or not _is_seq(args[0]):
        return function(*args)
    items = args[0]
    key = (function, id(items))
    memo: dict[Any, tuple[Any, Any]] | None = meter[1] if len(meter) > 1 else None
    if memo is not None:
        hit = memo.get(key)
        if hit is not None and hit[0] is items:
            return hit[1]
    _charge(meter, len(items))
    result = function(items)
    if memo is None:
        memo = {}
        meter.append(memo)
    memo[key] = (items, result)
    return result


def f_min_m(meter: Meter, *args: Any) -> Any:
    """:func:`f_min` of a list: costs its length (once per list and evaluation)."""
    return _extreme_m(meter, f_min, args)


def f_max_m(meter: Meter, *args: Any) -> Any:
    """:func:`f_max` of a list: costs its length (once per list and evaluation)."""
    return _extreme_m(meter, f_max, args)


def f_startswith_m(meter: Meter, s: Any, prefix: Any) -> Any:
    """:func:`f_startswith` with alternatives of unbounded number: costs their number."""
    if _is_seq(prefix):
        _charge(meter, len(prefix))
    return f_startswith(s, prefix)


def f_endswith_m(meter: Meter, s: Any, suffix: Any) -> Any:
    """:func:`f_endswith` with alternatives of unbounded number: costs their number."""
    if _is_seq(suffix):
        _charge(meter, len(suffix))
    return f_endswith(s, suffix)


#: Name in generated code -> helper. These are the only globals a compiled guard sees,
#: together with an empty ``__builtins__``.
HELPERS: dict[str, Any] = {
    "_get": get,
    "_index": index,
    "_visit": visit,
    "_lt": lt,
    "_le": le,
    "_gt": gt,
    "_ge": ge,
    "_is": is_,
    "_is_not": is_not,
    "_in": in_,
    "_not_in": not_in,
    "_add": add,
    "_sub": sub,
    "_mul": mul,
    "_truediv": truediv,
    "_floordiv": floordiv,
    "_mod": mod,
    "_neg": neg,
    "_pos": pos,
    "_f_len": f_len,
    "_f_lower": f_lower,
    "_f_upper": f_upper,
    "_f_startswith": f_startswith,
    "_f_endswith": f_endswith,
    "_f_min": f_min,
    "_f_max": f_max,
    "_f_abs": f_abs,
    "_f_round": f_round,
    "_f_int": f_int,
    "_f_float": f_float,
    "_f_str": f_str,
    "_eq_m": eq_m,
    "_ne_m": ne_m,
    "_is_m": is_m,
    "_is_not_m": is_not_m,
    "_in_m": in_m,
    "_not_in_m": not_in_m,
    "_add_m": add_m,
    "_f_min_m": f_min_m,
    "_f_max_m": f_max_m,
    "_f_startswith_m": f_startswith_m,
    "_f_endswith_m": f_endswith_m,
}
