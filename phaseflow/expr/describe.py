"""Describe an exception or a value's type without running anything that can fail; and
the two helpers every message uses, :func:`clip` and :func:`did_you_mean`.

An error record must never itself fail to build. An exception raised by a host callable
(or by a host mapping a guard reads) is the host's object: its ``__str__`` may raise,
return something that is not a string, or return megabytes; its class's metaclass may
even make ``__name__`` raise. :func:`describe_exception` is the one describer every
error record of the guard runtime and the machine goes through: it never raises (for an
:class:`Exception`) and never returns more than :data:`MESSAGE_LIMIT` characters.

It lives in the lowest layer that both the guard runtime and the machine import.

What is caught where it is used is every :class:`Exception`, whatever it does; a
``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``,
``GeneratorExit``, ``asyncio.CancelledError``, trio's and anyio's cancellation, gevent's
``GreenletExit``) is a request to stop, not a failure, and is let through: Python reserves
that branch of the hierarchy for interpreter exit and cancellation, and a framework's
cancellation that a library swallowed would never arrive.

:func:`clip`, :func:`did_you_mean` (with :func:`closest_hint`, and :func:`closest` for a
message that words its hint itself), :func:`json_type` and :func:`json_kind` are here for
the same reason: the validator, the templates, the machine, the MCP client and the CLI
all word their messages with them, and this is the lowest layer they share.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence
from typing import Any

__all__ = [
    "MESSAGE_LIMIT", "clip", "closest", "closest_hint", "describe_exception", "did_you_mean",
    "did_you_mean_or_list", "json_kind", "json_type", "type_name"]

#: Longest text :func:`describe_exception` returns (type name included).
MESSAGE_LIMIT = 500

_type_name_of = type.__dict__["__name__"].__get__
_ELLIPSIS = "..."


def type_name(value: Any) -> str:
    """The name of ``value``'s class, read from the class itself (a metaclass cannot
    intercept it); always a ``str``."""
    try:
        name = _type_name_of(type(value))
    except Exception:  # pragma: no cover - type.__name__ of a class always works
        return "object"
    return name if type(name) is str else "object"


#: The JSON type name of each class a parsed JSON value may be, the first that fits
#: (``bool`` before ``int``: ``True`` is an ``int`` too).
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"),
    (str, "string"), (list, "array"), (dict, "object"),
)


def json_type(value: Any) -> str:
    """The JSON type name of a parsed JSON value (``integer`` for ``1``, ``number`` for
    ``1.5``); the Python class name for anything else."""
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


#: A JSON type in the words of a message to the person who wrote the document.
_JSON_KINDS = {
    "null": "null", "boolean": "a boolean", "integer": "a number", "number": "a number",
    "string": "a string", "array": "an array", "object": "an object",
}


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in a message's words (``"a string"``, ``"an array"``,
    ``"null"``), for "expected X, got Y" about a JSON document a person wrote (an MCP
    servers file, an HTTP request's body): an ``int`` and a ``float`` are both
    ``"a number"``, since JSON text has one number type; anything that is not JSON is
    named by its class. One wording for every such message, whatever reads the document."""
    name = json_type(value)
    return _JSON_KINDS.get(name, name)


def _bounded(text: str, limit: int) -> str:
    """``text`` (an exact ``str``) cut to ``limit`` characters, marked when cut."""
    if len(text) <= limit:
        return text
    return str.__getitem__(text, slice(0, max(limit - len(_ELLIPSIS), 0))) + _ELLIPSIS


def _text(exc: BaseException) -> str | None:
    """``str(exc)`` as an exact ``str``, or ``None`` when it cannot be had."""
    try:
        text = str(exc)
    except Exception:
        return None
    if type(text) is not str:
        # str() accepts a str subclass from __str__; copy its characters without calling
        # any method the subclass may override.
        try:
            text = str.__str__(text)
        except Exception:  # pragma: no cover - str() already checked it is a str
            return None
    return text


def describe_exception(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """``"TypeName: message"`` (``"TypeName"`` when the message is empty), at most
    ``limit`` characters; ``"TypeName (its message cannot be printed)"`` when ``str(exc)``
    raises or returns something that is not a string. Never raises for an ``Exception``
    raised while describing (a ``KeyboardInterrupt`` there still propagates)."""
    name = type_name(exc)
    text = _text(exc)
    if text is None:
        return _bounded(f"{name} (its message cannot be printed)", limit)
    if not text:
        return _bounded(name, limit)
    return _bounded(f"{name}: {text}", limit)


def clip(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (with "...") so one message stays one line's worth."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` for the closest candidate, or `""` when none is close."""
    return closest_hint(word, sorted(set(candidates)))


def did_you_mean_or_list(word: str, candidates: Collection[str], plural: str) -> str:
    """:func:`did_you_mean`, or when nothing is close every candidate in its order
    (``" (phases: a, b)"``, ``plural`` naming them): the hint of a name that must be one
    of a short, fixed list (a workflow's phases, a test file's step kinds), where the
    whole list is the next best help."""
    return did_you_mean(word, candidates) or f" ({plural}: {', '.join(candidates)})"


def closest_hint(word: str, pool: Sequence[str]) -> str:
    """:func:`did_you_mean` over ``pool``, already sorted and without repeats: a check
    giving one hint per bad name sorts its candidates once, not once per hint (thousands
    of bad targets would otherwise sort every phase name thousands of times)."""
    found = closest(word, pool)
    return f"; did you mean '{found}'?" if found is not None else ""


def closest(word: str, pool: Sequence[str]) -> str | None:
    """The candidate of ``pool`` closest to ``word``, or ``None`` when none is close
    enough to be a likely typo: the one judgement behind every "did you mean", whatever
    the message around it. A word over 200 characters is no typo (and comparing it
    would cost time quadratic in its length)."""
    if not pool or len(word) > 200:
        return None
    close = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    return close[0] if close else None
