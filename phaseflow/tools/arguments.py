"""Are a tool call's arguments what the tool's JSON Schema asks for?

The model's arguments are checked before anything runs; invalid ones are an error result
the model reads and corrects, so the answer is one short sentence that names the argument
and what is wrong with it (``missing required argument 'email'``, ``'count' must be an
integer, got string``), not a validator's dump.

Two validators, one answer:

* **Our own** for the subset of JSON Schema that :func:`~phaseflow.tools.schema.
  schema_for` generates and most hand-written (and pydantic) tool schemas use: ``type``,
  ``enum``, ``const``, ``properties``, ``required``, ``additionalProperties``, ``items``,
  ``prefixItems``, ``uniqueItems``, ``anyOf``, ``oneOf``, ``$ref`` to the root's
  ``$defs``, ``minimum``/``maximum`` (and the exclusive ones), ``minLength``/``maxLength``,
  ``pattern``, ``minItems``/``maxItems``, ``minProperties``/``maxProperties``;
  annotations (``description``, ``title``, ``default``, ``examples``, ``format``, ...) are
  ignored, as draft 2020-12 says. It is compiled once into nested closures, so checking
  a small call costs microseconds and imports nothing.
* **jsonschema** (Draft 2020-12, imported only when needed) for a schema that uses
  anything else (``allOf``, ``not``, ``if``, other references, ...) or whose keywords have shapes
  we do not read; it also decides whether such a schema is valid at all.

Both follow draft 2020-12 exactly where they overlap (a property test compares them):
``1.0`` is an integer, ``true`` is not ``1``, keywords apply only to values of their type.

A value is never the reason for an exception: hostile values (deep nesting, huge
integers, enormous strings) give a message or ``None``. Only a schema that is not a valid
JSON Schema raises :class:`~phaseflow.errors.ConfigError` - a bug of the host, found when
the validator is compiled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.expr.describe import clip
from phaseflow.spec.jsonschema_check import (
    compile_check,
    is_type,
    json_equal,
    json_type,
    repeated_item,
)

__all__ = ["ArgumentValidator", "compile_validator", "json_type", "validate_arguments"]

#: A compiled check: the value and where it is -> the message, or ``None`` when it fits.
ArgumentValidator = Callable[[Any], "str | None"]
_Check = Callable[[Any, tuple[str | int, ...]], "str | None"]

_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
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
    check = _compile_own(schema)
    if check is None:
        return _jsonschema_validator(schema)
    own = check
    fast = compile_check(schema, annotations=_ANNOTATIONS)
    if fast is not None:
        holds = fast

        def validate_fast(value: Any) -> str | None:
            try:
                if holds(value):
                    return None
            except Exception:  # no verdict (an odd value): the explaining check decides
                pass
            return validate(value)

    def validate(value: Any) -> str | None:
        try:
            fail = own(value, ())
        except RecursionError:
            return "the arguments are nested too deeply"
        return None if fail is None else str.__str__(fail)

    return validate if fast is None else validate_fast


def _compile_own(schema: Any) -> _Check | None:
    """Our own validator of ``schema``, or ``None`` when it leaves the subset."""
    defs = _Defs(schema)
    token = _DEFS.set(defs)
    try:
        return _compile(schema) if defs.compile_all() else None
    except RecursionError:
        return None
    finally:
        _DEFS.reset(token)


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


class _TypeFail(str):
    """A type mismatch message that remembers the expected types, so that ``anyOf`` can
    say "must be a string or null" instead of the first branch's complaint."""

    types: tuple[str, ...]
    depth: int


def _type_fail(path: tuple[str | int, ...], types: Sequence[str], value: Any) -> _TypeFail:
    fail = _TypeFail(f"{_where(path)} must be {_types_phrase(types)}, got {json_type(value)}")
    fail.types = tuple(types)
    fail.depth = len(path)
    return fail


# -- JSON semantics -----------------------------------------------------------------------

def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    """A non-negative integer as the meta-schema reads it (``2.0`` counts)."""
    return is_type(value, "integer") and value >= 0


# -- the compiler of the subset ---------------------------------------------------------------

class _Defs:
    """The root schema's ``$defs``, compiled once each; ``$ref`` to ``#/$defs/NAME`` is
    read (pydantic's and our recursive types' form), any other reference is jsonschema's."""

    def __init__(self, root: Any) -> None:
        self.root = root
        raw = root.get("$defs", {}) if isinstance(root, dict) else {}
        self.raw: dict[str, Any] | None = raw if isinstance(raw, dict) else None
        self.compiled: dict[str, _Check] = {}
        self.compiling: set[str] = set()

    def compile_all(self) -> bool:
        if self.raw is None:
            return False
        return all(self.ref(name) is not None for name in self.raw)

    def ref(self, name: str) -> _Check | None:
        if self.raw is None or name not in self.raw:
            return None
        if name not in self.compiled and name not in self.compiling:
            self.compiling.add(name)
            try:
                made = _compile(self.raw[name])
            finally:
                self.compiling.discard(name)
            if made is None:
                return None
            self.compiled[name] = made
        compiled = self.compiled

        def check(value: Any, path: tuple[str | int, ...]) -> str | None:
            return compiled[name](value, path)

        return check


_DEFS: ContextVar[_Defs | None] = ContextVar("phaseflow_schema_defs", default=None)
_REF = re.compile(r"#/\$defs/([^/~%]+)")


def _compile(schema: Any) -> _Check | None:
    """Closures checking ``schema``, or ``None`` when it leaves the subset (or is not a
    shape we read: jsonschema then decides, including whether it is valid)."""
    if schema is True:
        return _accept
    if schema is False:
        return _refuse
    if not isinstance(schema, dict):
        return None
    defs = _DEFS.get()
    if any(k not in _KEYWORDS and k not in _ANNOTATIONS for k in schema):
        if any(k not in _KEYWORDS and k not in _ANNOTATIONS and k != "$defs" for k in schema):
            return None
        if defs is None or schema is not defs.root:
            return None  # $defs only at the root
    checks: list[_Check] = []
    for keyword in _ORDER:
        if keyword in schema:
            made = _KEYWORDS[keyword](schema[keyword], schema)
            if made is None:
                return None
            if made is not _accept:
                checks.append(made)
    if not checks:
        return _accept
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)

    def all_of(value: Any, path: tuple[str | int, ...]) -> str | None:
        for check in frozen:
            fail = check(value, path)
            if fail is not None:
                return fail
        return None

    return all_of


def _accept(value: Any, path: tuple[str | int, ...]) -> str | None:
    return None


def _refuse(value: Any, path: tuple[str | int, ...]) -> str | None:
    return "no arguments are accepted" if not path else f"{_where(path)} is not allowed"


def _ref(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    defs = _DEFS.get()
    match = _REF.fullmatch(spec) if isinstance(spec, str) else None
    if defs is None or match is None:
        return None
    return defs.ref(match.group(1))


def _type(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if isinstance(spec, str):
        types: tuple[str, ...] = (spec,)
    elif isinstance(spec, list) and spec and all(isinstance(t, str) for t in spec):
        types = tuple(spec)
        if len(set(types)) != len(types):
            return None
    else:
        return None
    if any(t not in _TYPES for t in types):
        return None

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        for name in types:
            if is_type(value, name):
                return None
        return _type_fail(path, types, value)

    return check


def _enum(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if not isinstance(spec, list):
        return None
    options = tuple(spec)
    shown = ", ".join(_show_schema_value(v) for v in options[:10])
    if len(options) > 10:
        shown += ", ..."

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        for option in options:
            if json_equal(value, option):
                return None
        return f"{_where(path)} must be one of {shown}, got {_show(value)}"

    return check


def _const(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    shown = _show_schema_value(spec)

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        if json_equal(value, spec):
            return None
        return f"{_where(path)} must be {shown}, got {_show(value)}"

    return check


def _bound(op: str, name: str) -> Callable[[Any, Mapping[str, Any]], _Check | None]:
    fits: Callable[[Any, Any], bool] = {
        ">=": lambda v, b: v >= b, "<=": lambda v, b: v <= b,
        ">": lambda v, b: v > b, "<": lambda v, b: v < b,
    }[op]

    def make(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
        if not _is_number(spec):
            return None
        shown = _show(spec)

        def check(value: Any, path: tuple[str | int, ...]) -> str | None:
            if not _is_number(value) or fits(value, spec):
                return None
            return f"{_where(path)} must be {op} {shown}, got {_show(value)}"

        return check

    return make


def _length(kind: str, least: bool) -> Callable[[Any, Mapping[str, Any]], _Check | None]:
    """``minLength`` and friends: ``kind`` is the JSON type they apply to."""
    unit = {"string": "characters", "array": "items", "object": "properties"}[kind]
    word = "at least" if least else "at most"

    def make(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
        if not _is_count(spec):
            return None
        limit = spec

        def check(value: Any, path: tuple[str | int, ...]) -> str | None:
            if not is_type(value, kind):
                return None
            size = len(value)
            if (size >= limit) if least else (size <= limit):
                return None
            verb = "be" if kind == "string" else "have"
            long = " long" if kind == "string" else ""
            return f"{_where(path)} must {verb} {word} {int(limit)} {unit}{long}, got {size}"

        return check

    return make


def _pattern(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if not isinstance(spec, str):
        return None
    try:
        compiled = re.compile(spec)
    except re.error:
        return None
    shown = _show_schema_value(spec)

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        if not isinstance(value, str) or compiled.search(value):
            return None
        return f"{_where(path)} must match the pattern {shown}, got {_show(value)}"

    return check


def _unique(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if not isinstance(spec, bool):
        return None
    if not spec:
        return _accept

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        if not isinstance(value, list):
            return None
        index = repeated_item(value)
        if index is None:
            return None
        return f"{_where(path)} must not repeat items (item {index} is a repeat)"

    return check


def _required(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if not isinstance(spec, list) or not all(isinstance(k, str) for k in spec):
        return None
    if len(set(spec)) != len(spec):
        return None
    keys = tuple(spec)
    if not keys:
        return _accept

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        if not isinstance(value, dict):
            return None
        missing = [k for k in keys if k not in value]
        if not missing:
            return None
        if not path:
            plural = "s" if len(missing) > 1 else ""
            return f"missing required argument{plural} {_names(missing)}"
        plural = "properties" if len(missing) > 1 else "property"
        return f"{_where(path)} is missing required {plural} {_names(missing)}"

    return check


def _properties(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    """``properties`` and ``additionalProperties`` together (the second needs the first)."""
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return None
    compiled: dict[str, _Check] = {}
    for key, sub in spec.items():
        made = _compile(sub)
        if made is None:
            return None
        compiled[key] = made
    extra_spec = schema.get("additionalProperties", True)
    extra = _compile(extra_spec)
    if extra is None:
        return None
    known = tuple(spec)
    closed = extra_spec is False
    checked = {k: c for k, c in compiled.items() if c is not _accept}
    if not checked and extra is _accept:
        return _accept

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        if not isinstance(value, dict):
            return None
        if closed:
            unexpected = [k for k in value if k not in compiled]
            if unexpected:
                if not path:
                    plural = "s" if len(unexpected) > 1 else ""
                    expected = f" (expected: {', '.join(known)})" if known else ""
                    if len(expected) > 200:
                        expected = ""
                    return f"unexpected argument{plural} {_names(unexpected)}{expected}"
                plural = "properties" if len(unexpected) > 1 else "property"
                return f"{_where(path)} has unexpected {plural} {_names(unexpected)}"
        for key, item in value.items():
            sub = checked.get(key)
            if sub is None:
                if key in compiled or extra is _accept:
                    continue
                sub = extra
            fail = sub(item, (*path, key))
            if fail is not None:
                return fail
        return None

    return check


def _additional(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if "properties" in schema:
        return _accept  # compiled together with properties
    return _properties({}, schema)


def _items(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    """``prefixItems`` and ``items`` together (``items`` is for what follows the prefix)."""
    prefix_spec = schema.get("prefixItems", [])
    if not isinstance(prefix_spec, list) or ("prefixItems" in schema and not prefix_spec):
        return None
    prefix: list[_Check] = []
    for sub in prefix_spec:
        made = _compile(sub)
        if made is None:
            return None
        prefix.append(made)
    rest = _compile(spec)
    if rest is None:
        return None
    head = tuple(prefix)
    if all(c is _accept for c in head) and rest is _accept:
        return _accept

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        if not isinstance(value, list):
            return None
        for index, item in enumerate(value):
            sub = head[index] if index < len(head) else rest
            fail = sub(item, (*path, index))
            if fail is not None:
                if sub is _refuse:
                    return f"{_where(path)} must have at most {len(head)} items, got {len(value)}"
                return fail
        return None

    return check


def _prefix_items(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    if "items" in schema:
        return _accept  # compiled together with items
    return _items(True, schema)


def _branches(spec: Any) -> tuple[_Check, ...] | None:
    if not isinstance(spec, list) or not spec:
        return None
    made = [_compile(s) for s in spec]
    if any(m is None for m in made):
        return None
    return tuple(m for m in made if m is not None)


def _no_branch(path: tuple[str | int, ...], value: Any, fails: list[str]) -> str:
    """The message when no branch of ``anyOf``/``oneOf`` fits: the expected types when
    every branch wanted another type, else the complaint of the branch that got furthest."""
    depth = len(path)
    if all(isinstance(f, _TypeFail) and f.depth == depth for f in fails):
        types: list[str] = []
        for fail in fails:
            assert isinstance(fail, _TypeFail)
            types.extend(t for t in fail.types if t not in types)
        return _type_fail(path, types, value)
    for fail in fails:  # a branch whose type fits, failing inside: the likely intent
        if not (isinstance(fail, _TypeFail) and fail.depth == depth):
            return fail
    return fails[0]  # pragma: no cover - every branch failed on its type (handled above)


def _any_of(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    branches = _branches(spec)
    if branches is None:
        return None
    if _accept in branches:
        return _accept

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        fails: list[str] = []
        for branch in branches:
            fail = branch(value, path)
            if fail is None:
                return None
            fails.append(fail)
        return _no_branch(path, value, fails)

    return check


def _one_of(spec: Any, schema: Mapping[str, Any]) -> _Check | None:
    branches = _branches(spec)
    if branches is None:
        return None

    def check(value: Any, path: tuple[str | int, ...]) -> str | None:
        fails: list[str] = []
        for branch in branches:
            fail = branch(value, path)
            if fail is not None:
                fails.append(fail)
        matched = len(branches) - len(fails)
        if matched == 1:
            return None
        if matched > 1:
            return f"{_where(path)} matches more than one of the allowed forms"
        return _no_branch(path, value, fails)

    return check


_KEYWORDS: dict[str, Callable[[Any, Mapping[str, Any]], _Check | None]] = {
    "type": _type,
    "$ref": _ref,
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "minimum": _bound(">=", "minimum"),
    "maximum": _bound("<=", "maximum"),
    "exclusiveMinimum": _bound(">", "exclusiveMinimum"),
    "exclusiveMaximum": _bound("<", "exclusiveMaximum"),
    "minLength": _length("string", True),
    "maxLength": _length("string", False),
    "pattern": _pattern,
    "minItems": _length("array", True),
    "maxItems": _length("array", False),
    "uniqueItems": _unique,
    "prefixItems": _prefix_items,
    "items": _items,
    "required": _required,
    "minProperties": _length("object", True),
    "maxProperties": _length("object", False),
    "additionalProperties": _additional,
    "properties": _properties,
}
#: The order checks run in: the type first (its message is the clearest), missing
#: arguments before the values of the present ones.
_ORDER = tuple(_KEYWORDS)


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
