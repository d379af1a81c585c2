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
from collections.abc import Iterable, Mapping
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
#: Calls (macros, ``caller()``, recursive ``loop()``, methods, ``range``) per render: a
#: call through the sandbox costs microseconds.
MAX_CALLS = 5_000
#: How deeply calls may nest (macro recursion, recursive loops).
MAX_CALL_DEPTH = 32
#: Work per render: characters produced or scanned, plus :data:`ITEM_WORK` for each item
#: a filter produces or walks in Python (sorting, grouping, mapping, summing, comparing),
#: plus the steps below (:data:`NODE_WORK`, :data:`OPERATION_WORK`, :data:`CALL_WORK`), so
#: that the work a render may do is also a bound on its time.
MAX_WORK = 1_048_576
#: What one list item costs against :data:`MAX_WORK`: a Python step per item costs about
#: as much as scanning eight characters in C.
ITEM_WORK = 8
#: What running one template node costs, each time a loop iteration or a macro call runs
#: the body holding it.
NODE_WORK = 4
#: What one checked operator costs (``*``, ``**``, ``+``, ``%``, ``~``, a comparison of
#: text or containers), besides what it builds or walks.
OPERATION_WORK = 32
#: What one call costs (a filter, a test that compares, a macro, a method, ``caller()``),
#: besides what it does.
CALL_WORK = 64
#: How deeply a template's text may nest (blocks and expressions together), and how many
#: ``for`` loops inside one another: deeper templates cannot be turned into Python code.
MAX_NESTING = 50
MAX_LOOP_NESTING = 16
#: The largest integer a template may produce, in bits (about 4,200 decimal digits, within
#: what Python can still print).
MAX_INT_BITS = 14_000
#: The largest precision ``round`` takes, either way: a float has no digits beyond it, and
#: a larger one only costs time (``round(x, -10**7)`` computes ``10**10**7``).
MAX_ROUND_DIGITS = 400
#: The longest template source (characters): no longer than the longest output, since a
#: template's text is part of its output.
MAX_SOURCE = 65_536
#: The most tokens (names, numbers, operators, tags; a run of plain text is one) a template
#: may have: parsing, checking and generating code cost time per token.
MAX_TOKENS = 2_048


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
                f"the render did more than {MAX_WORK:,} units of work in all (characters, "
                "items, steps and calls)"
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
        percent_args(left, right)


# --- formats ---------------------------------------------------------------------------

_DIGITS = re.compile(r"\d+")
#: One printf-style conversion: flags, width, precision.
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def check_format_spec(spec: str) -> None:
    """Refuse a ``str.format`` spec whose width or precision is above :data:`MAX_VALUE`."""
    for digits in _DIGITS.findall(spec):
        if len(digits) > 6 or int(digits) > MAX_VALUE:
            raise TemplateLimitError(f"a format width or precision is larger than {MAX_VALUE:,}")


def check_percent_widths(fmt: str, args: Any) -> int:
    """Refuse a printf-style format whose widths and precisions alone are too big.

    Returns what the widths and precisions add to the result: each conversion may pad
    its value to its width and print digits up to its precision, so both count.
    """
    star = False
    padding = 0
    for match in _PERCENT.finditer(fmt):
        for part in match.groups():
            if part == "*":
                star = True
            elif part is not None:
                check_format_spec(part)
                padding += int(part)
    if star:
        for value in args if isinstance(args, tuple | list) else (args,):
            require_width(value, "a '*' width")
            if isinstance(value, int):
                padding += max(value, 0)
    require_size(len(fmt) + padding, "a formatted string")
    return padding


def percent_args(fmt: str, args: Any, budget: Budget | None = None) -> Any:
    """The arguments of ``fmt % args`` as plain data, once the result is known to fit.

    The size is estimated (widths, precisions and every conversion printing the whole of
    ``args``) before anything is walked in full, so shared nested values cannot make the
    check itself slow; a function or another non-data value is refused, as when printing.
    """
    padding = check_percent_widths(fmt, args)
    conversions = max(fmt.count("%"), 1)
    require_size(len(fmt) + padding + conversions * estimate_text(args), "a formatted string")
    if isinstance(args, tuple):
        return tuple(plain_data(item, "a formatted value", budget) for item in args)
    if isinstance(args, Mapping):  # named arguments: each is printed on its own
        for value in args.values():
            if not _is_data(value):
                raise TemplateLimitError(f"cannot print a {kind_of(value)}")
    return plain_data(args, "a formatted value", budget)


# --- the cost of comparing and hashing -----------------------------------------------------

_CONTAINERS = (list, tuple, Mapping)


def deep_work(value: Any, limit: int = MAX_WORK) -> int:
    """What walking the whole of ``value`` costs: :data:`ITEM_WORK` per item at every level,
    one per character; counting stops past ``limit``.

    Comparing, hashing or sorting containers walks them element by element, and a
    template can build lists whose parts are shared (``[a, a]`` twenty times over is a
    million items while holding forty), so this counts the items the walk would meet, not
    the objects that exist. The walk itself costs in proportion to what it counts.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is list or kind is tuple or isinstance(item, list | tuple | Mapping):
            total += ITEM_WORK * (1 + len(item))
            if total > limit:
                return total
            parts: Iterable[Any] = (
                (*item.keys(), *item.values()) if isinstance(item, Mapping) else item)
        else:
            parts = (item,)
        for part in parts:
            kind = type(part)
            if kind is str or kind is bytes:
                total += len(part)
            elif kind in _LEAVES:
                pass
            elif (kind is list or kind is tuple or isinstance(part, list | tuple | Mapping)) \
                    and part is not item:
                stack.append(part)
            elif isinstance(part, str | bytes):
                total += len(part)
        if total > limit:
            return total
    return total


_LEAVES = frozenset({int, float, bool, type(None)})


def compare_work(left: Any, right: Any, limit: int = MAX_WORK) -> int:
    """What ``left == right`` (or ``<``, ``!=``...) costs: the smaller side, walked."""
    if isinstance(left, str | bytes) and isinstance(right, str | bytes):
        return min(len(left), len(right))
    if not (isinstance(left, _CONTAINERS) and isinstance(right, _CONTAINERS)):
        return 0
    first = deep_work(left, limit)
    return first if first > limit else min(first, deep_work(right, first))


def contains_work(item: Any, container: Any, limit: int = MAX_WORK) -> int | None:
    """What ``item in container`` costs, or ``None`` when only iterating can tell."""
    kind = type(container)
    if (kind is list or kind is tuple) and type(item) in _LEAVES:
        return ITEM_WORK * len(container)
    if (kind is list or kind is tuple) and type(item) is str:
        return (ITEM_WORK + len(item)) * len(container)
    if isinstance(container, str | bytes):
        return len(container) + (len(item) if isinstance(item, str | bytes) else 0)
    if isinstance(container, Mapping | set | frozenset):
        return ITEM_WORK + deep_work(item, limit)  # hashing the item
    if isinstance(container, range):
        return ITEM_WORK
    if isinstance(container, list | tuple):
        each = ITEM_WORK + (deep_work(item, limit) if isinstance(item, (*_CONTAINERS, str, bytes))
                            else 0)
        scan = len(container) * each
        if scan <= limit or each > limit or not isinstance(item, _CONTAINERS):
            return scan  # (walking the item was work too: past the limit, no second walk)
        return min(scan, ITEM_WORK * len(container) + deep_work(container, limit))
    return None


def remaining(budget: Budget) -> int:
    """How much work the render may still do (plus one, so that spending it all fails)."""
    return MAX_WORK - budget.work + 1


# --- text ------------------------------------------------------------------------------

#: How deeply a list or mapping may nest to be printed.
MAX_DATA_DEPTH = 64


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


class StateView(dict[str, Any]):
    """The state as a template sees it: an absent key is null, not an error."""

    def __missing__(self, key: str) -> None:
        return None


#: Types that print as themselves inside a list or mapping (``str()`` shows their data).
_EXACT = frozenset({str, int, float, bool, type(None), list, tuple, dict, StateView})


def kind_of(value: Any) -> str:
    """A short, internals-free name for what a value is (for error messages)."""
    if callable(value):
        return "function"
    if isinstance(value, Mapping):
        return "mapping"
    if hasattr(value, "__iter__") or hasattr(value, "__next__"):
        return "sequence that is not a list (add '|list')"
    return "value that is not text, a number, a list or a mapping"


def _is_data(value: Any) -> bool:
    return isinstance(value, str | int | float | list | tuple | Mapping | jinja2.Undefined) \
        or value is None


def plain_data(value: Any, what: str = "a value", budget: Budget | None = None) -> Any:
    """``value`` as plain data, ready for ``str()``; refused if it is not data.

    The rule for printing a list or mapping: it prints in Python's literal notation of
    its data (``['a', 1, None]``, ``{'k': True}``), where an absent or undefined value is
    null and prints as ``None``, text marked safe is plain text, and a subclass of a
    number or a mapping prints as the number or mapping itself. Anything else inside it
    (a function, a macro, a generator, any other Python object) is refused, as are data
    larger than :data:`MAX_VALUE` characters and data nested more than
    :data:`MAX_DATA_DEPTH` levels deep. The size is checked first, by an estimate that
    stops counting early, so a shared nested value never makes this slow; the items
    walked are charged to ``budget``.
    """
    require_size(estimate_text(value), what)
    exact = True
    stack = [(value, 0)]
    walked = 0
    while stack:
        item, depth = stack.pop()
        walked += 1
        if type(item) not in _EXACT:
            if not _is_data(item):
                where = " list or mapping that holds a" if depth else ""
                raise TemplateLimitError(f"cannot print a{where} {kind_of(item)}")
            exact = False
        if isinstance(item, list | tuple | Mapping):
            if depth >= MAX_DATA_DEPTH:
                raise TemplateLimitError(
                    f"cannot print data nested more than {MAX_DATA_DEPTH} levels deep")
            if isinstance(item, Mapping):
                stack.extend((part, depth + 1) for pair in item.items() for part in pair)
            else:
                stack.extend((part, depth + 1) for part in item)
    if budget is not None:
        budget.spend(ITEM_WORK * walked * (1 if exact else 2))
    return value if exact else _plain(value)


def _plain(value: Any) -> Any:
    """A copy of checked data in exact built-in types (recursion bounded by the check)."""
    if isinstance(value, jinja2.Undefined) or value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    items = {_plain(key): _plain(item) for key, item in value.items()}
    return StateView(items) if isinstance(value, StateView) else items


def text_of(value: Any, budget: Budget, none: str) -> str:
    """``str(value)`` for data, bounded and charged; anything else is refused.

    ``none`` is how null prints (nothing in output, ``None`` inside a ``~`` concatenation,
    as Jinja always did). Text, numbers and booleans print as before; lists and mappings
    by the rule of :func:`plain_data`; a function, a macro, a generator or any other Python
    object is a run-time error, so that no repr with an address ever reaches the model.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return none
    if isinstance(value, bool | int | float | jinja2.Undefined):
        return str(value)
    if isinstance(value, list | tuple | Mapping):
        data = plain_data(value, "printing a list or mapping", budget)
        text = str(data if isinstance(data, list | tuple | dict) else dict(data))
        budget.spend(len(text))
        return text
    raise TemplateLimitError(f"cannot print a {kind_of(value)}")
