"""Are a tool call's arguments what the tool's JSON Schema asks for?

The model's arguments are checked before anything runs; invalid ones are an error result
the model reads and corrects, so the answer is one short sentence that names the argument
and what is wrong with it (``missing required argument 'email'``, ``'count' must be an
integer, got string``), not a validator's dump.

The checking is not done here: :mod:`phaseflow.spec.jsonschema_check`, the one JSON-Schema
compiler, compiles the schema once into a yes/no (most calls are valid: a small call costs
microseconds and imports nothing) and, for a no, the first failure (the keyword, where,
what it asked for). This module is the door: the sentence for each failure, and
**jsonschema** (Draft 2020-12, imported only when needed) for a schema the compiler does
not read: a keyword it does not implement (``not``, ``if``, ``patternProperties``,
references other than to the root's ``$defs``, ...) or a keyword's value of a shape it
does not read; jsonschema also decides whether such a schema is valid at all. Annotations
(``description``, ``title``, ``default``, ``examples``, ``format``, ...) are ignored, as
draft 2020-12 says.

Both follow draft 2020-12 exactly (property tests compare them with jsonschema): ``1.0``
is an integer, ``true`` is not ``1``, keywords apply only to values of their type.

A value is never the reason for an exception: hostile values (deep nesting, huge
integers, enormous strings) give a message or ``None``. Only a schema that is not a valid
JSON Schema raises :class:`~phaseflow.errors.ConfigError` - a bug of the host, found when
the validator is compiled.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.expr.describe import clip
from phaseflow.spec.jsonschema_check import Checker, Failure, compile_checker, json_type

__all__ = ["ArgumentValidator", "compile_validator", "json_type", "validate_arguments"]

#: A compiled check: the value and where it is -> the message, or ``None`` when it fits.
ArgumentValidator = Callable[[Any], "str | None"]

_PHRASE = {
    "array": "an array", "boolean": "a boolean", "integer": "an integer", "null": "null",
    "number": "a number", "object": "an object", "string": "a string",
}
#: Keywords that never change whether a value is valid.
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "format", "deprecated",
    "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
})
_MAX_SHOWN = 40


def validate_arguments(schema: Mapping[str, Any] | bool, value: Any) -> str | None:
    """``None`` when ``value`` (parsed JSON) satisfies ``schema``, else a short message
    for the model. Compiles ``schema`` on every call: a caller that checks many calls of
    one tool keeps :func:`compile_validator`'s result instead. Raises
    :class:`ConfigError` only for a schema that is not a valid JSON Schema."""
    return compile_validator(schema)(value)


def compile_validator(schema: Mapping[str, Any] | bool) -> ArgumentValidator:
    """A reusable check of values against ``schema`` (see the module docstring)."""
    checker = _compile_own(schema)
    if checker is None:
        return _jsonschema_validator(schema)
    holds, why_not = checker

    def validate(value: Any) -> str | None:
        try:
            if holds(value):
                return None
            verdict: bool | None = False
        except Exception:  # no verdict (an odd value, too deep): the explanation decides
            verdict = None
        try:
            failure = why_not(value, ())
        except RecursionError:
            return "the arguments are nested too deeply"
        if failure is not None:
            return _phrase(failure)
        # a no the explanation cannot place (never expected): still a no, never a pass
        return None if verdict is None else "the arguments do not fit the tool's schema"

    return validate


def _compile_own(schema: Any) -> Checker | None:
    """The shared compiler's check of ``schema``, or ``None`` when it leaves the subset."""
    return compile_checker(schema, ignored=_ANNOTATIONS)


# -- messages ---------------------------------------------------------------------------

def _where(path: tuple[str | int, ...]) -> str:
    if not path:
        return "the arguments"
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    if len(text) > 80:
        text = "..." + text[-77:]
    return f"'{text}'"


def _show(value: Any) -> str:
    """A value for a message: scalars as JSON (cut), containers by their type."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() < 128 else "a very large integer"
    if isinstance(value, str):
        return json.dumps(clip(value, _MAX_SHOWN), ensure_ascii=False)
    return _PHRASE.get(json_type(value), json_type(value))


def _show_schema_value(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # pragma: no cover - schemas are JSON
        text = repr(value)
    return clip(text, _MAX_SHOWN)


def _types_phrase(types: Sequence[str]) -> str:
    phrases = [_PHRASE[t] for t in types]
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " or " + phrases[-1]


def _names(keys: Sequence[str]) -> str:
    shown = [f"'{k}'" if len(k) <= _MAX_SHOWN else f"'{k[:37]}...'" for k in keys[:10]]
    return ", ".join(shown) + (f" (and {len(keys) - 10} more)" if len(keys) > 10 else "")


# -- one sentence per failure -------------------------------------------------------------

def _phrase(failure: Failure) -> str:
    """The sentence the model reads for ``failure``."""
    return _PHRASES[failure.keyword](failure)


def _bound(op: str) -> Callable[[Failure], str]:
    return lambda f: f"{_where(f.path)} must be {op} {_show(f.expected)}, got {_show(f.value)}"


def _size(unit: str, least: bool) -> Callable[[Failure], str]:
    """``minLength`` and friends: a string is long, an array or object has members."""
    verb, long = ("be", " long") if unit == "characters" else ("have", "")
    word = "at least" if least else "at most"
    return lambda f: (f"{_where(f.path)} must {verb} {word} {f.expected} {unit}{long}, "
                      f"got {len(f.value)}")


def _one_of_these(f: Failure) -> str:
    shown = ", ".join(_show_schema_value(v) for v in f.expected[:10])
    more = ", ..." if len(f.expected) > 10 else ""
    return f"{_where(f.path)} must be one of {shown}{more}, got {_show(f.value)}"


def _bad_name(f: Failure) -> str:
    if not f.path:
        return f"the argument name {_show(f.expected)} is not allowed"
    return f"{_where(f.path)} has a property name that is not allowed: {_show(f.expected)}"


def _missing(failure: Failure) -> str:
    """``required``, and ``dependentRequired`` (which names the key that requires)."""
    missing: tuple[str, ...] = failure.expected
    required, because = "required ", ""
    if failure.detail is not None:
        required, because = "", f" (required when {_names((failure.detail,))} is given)"
    if not failure.path:
        plural = "s" if len(missing) > 1 else ""
        return f"missing {required}argument{plural} {_names(missing)}{because}"
    plural = "properties" if len(missing) > 1 else "property"
    return f"{_where(failure.path)} is missing {required}{plural} {_names(missing)}{because}"


def _unexpected(failure: Failure) -> str:
    """``additionalProperties: false`` (which knows the expected names) and
    ``unevaluatedProperties: false``."""
    unexpected: tuple[str, ...] = failure.expected
    if not failure.path:
        plural = "s" if len(unexpected) > 1 else ""
        known = failure.detail or ()
        expected = f" (expected: {', '.join(known)})" if known else ""
        if len(expected) > 200:
            expected = ""
        return f"unexpected argument{plural} {_names(unexpected)}{expected}"
    plural = "properties" if len(unexpected) > 1 else "property"
    return f"{_where(failure.path)} has unexpected {plural} {_names(unexpected)}"


_PHRASES: dict[str, Callable[[Failure], str]] = {
    "type": lambda f: (f"{_where(f.path)} must be {_types_phrase(f.expected)}, "
                       f"got {json_type(f.value)}"),
    "enum": _one_of_these,
    "const": lambda f: (f"{_where(f.path)} must be {_show_schema_value(f.expected)}, "
                        f"got {_show(f.value)}"),
    "minimum": _bound(">="), "maximum": _bound("<="),
    "exclusiveMinimum": _bound(">"), "exclusiveMaximum": _bound("<"),
    "minLength": _size("characters", True), "maxLength": _size("characters", False),
    "minItems": _size("items", True), "maxItems": _size("items", False),
    "minProperties": _size("properties", True), "maxProperties": _size("properties", False),
    "pattern": lambda f: (f"{_where(f.path)} must match the pattern "
                          f"{_show_schema_value(f.expected)}, got {_show(f.value)}"),
    "uniqueItems": lambda f: (f"{_where(f.path)} must not repeat items "
                              f"(item {f.detail} is a repeat)"),
    "required": _missing, "dependentRequired": _missing,
    "additionalProperties": _unexpected, "unevaluatedProperties": _unexpected,
    "propertyNames": _bad_name,
    "oneOf": lambda f: f"{_where(f.path)} matches more than one of the allowed forms",
    "false": lambda f: (f"{_where(f.path)} is not allowed" if f.path
                        else "no arguments are accepted"),
}


# -- the fallback ---------------------------------------------------------------------------

def _jsonschema_validator(schema: Any) -> ArgumentValidator:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError, best_match

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise ConfigError(f"the tool's parameters are not a valid JSON Schema: "
                          f"{clip(str(error.message), 200)}") from None
    except RecursionError:
        raise ConfigError("the tool's parameters are nested too deeply to check") from None
    validator = Draft202012Validator(schema)

    def validate(value: Any) -> str | None:
        try:
            error = best_match(validator.iter_errors(value))
        except RecursionError:
            return "the arguments are nested too deeply"
        except Exception as exc:  # a value must never crash the check
            return f"the arguments cannot be checked: {type(exc).__name__}"
        if error is None:
            return None
        path = tuple(p for p in error.absolute_path if isinstance(p, str | int))
        message = clip(_jsonschema_message(error), 200)
        return message if not path else f"{_where(path)}: {message}"

    return validate


def _jsonschema_message(error: Any) -> str:
    """jsonschema's message, without the (possibly huge) value it quotes."""
    if error.validator == "required" and isinstance(error.validator_value, list):
        instance = error.instance
        missing = [k for k in error.validator_value
                   if isinstance(k, str) and isinstance(instance, dict) and k not in instance]
        if missing and not error.absolute_path:
            return f"missing required argument {_names(missing[:1])}"
    if error.validator == "type":
        return f"must be {error.validator_value}, got {json_type(error.instance)}"
    return str(error.message)
