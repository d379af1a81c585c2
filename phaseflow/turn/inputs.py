"""What may enter the turn core: one rule, applied at the moment a value is given.

Every public constructor and operation of :mod:`phaseflow.turn` reads what it is given
through the readers below. Each returns the value in its one canonical form or raises
:class:`TurnInputError` saying what was expected:

* a plain string equal to an enum's value becomes that member (``"max_tokens"`` *is*
  ``StopReason.MAX_TOKENS`` from then on); any other string, or any other type, is refused;
* a string or integer subclass becomes a plain ``str`` / ``int``; ``bool`` is never an
  integer; integers are bounded to 64 bits (:data:`MAX_INT`) so every stored number
  survives any JSON store and every message about it can be printed;
* a sequence is a ``tuple`` or ``list`` (stored as a tuple); value arguments must be the
  core's own classes (a subclass would not compare equal after a JSON round trip).

Constructors let the error propagate: building an impossible value is a programming
error. Operations that can refuse catch it (see ``rejections.refusing``) and answer with the
documented :class:`~phaseflow.turn.rejections.Rejected` instead, so untrusted data fed
into an operation never raises. Every message is built with :func:`describe`, which
cannot fail (Python refuses to print integers beyond 4,300 digits; ``describe`` does not
try).

:func:`evolve` is the other half of the rule: the core's own transitions copy a value
with a few fields changed *without* re-checking it, because every field they set was
read through these readers (or is itself such a value). That keeps the checks at the
edge and out of the hot path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from enum import StrEnum
from typing import Any, TypeVar

from phaseflow.errors import PhaseflowError

__all__ = [
    "MAX_INT",
    "TurnInputError",
    "describe",
    "evolve",
    "exactly",
    "flag",
    "integer",
    "member",
    "number",
    "opt_integer",
    "opt_text",
    "sequence",
    "text",
]

MAX_INT = 2**63 - 1
"""Every integer the turn core stores lies in ``-MAX_INT - 1 .. MAX_INT`` (64-bit signed)."""

E = TypeVar("E", bound=StrEnum)
T = TypeVar("T")


class TurnInputError(PhaseflowError, ValueError):
    """A value given to the turn core is not what the parameter accepts.

    A ``ValueError`` too, so code that caught the enum lookup's ``ValueError`` keeps
    working.
    """


def describe(value: object, limit: int = 60) -> str:
    """A short, printable description of ``value`` that never raises."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 64:
            sign = "-" if value < 0 else ""
            return f"<{sign}integer of {value.bit_length()} bits>"
        return int.__repr__(value)
    try:
        shown = repr(value)
    except Exception:  # a hostile __repr__, a huge nested int, a deep structure
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _refuse(what: str, expected: str, value: object) -> TurnInputError:
    return TurnInputError(f"{what} must be {expected}, not {describe(value)}")


def text(value: object, what: str) -> str:
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a plain copy of a subclass
    raise _refuse(what, "a string", value)


def opt_text(value: object, what: str) -> str | None:
    return None if value is None else text(value, what)


def integer(value: object, what: str) -> int:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(what, "an integer", value)
        value = int.__index__(value)  # a plain copy of a subclass
    if not -MAX_INT - 1 <= value <= MAX_INT:
        raise _refuse(what, "a 64-bit integer", value)
    return value


def opt_integer(value: object, what: str) -> int | None:
    return None if value is None else integer(value, what)


def number(value: object, what: str) -> float:
    """A finite number, as a ``float`` (it is persisted; NaN and infinities are not JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(what, "a finite number", value)
    if isinstance(value, int):
        return float(integer(value, what))
    result = float.__float__(value)
    if not math.isfinite(result):
        raise _refuse(what, "a finite number", value)
    return result


def flag(value: object, what: str) -> bool:
    if value is True or value is False:
        return value
    raise _refuse(what, "a boolean", value)


def member(kind: type[E], value: object, what: str) -> E:
    """``value`` as a member of ``kind``; a plain string is looked up by value."""
    if type(value) is kind:
        return value
    if isinstance(value, str):
        try:
            # Look the value up as a plain string: a subclass's own __eq__ could
            # otherwise match whichever member happens to be compared first.
            return kind(text(value, what))
        except ValueError:
            pass
    values = ", ".join(m.value for m in kind)
    raise _refuse(what, f"one of {values}", value)


def exactly(value: object, kinds: tuple[type, ...], what: str) -> Any:
    """``value`` itself if its class is one of ``kinds`` (subclasses are refused)."""
    if type(value) in kinds:
        return value
    raise _refuse(what, "a " + " or ".join(k.__name__ for k in kinds), value)


def sequence(value: object, what: str, each: Callable[[object, str], T]) -> tuple[T, ...]:
    """A tuple or list, every item read by ``each``; stored as a tuple."""
    if not isinstance(value, tuple | list):
        raise _refuse(what, "a tuple or list", value)
    if not value:
        return ()
    return tuple([each(item, what) for item in value])


_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def evolve(value: T, **changes: Any) -> T:
    """A copy of the frozen dataclass ``value`` with ``changes``, not re-checked.

    Only for the core's own transitions, whose every new field was read through the
    readers above (or is a value that was). Several times cheaper than
    ``dataclasses.replace``, which re-runs every check of the constructor.
    """
    cls = type(value)
    copier = _COPIERS.get(cls)
    if copier is None:
        copier = _COPIERS[cls] = _copier(cls)
    return copier(value, changes)  # type: ignore[no-any-return]


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    """A copy function for ``cls`` written out field by field (as ``dataclasses`` writes
    its ``__init__``): about twice as fast as a loop over the fields."""
    names = [f.name for f in fields(cls)]
    lines = [
        "def copy(v, c):",
        "    assert c.keys() <= allowed, f'{cls.__name__} has no field {set(c) - allowed}'",
        "    new = new_(cls)",
        *(f"    set_(new, {n!r}, c[{n!r}] if {n!r} in c else v.{n})" for n in names),
        "    return new",
    ]
    scope: dict[str, Any] = {
        "cls": cls,
        "allowed": frozenset(names),
        "new_": object.__new__,
        "set_": object.__setattr__,
    }
    exec("\n".join(lines), scope)  # our own field names, never input
    return scope["copy"]  # type: ignore[no-any-return]
