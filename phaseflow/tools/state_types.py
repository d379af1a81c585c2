"""Does a value fit a state key's declared type? The check before a tool's or the
``record`` tool's write.

There is one rule for this in phaseflow, and it is the workflow validator's
(:data:`~phaseflow.spec.reference_checks.TYPE_CHECKS`: a ``default`` that breaks it is
PF103, a ``set`` effect that does is PF305); a session writing a tool's value applies the
same rule, so a value a file may not ``set`` is not written at run time either:

* ``null`` fits every type: it makes the key absent, which a conversation always allows
  (PF305's reading).
* The value must be JSON first (:func:`~phaseflow.expr.jsonvalue.check_json`, the one
  check of what may enter the state): a tuple counts as an array and a read-only view as
  an object, as they would once written (normalised); a ``set``, NaN or a ``datetime``
  never fits.
* ``true``/``false`` are not numbers; ``1.0`` is a ``number``, not an ``integer``
  (Python's reading of the value, as for ``set``).
"""

from __future__ import annotations

from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.expr.jsonvalue import JsonCheck, check_json
from phaseflow.spec.reference_checks import TYPE_CHECKS
from phaseflow.spec.schema import type_name

__all__ = ["check_state_type", "state_value"]


def state_value(value: Any, declared_type: str, *, key: str | None = None) -> JsonCheck:
    """``value`` as it is to be written (normalised JSON, a fresh copy) when it fits
    ``declared_type`` (one of the workflow's state types: ``string``, ``number``,
    ``integer``, ``boolean``, ``array``, ``object``, ``any``), else why not. ``key``
    names the state key in the message. Never raises for a value (a host container whose
    methods raise is "cannot be read"); an unknown type is a :class:`ConfigError`."""
    fits = TYPE_CHECKS.get(declared_type) if isinstance(declared_type, str) else None
    if fits is None:
        raise ConfigError(f"{declared_type!r} is not a state type "
                          f"({', '.join(TYPE_CHECKS)})")
    if value is None:
        return JsonCheck(None, None)
    subject = f"state key {_key_text(key)}" if key is not None else "the value"
    try:
        checked = check_json(value, copy=True)
    except Exception as exc:  # a host container whose methods raise
        return JsonCheck(None, f"{subject} cannot be read: {type(exc).__name__}")
    if checked.problem is not None:
        return JsonCheck(None, f"{subject} is not JSON: {checked.problem}")
    if fits(checked.value):
        return checked
    declared = f"is declared {declared_type}" if key is not None else f"must be {declared_type}"
    return JsonCheck(None, f"{subject} {declared}, got {type_name(checked.value)}"
                           f"{_shown(checked.value)}")


def check_state_type(value: Any, declared_type: str, *, key: str | None = None) -> str | None:
    """Why ``value`` does not fit ``declared_type`` (``None`` when it does); see
    :func:`state_value`, which also gives the value to write."""
    return state_value(value, declared_type, key=key).problem


def _key_text(key: str) -> str:
    return repr(key) if len(key) <= 60 else repr(key[:57] + "...")


def _shown(value: Any) -> str:
    """A scalar's text for the message (cut), nothing for a container."""
    if isinstance(value, bool):
        return f" ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f" ({value})" if value.bit_length() < 128 else ""
    if isinstance(value, float):
        return f" ({value!r})"
    if isinstance(value, str):
        return f" ({value[:37] + '...' if len(value) > 40 else value!r})"
    return ""
