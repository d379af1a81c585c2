"""What counts as a JSON value: the one check of what may go into a session's state.

The state is meant to be JSON: a host persists it, a snapshot travels beside it, guards
and templates are defined over JSON values. Two things put values into it that no schema
has checked: ``set`` effects built in code, and the mappings host callables return. Both
go through :func:`check_json`, so "is this JSON?" is answered once, the same way.

A JSON value here is ``None``, a ``bool``, an ``int`` of at most :data:`MAX_INT_DIGITS`
digits (longer ones cannot be written as JSON text by Python's ``json`` under its default
limit), a finite ``float``, a ``str``, a list of JSON values, or a mapping from ``str``
keys to JSON values, nested at most :data:`MAX_JSON_DEPTH` levels (a list that contains
itself is therefore refused too, instead of recursing forever).

Decisions (tests pin them down):

* **Normalised, not refused:** a tuple becomes a list (JSON has one array type, and a
  state read back from JSON would hold a list anyway); any other ``Mapping`` (a read-only
  view, an ``OrderedDict``) becomes a ``dict`` and any other ``Sequence`` but text and
  bytes (a read-only list view, a list subclass) a ``list``; a subclass
  of ``str``, ``int`` or ``float`` (a ``StrEnum`` or ``IntEnum`` member) becomes the plain
  value, read without calling any method the subclass may override. A value that needs
  none of this is returned as it is, without a copy.
* **Refused:** NaN and infinities, non-string mapping keys (``json.dumps`` would turn
  ``1`` into ``"1"``, silently changing the key), and everything else: sets, bytes,
  ``Decimal``, dates, arbitrary objects.

This module is in the guard layer because it is the lowest layer that both the workflow
model (``SetEffect``) and the machine import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from phaseflow.expr.describe import clip, type_name

__all__ = ["MAX_INT_DIGITS", "MAX_JSON_DEPTH", "JsonCheck", "check_json", "check_json_object"]

#: Deepest nesting of lists and mappings a JSON value may have.
MAX_JSON_DEPTH = 100
#: Longest integer a JSON value may hold, in decimal digits (Python's ``json`` refuses to
#: write integers over 4,300 digits by default).
MAX_INT_DIGITS = 4000
# 10**4000 has 13,288 bits: an int of fewer bits has at most 4,000 digits.
_MAX_INT_BITS = 13_287

#: Integers this small need no digit check (the lists' fast path).
_SMALL = 1 << 62

_str_value = str.__str__
_int_value = int.__int__
_float_value = float.__float__


class JsonCheck(NamedTuple):
    """The outcome of :func:`check_json`: ``value`` is the value as JSON (normalised,
    ``None`` when refused) and ``problem`` says why it is not JSON (``None`` when it is),
    naming where inside the value the problem is (``items[3]``, ``order.lines``)."""

    value: Any
    problem: str | None


class _NotJson(Exception):
    """Internal: unwinds the walk at the first value that is not JSON; each container on
    the way out adds its key or index to ``parts`` (innermost first), so a value that is
    JSON never pays for building a path."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts: list[str] = []

    def path(self) -> str:
        text = "".join(reversed(self.parts)).lstrip(".")
        return text if len(text) <= 80 else "..." + text[-77:]


def check_json(value: Any, *, copy: bool = False) -> JsonCheck:
    """Is ``value`` JSON? Returns it normalised (see the module docstring), or why not.

    ``copy``: return fresh lists and dicts even where the value needed no normalising (for
    a caller that must not share objects with whoever gave it the value). Reading a host
    object may run its code (a mapping's ``items``); whatever that raises is the caller's
    to record, exactly like any other failure of host code.
    """
    try:
        if copy or _needs_normalising(value, 0):
            value = _normalised(value, 0)
    except _NotJson as refusal:
        path = refusal.path()
        return JsonCheck(None, refusal.reason + (f" (at {path})" if path else ""))
    return JsonCheck(value, None)


def check_json_object(values: Any) -> JsonCheck:
    """Are ``values`` - state keys and their values, as a ``set`` effect writes them - a
    JSON object? ``value`` is a fresh, normalised ``dict`` (empty for ``None`` or an empty
    mapping); ``problem`` names the first key that is not a string or whose value
    :func:`check_json` refuses."""
    if not values:
        return JsonCheck({}, None)
    if not isinstance(values, Mapping):
        return JsonCheck(None, f"the values must be a mapping of state keys, not "
                               f"{type_name(values)}")
    out: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(key, str):
            return JsonCheck(None, f"a state key must be a string, not {type_name(key)}")
        checked = check_json(value, copy=True)
        if checked.problem is not None:
            name = _key_text(key)[1:]
            return JsonCheck(None, f"the value of {name!r} is not JSON: {checked.problem}")
        out[key if type(key) is str else _str_value(key)] = checked.value
    return JsonCheck(out, None)


def _key_text(key: Any) -> str:
    """A mapping key for a message: short, and never the host's own ``repr``."""
    if isinstance(key, str):
        text = _str_value(key)
        return "." + clip(text, 40)
    return f".<{type_name(key)}>"


#: Sequences that are not JSON arrays: text and bytes.
_NOT_ARRAYS = (str, bytes, bytearray, memoryview)

#: What :func:`_scalar` returns for a list or a mapping (not a scalar).
_CONTAINER: Any = object()


def _scalar(value: Any) -> Any:
    """``value`` as a plain JSON scalar, :data:`_CONTAINER` for a list, tuple or mapping,
    or :class:`_NotJson`. Subclasses of ``str``/``int``/``float`` are read with the base
    type's own method, so an override never runs."""
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is not int and t is not float:
        if isinstance(value, Mapping | list | tuple) or (
            isinstance(value, Sequence) and not isinstance(value, _NOT_ARRAYS)
        ):
            return _CONTAINER
        if isinstance(value, str):
            return _str_value(value)
        if isinstance(value, int):  # bool is an exact type, handled above
            value = _int_value(value)
        elif isinstance(value, float):
            value = _float_value(value)
        else:
            raise _NotJson(f"a value of type {type_name(value)} is not JSON")
        t = type(value)
    if t is int:
        if value.bit_length() > _MAX_INT_BITS:
            raise _NotJson(f"an integer of more than {MAX_INT_DIGITS:,} digits is not JSON")
        return value
    if value - value != 0.0:  # NaN and the infinities (x - x is NaN for all three)
        raise _NotJson(f"{value!r} is not a JSON number")
    return value


def _deeper(depth: int) -> int:
    if depth >= MAX_JSON_DEPTH:
        raise _NotJson(f"it is nested deeper than {MAX_JSON_DEPTH} levels")
    return depth + 1


def _bad_key(key: Any) -> _NotJson:
    return _NotJson(f"a mapping key must be a string, not {type_name(key)}")


def _needs_normalising(value: Any, depth: int) -> bool:
    """Check ``value``; True when it is JSON but not plain (a tuple, a view, a subclass).
    The common case - plain dicts, lists and scalars - allocates nothing."""
    t = type(value)
    if t is dict:
        depth = _deeper(depth)
        needs = False
        key: Any = None
        try:
            for key, item in value.items():
                if type(key) is not str:
                    if not isinstance(key, str):
                        raise _bad_key(key)
                    needs = True
                t = type(item)
                if t is str or t is bool or item is None:  # inline: most items are these
                    continue
                if _needs_normalising(item, depth):
                    needs = True
        except _NotJson as refusal:
            refusal.parts.append(_key_text(key))
            raise
        return needs
    if t is list:
        depth = _deeper(depth)
        needs = False
        i = 0
        try:
            for item in value:
                t = type(item)
                if t is str or t is bool or item is None or (t is int and -_SMALL < item < _SMALL):
                    i += 1  # inline: most items are these
                    continue
                if _needs_normalising(item, depth):
                    needs = True
                i += 1
        except _NotJson as refusal:
            refusal.parts.append(f"[{i}]")
            raise
        return needs
    plain = _scalar(value)
    if plain is _CONTAINER:
        return True
    return plain is not value


def _normalised(value: Any, depth: int) -> Any:
    """A fresh plain copy of ``value``, checked again while it is built (a host mapping
    need not return the same items twice)."""
    plain = _scalar(value)
    if plain is not _CONTAINER:
        return plain
    depth = _deeper(depth)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        key: Any = None
        try:
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _bad_key(key)
                out[key if type(key) is str else _str_value(key)] = _normalised(item, depth)
        except _NotJson as refusal:
            refusal.parts.append(_key_text(key))
            raise
        return out
    items: list[Any] = []
    try:
        for item in value:
            items.append(_normalised(item, depth))
    except _NotJson as refusal:
        refusal.parts.append(f"[{len(items)}]")
        raise
    return items
