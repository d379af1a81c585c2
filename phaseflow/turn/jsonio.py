"""Reading untrusted JSON without tracebacks, writing values by their fields, and
canonical JSON for identities.

Writing has one rule (:func:`fields_to_json`): a turn value's JSON form is its fields by
name, so the ``*_json`` modules name a field only where its JSON form is not that rule's.

Persisted turn state comes back from disk, from another process or from an older
version; it is untrusted. Decoders in this package read it through the small helpers
below, which raise the private :class:`Malformed` on the first wrong shape. The public
``from_json`` functions catch it where the data enters (:func:`decode`) and return a typed
:class:`~phaseflow.turn.rejections.Rejected` instead, so no input of any shape produces
a traceback. Semantic checks (ordering, cross references) happen after the shape is
known, in each value's ``restore``-style validation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Generic, TypeVar

from phaseflow.errors import PhaseflowError
from phaseflow.turn.inputs import MAX_INT, TurnInputError, describe
from phaseflow.turn.rejections import Rejected, RejectionReason

__all__ = [
    "JsonValue",
    "Malformed",
    "canonical_json",
    "decode",
    "fields_to_json",
    "sha256_hex",
]

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]

T = TypeVar("T")
E = TypeVar("E")
M = TypeVar("M")


class Malformed(PhaseflowError):
    """Raised by decoders on a wrong shape; converted to ``Rejected`` by :func:`decode`.

    A ``PhaseflowError``, so even a decoder helper called directly on a wrong shape (e.g.
    ``content_from_json(5)``) raises nothing but the package's own error.
    """


def canonical_json(value: object) -> str:
    """The canonical text of a JSON value: sorted keys, no spaces, no NaN.

    Used for identities (tool-call arguments, trust keys), so two equal argument
    objects always produce the same string regardless of key order.
    Raises ``Malformed`` if ``value`` is not plain JSON.
    """
    _check_json(value, 0)
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except ValueError as exc:  # e.g. an integer beyond the interpreter's digit limit
        raise Malformed(f"not representable as JSON: {exc}") from None


def _check_json(value: object, depth: int) -> None:
    if depth > 200:
        raise Malformed("JSON nested too deeply")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Malformed("non-finite number")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise Malformed("object keys must be strings")
            _check_json(item, depth + 1)
        return
    raise Malformed(f"not a JSON value: {type(value).__name__}")


def sha256_hex(text: str) -> str:
    # ``surrogatepass``: a lone surrogate (legal in a Python str, and in JSON read from
    # an untrusted source) must hash, not raise.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def decode(data: object, decoder: Callable[[object], T]) -> T | Rejected:
    """Run ``decoder`` on untrusted data; a shape error becomes ``malformed_json``."""
    try:
        return decoder(data)
    except (Malformed, TurnInputError) as exc:
        # A value's constructor refusing what the shape readers let through (it reads
        # every field again) is a wrong shape too.
        return Rejected(RejectionReason.MALFORMED_JSON, str(exc))
    except RecursionError:
        return Rejected(RejectionReason.MALFORMED_JSON, "JSON nested too deeply")
    except (ValueError, OverflowError) as exc:
        # Defence in depth: a number no shape check anticipated must still not escape.
        return Rejected(RejectionReason.MALFORMED_JSON, f"unrepresentable value: {describe(exc)}")


# --- writing ------------------------------------------------------------------------


def fields_to_json(value: object, **written: JsonValue) -> dict[str, JsonValue]:
    """The JSON object of a frozen dataclass value: its class's ``kind`` tag first (the
    class constant that tells the members of a union apart, where there is one), then
    every field by name. ``written``: the JSON of the fields whose form is their own (the
    rest follow :func:`_to_json`).

    The one rule every turn value's JSON form follows, so a writer repeats no field list
    the value declares already; the readers, which check untrusted input, name each one.
    """
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"not a dataclass value: {type(value).__name__}")
    names = [f.name for f in dataclasses.fields(value)]
    out: dict[str, JsonValue] = {}
    tag = getattr(type(value), "kind", None)
    if isinstance(tag, str) and "kind" not in names:
        out["kind"] = tag
    for name in names:
        out[name] = written[name] if name in written else _to_json(getattr(value, name))
    return out


def _to_json(value: object) -> JsonValue:
    """A field's JSON: an enum by its value, a tuple as an array, a value with its own
    ``to_json`` by that, any other dataclass by its fields; text, numbers, booleans and
    ``None`` as they are."""
    if isinstance(value, Enum):
        return value.value  # type: ignore[no-any-return]
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, tuple):
        return [_to_json(item) for item in value]
    to_json = getattr(value, "to_json", None)
    if to_json is not None:
        return to_json()  # type: ignore[no-any-return]
    return fields_to_json(value)


# --- reading ------------------------------------------------------------------------


class Reader(Generic[M]):
    """The decoders of one read, each building with ``make``: the classes the value's
    module hands over (the decoders are bound methods, so they fit the one-argument
    readers :func:`items` takes)."""

    __slots__ = ("make",)

    def __init__(self, make: M) -> None:
        self.make = make


# --- shape readers -----------------------------------------------------------------


def obj(data: object, what: str) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise Malformed(f"{what}: expected an object")
    return data


def field(data: Mapping[str, object], key: str, what: str) -> object:
    if key not in data:
        raise Malformed(f"{what}: missing '{key}'")
    return data[key]


def string(data: Mapping[str, object], key: str, what: str) -> str:
    value = field(data, key, what)
    if not isinstance(value, str):
        raise Malformed(f"{what}.{key}: expected a string")
    return value


def opt_string(data: Mapping[str, object], key: str, what: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Malformed(f"{what}.{key}: expected a string or null")
    return value


def integer(data: Mapping[str, object], key: str, what: str) -> int:
    value = field(data, key, what)
    if not isinstance(value, int) or isinstance(value, bool):
        raise Malformed(f"{what}.{key}: expected an integer")
    if not -MAX_INT - 1 <= value <= MAX_INT:
        raise Malformed(f"{what}.{key}: integer out of the 64-bit range")
    return value


def opt_integer(data: Mapping[str, object], key: str, what: str) -> int | None:
    if data.get(key) is None:
        return None
    return integer(data, key, what)


def number(data: Mapping[str, object], key: str, what: str) -> float:
    value = field(data, key, what)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Malformed(f"{what}.{key}: expected a number")
    try:
        number = float(value)
    except OverflowError:
        raise Malformed(f"{what}.{key}: number out of range") from None
    if not math.isfinite(number):
        raise Malformed(f"{what}.{key}: expected a finite number")
    return number


def boolean(data: Mapping[str, object], key: str, what: str) -> bool:
    value = field(data, key, what)
    if not isinstance(value, bool):
        raise Malformed(f"{what}.{key}: expected a boolean")
    return value


def array(data: Mapping[str, object], key: str, what: str) -> list[object]:
    value = field(data, key, what)
    if not isinstance(value, list):
        raise Malformed(f"{what}.{key}: expected an array")
    return value


def items(
    data: Mapping[str, object], key: str, what: str, each: Callable[[object], T]
) -> tuple[T, ...]:
    return tuple(each(item) for item in array(data, key, what))


def enum(data: Mapping[str, object], key: str, what: str, kind: Callable[[str], E]) -> E:
    raw = string(data, key, what)
    try:
        return kind(raw)
    except ValueError:
        raise Malformed(f"{what}.{key}: unknown value {raw!r}") from None


def any_json(value: object, what: str) -> Any:
    try:
        _check_json(value, 0)
    except Malformed as exc:
        raise Malformed(f"{what}: {exc}") from None
    return value
