"""The limits every template render stays within, and the one budget that enforces them.

A workflow's templates are written by its author but rendered inside a host's turn, so a
template must not be able to hang or exhaust the host: every value a template produces is
bounded in size, and every render is bounded in loop iterations, calls and total work. The
numbers are far above anything an instructions text or a navigation block needs (they are
documented in docs/validation.md, "Template limits"), so an ordinary template never meets
them; a hostile one meets them within milliseconds.

Each check runs *before* the costly operation where the cost can be predicted (a string
repeated ``n`` times, a width, a join) and right after it otherwise, so no operation ever
allocates much more than one limit's worth of memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError

#: The longest text one render may produce (characters).
MAX_OUTPUT = 65_536
#: The largest value a template may produce: characters of a string, items of a list or
#: mapping.
MAX_VALUE = 65_536
#: Loop iterations per render, all loops (nested and recursive) counted together; also the
#: longest ``range``.
MAX_ITERATIONS = 10_000
#: Calls (macros, ``caller()``, recursive ``loop()``, methods, ``range``) per render.
MAX_CALLS = 10_000
#: How deeply calls may nest (macro recursion, recursive loops).
MAX_CALL_DEPTH = 32
#: Work per render: characters produced or scanned, plus :data:`ITEM_WORK` for each item
#: a filter produces or walks in Python (sorting, grouping, mapping, summing).
MAX_WORK = 1_048_576
#: What one list item costs against :data:`MAX_WORK`: a Python step per item costs about
#: as much as scanning eight characters in C.
ITEM_WORK = 8
#: How deeply a template's text may nest (blocks and expressions together), and how many
#: ``for`` loops inside one another: deeper templates cannot be turned into Python code.
MAX_NESTING = 50
MAX_LOOP_NESTING = 16
#: The largest integer a template may produce, in bits (about 4,200 decimal digits, within
#: what Python can still print).
MAX_INT_BITS = 14_000


class TemplateLimitError(SecurityError):
    """A render reached one of the limits above (or met a value it may not print).

    A ``SecurityError`` so that Jinja never mistakes it for a missing attribute or key and
    silently turns it into an undefined value.
    """


class Budget:
    """What one render has spent so far (one instance per render, see the sandbox)."""

    __slots__ = ("calls", "depth", "iterations", "work")

    def __init__(self) -> None:
        self.iterations = 0
        self.calls = 0
        self.depth = 0
        self.work = 0

    def iterate(self) -> None:
        self.iterations += 1
        if self.iterations > MAX_ITERATIONS:
            raise TemplateLimitError(f"loops ran more than {MAX_ITERATIONS:,} iterations")

    def spend(self, amount: int) -> None:
        self.work += amount
        if self.work > MAX_WORK:
            raise TemplateLimitError(
                f"the render did more than {MAX_WORK:,} units of work (characters and items) "
                "in all"
            )

    def enter_call(self) -> None:
        self.calls += 1
        if self.calls > MAX_CALLS:
            raise TemplateLimitError(f"more than {MAX_CALLS:,} calls")
        self.depth += 1
        if self.depth > MAX_CALL_DEPTH:
            self.depth -= 1
            raise TemplateLimitError(f"calls nested more than {MAX_CALL_DEPTH} deep")

    def leave_call(self) -> None:
        self.depth -= 1


def require_size(size: int, what: str = "a value") -> None:
    """Refuse, before it is built, a value of ``size`` characters or items."""
    if size > MAX_VALUE:
        raise TemplateLimitError(f"{what} would be larger than {MAX_VALUE:,} characters or items")


def require_width(width: Any, what: str) -> None:
    """Refuse a width, count or length argument above :data:`MAX_VALUE`."""
    if isinstance(width, int) and not isinstance(width, bool) and width > MAX_VALUE:
        raise TemplateLimitError(f"{what} {width:,} is larger than {MAX_VALUE:,}")
    if isinstance(width, str):
        require_size(len(width), what)


def size_of(value: Any) -> int:
    """The size a limit applies to: characters of a string, items of a container, else 0."""
    if isinstance(value, str | list | tuple | dict | bytes | range):
        return len(value)
    return 0


def work_of(value: Any) -> int:
    """What producing or walking ``value`` costs against :data:`MAX_WORK`."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list | tuple | dict | range):
        return ITEM_WORK * len(value)
    return 0


def charge(budget: Budget, value: Any) -> Any:
    """Check a value just produced against :data:`MAX_VALUE`, charge it, and return it."""
    if type(value) is str:  # the common case first: this runs for every filter and call
        size = len(value)
        if size > MAX_VALUE:
            require_size(size)
        budget.work += size
        if budget.work > MAX_WORK:
            budget.spend(0)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"a number would be larger than {MAX_INT_BITS:,} bits")
        return value
    size = size_of(value)
    if size:
        require_size(size)
        budget.spend(work_of(value))
    return value


# --- numbers ---------------------------------------------------------------------------

def _bits(value: Any) -> int:
    return abs(value).bit_length() if isinstance(value, int) else 0


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``left operator right`` before computing it when its result would be too big."""
    if operator == "*":
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(count, int):
                require_size(len(seq) * max(count, 0), "a repetition")
                return
        if (isinstance(left, int) and isinstance(right, int)
                and _bits(left) + _bits(right) > MAX_INT_BITS):
            raise TemplateLimitError(f"a product would be larger than {MAX_INT_BITS:,} bits")
    elif operator == "**":
        if (isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
                and (right > MAX_INT_BITS or _bits(left) * right > MAX_INT_BITS)):
            raise TemplateLimitError(f"a power would be larger than {MAX_INT_BITS:,} bits")
    elif operator == "+":
        if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            require_size(len(left) + len(right))
    elif operator == "%" and isinstance(left, str):
        check_percent_format(left, right)


# --- formats ---------------------------------------------------------------------------

_DIGITS = re.compile(r"\d+")
#: One printf-style conversion: flags, width, precision.
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def check_format_spec(spec: str) -> None:
    """Refuse a ``str.format`` spec whose width or precision is above :data:`MAX_VALUE`."""
    for digits in _DIGITS.findall(spec):
        if len(digits) > 6 or int(digits) > MAX_VALUE:
            raise TemplateLimitError(f"a format width or precision is larger than {MAX_VALUE:,}")


def check_percent_format(fmt: str, args: Any) -> None:
    """Refuse a printf-style format (``%`` or the ``format`` filter) with a huge width."""
    star = False
    for match in _PERCENT.finditer(fmt):
        for part in match.groups():
            if part == "*":
                star = True
            elif part is not None:
                check_format_spec(part)
    values = args if isinstance(args, tuple | list) else (args,)
    if star:
        for value in values:
            require_width(value, "a '*' width")
    if not _printable(list(values)):
        raise TemplateLimitError("cannot format a function or another non-data value")
    conversions = max(fmt.count("%"), 1)
    require_size(len(fmt) + conversions * estimate_text(args), "a formatted string")


# --- text ------------------------------------------------------------------------------

_SCALARS = (str, int, float, bool, type(None))


def estimate_text(value: Any, limit: int = MAX_VALUE) -> int:
    """An upper-bound estimate of ``len(str(value))`` that stops counting past ``limit``.

    It never builds the text: it walks strings, numbers and containers, so that a list of
    ten thousand references to one long string is refused before ``str()`` would spend
    gigabytes on it.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 4
        elif isinstance(item, list | tuple):
            total += 2 + 2 * len(item)
            stack.extend(item[: limit])
        elif isinstance(item, Mapping):
            total += 2 + 4 * len(item)
            if len(item) <= limit:
                for key, entry in item.items():
                    stack.append(key)
                    stack.append(entry)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 2
        else:
            total += 24
        if total > limit:
            return total
    return total


def _printable(value: Any, depth: int = 0) -> bool:
    """True when ``str(value)`` shows only data: no Python object, address or class name."""
    if isinstance(value, (*_SCALARS, jinja2.Undefined)):
        return True
    if depth > 64:
        return False
    if isinstance(value, list | tuple):
        return all(_printable(item, depth + 1) for item in value)
    if isinstance(value, Mapping):
        return all(
            _printable(k, depth + 1) and _printable(v, depth + 1) for k, v in value.items()
        )
    return False


def kind_of(value: Any) -> str:
    """A short, internals-free name for what a value is (for error messages)."""
    if callable(value):
        return "function"
    if isinstance(value, Mapping):
        return "mapping"
    if hasattr(value, "__iter__") or hasattr(value, "__next__"):
        return "sequence that is not a list (add '|list')"
    return "value that is not text, a number, a list or a mapping"


def text_of(value: Any, budget: Budget, none: str) -> str:
    """``str(value)`` for data, bounded and charged; anything else is refused.

    ``none`` is how null prints (nothing in output, ``None`` inside a ``~`` concatenation,
    as Jinja always did). Text, numbers, booleans, lists and mappings print as before; a
    function, a macro, a generator or any other Python object is a run-time error, so that
    no repr with an address ever reaches the model.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return none
    if isinstance(value, bool | int | float | jinja2.Undefined):
        return str(value)
    if isinstance(value, list | tuple | Mapping):
        require_size(estimate_text(value), "printing a list or mapping")
        if not _printable(value):
            raise TemplateLimitError("cannot print a list or mapping that holds a function")
        text = str(value if isinstance(value, list | tuple | dict) else dict(value))
        budget.spend(len(text))
        return text
    raise TemplateLimitError(f"cannot print a {kind_of(value)}")
