"""The one JSON-Schema compiler: a schema compiled once into a fast yes/no check.

Two callers, one subset of draft 2020-12:

* :mod:`phaseflow.spec.fastschema` checks a workflow file against the schema file, so a
  valid file never imports ``jsonschema`` (~60 ms, a third of ``phaseflow validate``); on a
  no, ``jsonschema`` explains every error with positions.
* :mod:`phaseflow.tools.arguments` checks a model's tool-call arguments; on a no, its
  messages name the argument and what is wrong with it.

The compiler refuses any keyword it does not implement (:func:`compile_check` returns
``None``), so a schema edit can never silently weaken validation: the caller then uses
jsonschema. Property tests check that both give jsonschema's verdict. The JSON semantics
every checker of either caller shares (:func:`is_type`, :func:`json_equal`,
:func:`json_type`, from :mod:`phaseflow.expr.describe`, where messages of lower
layers use it too) live here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sized
from collections.abc import Set as AbstractSet
from contextvars import ContextVar
from typing import Any

from phaseflow.expr.describe import json_type

__all__ = [
    "ANNOTATIONS", "Check", "compile_check", "is_type", "json_equal", "json_type", "repeated_item",
]

Check = Callable[[Any], bool]
#: A check that also reports which object keys it evaluated (for unevaluatedProperties).
_Eval = Callable[[Any], "AbstractSet[str] | None"]

#: The annotations every caller ignores; a caller may ignore more (``format``...).
ANNOTATIONS = frozenset(
    {"description", "title", "$schema", "$id", "$comment", "default", "examples"}
)
_KEYWORDS = frozenset({
    "type", "properties", "additionalProperties", "required", "enum", "const", "pattern",
    "minLength", "minProperties", "items", "minimum", "maximum", "exclusiveMinimum", "oneOf",
    "allOf", "anyOf", "maxLength", "minItems", "maxItems", "maxProperties", "exclusiveMaximum",
    "dependentRequired", "propertyNames", "unevaluatedProperties", "uniqueItems",
})
#: What the compiling schema may name (set per compile_check call).
_SUPPORTED: ContextVar[frozenset[str]] = ContextVar(
    "phaseflow_jsonschema_supported", default=ANNOTATIONS | _KEYWORDS
)
_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


class _Unsupported(Exception):
    pass


# -- JSON semantics (draft 2020-12, as jsonschema reads it) --------------------------------

def is_type(value: Any, name: str) -> bool:
    """Is ``value`` of JSON type ``name`` (``1.0`` is an integer, ``true`` no number)?"""
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if name == "number":
        return isinstance(value, int | float)
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    raise _Unsupported(name)


def json_equal(one: Any, two: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0`` (jsonschema's rule)."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(
            json_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, dict) and isinstance(two, dict):
        return len(one) == len(two) and all(
            k in two and json_equal(v, two[k]) for k, v in one.items())
    if isinstance(one, bool) or isinstance(two, bool):
        return False  # one is not the other (checked above), and a bool equals only itself
    if isinstance(one, list | dict) or isinstance(two, list | dict):
        return False
    return bool(one == two)


#: The types ``is_type`` tests with one isinstance (no bool/number subtlety).
_PLAIN_TYPES: dict[str, type] = {"string": str, "object": dict, "array": list}

#: The evaluated keys of a valid non-object (shared: callers only read it or merge it).
_EMPTY: frozenset[str] = frozenset()

#: Keywords that make a schema more than a conjunction of checks on the value itself.
_STRUCTURAL = (
    "properties", "additionalProperties", "allOf", "anyOf", "oneOf", "unevaluatedProperties"
)


#: The size keywords: each bounds the length of one kind of value, and holds for others.
_SIZE_BOUNDS: tuple[tuple[str, type[Sized], bool], ...] = (
    ("minLength", str, True), ("maxLength", str, False),
    ("minProperties", dict, True), ("maxProperties", dict, False),
    ("minItems", list, True), ("maxItems", list, False),
)


def _size_bound(kind: type[Sized], least: bool, bound: int) -> Check:
    """A value that is no ``kind`` passes; one that is has at least (``least``) or at
    most ``bound`` characters, properties or items."""
    if least:
        return lambda v: not isinstance(v, kind) or len(v) >= bound
    return lambda v: not isinstance(v, kind) or len(v) <= bound


def _every(kind: type[list[Any]] | type[dict[str, Any]], check: Check) -> Check:
    """Holds for a value that is no ``kind``, or whose every member passes ``check``: an
    array's items (``items``), an object's keys (``propertyNames``). A loop, not
    ``all(...)``: no generator per value."""
    def every(v: Any) -> bool:
        if isinstance(v, kind):
            for x in v:
                if not check(x):
                    return False
        return True

    return every


def _checks(schema: dict[str, Any]) -> list[Check]:
    """The plain yes/no checks of ``schema``'s keywords on the value itself."""
    unknown = set(schema) - _SUPPORTED.get()
    if unknown:
        raise _Unsupported(", ".join(sorted(unknown)))
    checks: list[Check] = []
    kinds = schema.get("type")
    fused_pattern = fused_length = fused_items = False
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        for kind in allowed:
            if kind not in _TYPES:
                raise _Unsupported(kind)
        if allowed == ["string"] and "pattern" in schema:
            # the most common leaf (a name): one call instead of two
            fused_search = re.compile(schema["pattern"]).search
            checks.append(lambda v: isinstance(v, str) and fused_search(v) is not None)
            fused_pattern = True
        elif allowed == ["string"] and "minLength" in schema:
            # a text that may not be empty (a goal): one call too
            shortest = schema["minLength"]
            checks.append(lambda v: isinstance(v, str) and len(v) >= shortest)
            fused_length = True
        elif allowed == ["array"] and "items" in schema:
            # a list of names, of transitions: the type and the items in one call
            each = _compile_check(schema["items"])

            def typed_items(v: Any) -> bool:
                if not isinstance(v, list):
                    return False
                for x in v:  # noqa: SIM110 - a loop, not all(...): no generator per list
                    if not each(x):
                        return False
                return True

            checks.append(typed_items)
            fused_items = True
        elif len(allowed) == 1 and allowed[0] in _PLAIN_TYPES:
            plain = _PLAIN_TYPES[allowed[0]]
            checks.append(lambda v: isinstance(v, plain))
        elif len(allowed) == 1:
            only = allowed[0]
            checks.append(lambda v: is_type(v, only))
        else:
            checks.append(lambda v, a=tuple(allowed): any(is_type(v, k) for k in a))  # type: ignore[misc]
    if "const" in schema:
        const = schema["const"]
        checks.append(lambda v: json_equal(v, const))
    if "enum" in schema:
        options = list(schema["enum"])
        if options and all(type(o) is str for o in options):
            # only a string equals a string option under JSON equality
            strings = frozenset(options)
            checks.append(lambda v: type(v) is str and v in strings)
        else:
            checks.append(lambda v: any(json_equal(v, o) for o in options))
    if "pattern" in schema and not fused_pattern:
        search = re.compile(schema["pattern"]).search
        checks.append(lambda v: not isinstance(v, str) or search(v) is not None)
    for keyword, kind, least in _SIZE_BOUNDS:
        if keyword in schema and not (fused_length and keyword == "minLength"):
            checks.append(_size_bound(kind, least, schema[keyword]))
    # Written as jsonschema tests them (the error case negated), so NaN agrees too.
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda v: not is_type(v, "number") or not v < low)
    if "maximum" in schema:
        high = schema["maximum"]
        checks.append(lambda v: not is_type(v, "number") or not v > high)
    if "exclusiveMaximum" in schema:
        below = schema["exclusiveMaximum"]
        checks.append(lambda v: not is_type(v, "number") or not v >= below)
    if "exclusiveMinimum" in schema:
        above = schema["exclusiveMinimum"]
        checks.append(lambda v: not is_type(v, "number") or not v <= above)
    if "items" in schema and not fused_items:
        checks.append(_every(list, _compile_check(schema["items"])))
    if schema.get("uniqueItems") is True:
        checks.append(_unique)
    if "required" in schema:
        required = tuple(schema["required"])
        def has_required(v: Any) -> bool:
            if isinstance(v, dict):
                for k in required:
                    if k not in v:
                        return False
            return True

        checks.append(has_required)
    if "dependentRequired" in schema:
        depends = {k: tuple(v) for k, v in schema["dependentRequired"].items()}
        checks.append(lambda v: not isinstance(v, dict) or all(
            all(d in v for d in need) for k, need in depends.items() if k in v))
    if "propertyNames" in schema:
        checks.append(_every(dict, _compile_check(schema["propertyNames"])))
    return checks


def _fuse(checks: list[Check]) -> Check:
    """One check that holds when all of ``checks`` do (the common counts without a loop)."""
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    if len(checks) == 3:
        c0, c1, c2 = checks
        return lambda v: c0(v) and c1(v) and c2(v)
    every = tuple(checks)

    def all_hold(v: Any) -> bool:
        return all(check(v) for check in every)

    return all_hold


def _is_leaf(schema: Any) -> bool:
    return isinstance(schema, dict) and not any(k in schema for k in _STRUCTURAL)


def _compile_check(schema: Any) -> Check:
    """A plain yes/no check for ``schema``, where the keys it evaluated are not needed
    (array items, property names and property values)."""
    if schema is True:
        return lambda v: True
    if schema is False:
        return lambda v: False
    if _is_leaf(schema):
        return _fuse(_checks(schema))
    if (
        isinstance(schema, dict)
        and "properties" in schema
        and not any(k in schema for k in ("anyOf", "oneOf", "allOf", "unevaluatedProperties"))
    ):
        # An object of known properties (a phase, a transition), as evaluate_object in
        # _compile, without making the set of its evaluated keys nobody reads here.
        holds = _fuse(_checks(schema))
        lookup = {k: _compile_check(s) for k, s in schema["properties"].items()}.get
        additional = (
            _compile_check(schema["additionalProperties"])
            if "additionalProperties" in schema else None
        )
        own = {k: v for k, v in schema.items() if k not in _STRUCTURAL}
        if own.get("type") == "object" and not _checks(
            {k: v for k, v in own.items() if k not in ("type", "required")}
        ):
            # Its own checks are "an object, with these keys" (both of them): inlined, no
            # call for them (there is one such object per phase and per transition).
            required = tuple(own.get("required", ()))

            def plain_object_holds(value: Any) -> bool:
                if not isinstance(value, dict):
                    return False
                for key in required:
                    if key not in value:
                        return False
                for key, item in value.items():
                    sub = lookup(key, additional)
                    if sub is not None and not sub(item):
                        return False
                return True

            return plain_object_holds

        def object_holds(value: Any) -> bool:
            if not holds(value):
                return False
            if isinstance(value, dict):
                for key, item in value.items():
                    sub = lookup(key, additional)
                    if sub is not None and not sub(item):
                        return False
            return True

        return object_holds
    evaluate = _compile(schema)
    return lambda v: evaluate(v) is not None


def _compile(schema: Any) -> _Eval:
    """A function returning the set of evaluated keys (objects) or an empty set when the
    instance is valid, and ``None`` when it is not."""
    if schema is True:
        return lambda value: _EMPTY
    if schema is False:
        return lambda value: None
    if not isinstance(schema, dict):
        raise _Unsupported(repr(schema))
    checks = _checks(schema)
    one_of = [_compile(s) for s in schema.get("oneOf", [])]
    any_of = [_compile(s) for s in schema.get("anyOf", [])]
    if ("anyOf" in schema and not any_of) or ("oneOf" in schema and not one_of):
        raise _Unsupported("an empty anyOf or oneOf")
    all_of = [_compile(s) for s in schema.get("allOf", [])]
    properties = {k: _compile_check(s) for k, s in schema.get("properties", {}).items()}
    additional = (
        _compile_check(schema["additionalProperties"])
        if "additionalProperties" in schema else None
    )
    unevaluated = schema.get("unevaluatedProperties")
    if unevaluated not in (None, False):
        raise _Unsupported("unevaluatedProperties other than false")
    holds = _fuse(checks)

    combined = all_of or any_of or one_of
    if not properties and additional is None and not combined and unevaluated is None:
        # A leaf (a name, a string, a list of names): its checks are all there is.
        def evaluate_leaf(value: Any) -> AbstractSet[str] | None:
            return _EMPTY if holds(value) else None

        return evaluate_leaf

    if not combined and unevaluated is None:
        # An object of known properties (a phase, a transition): one pass over its keys.
        lookup = properties.get

        def evaluate_object(value: Any) -> AbstractSet[str] | None:
            if not holds(value):
                return None
            if not isinstance(value, dict):
                return _EMPTY
            for key, item in value.items():
                sub = lookup(key, additional)
                if sub is not None and not sub(item):
                    return None
            if additional is not None:
                return set(value)
            return {key for key in value if key in properties}

        return evaluate_object

    def evaluate(value: Any) -> AbstractSet[str] | None:
        if not holds(value):
            return None
        seen: set[str] = set()
        if isinstance(value, dict):
            # One pass over the instance's keys (a phase has 2 of its 13 properties): the
            # same checks as properties then additionalProperties, in another order, and
            # only a yes counts (an invalid or undecided instance goes to jsonschema).
            for key, item in value.items():
                sub = properties.get(key, additional)
                if sub is not None:
                    if not sub(item):
                        return None
                    seen.add(key)
        for each in all_of:
            got = each(value)
            if got is None:
                return None
            seen |= got
        if any_of:
            passing = [got for got in (each(value) for each in any_of) if got is not None]
            if not passing:
                return None
            for got in passing:
                seen |= got
        if one_of:
            passing = [got for got in (each(value) for each in one_of) if got is not None]
            if len(passing) != 1:
                return None
            seen |= passing[0]
        if unevaluated is False and isinstance(value, dict) and any(k not in seen for k in value):
            return None
        return seen

    return evaluate


def _canonical(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (``1`` and ``1.0``; not ``true``)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, list | tuple):
        return ("l", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("d", frozenset((k, _canonical(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:  # not JSON (a set of lists...): never equal to another item
        return ("o", id(value))
    return ("s", value)


def repeated_item(value: list[Any]) -> int | None:
    """The index of the first item JSON-equal to an earlier one, ``None`` when none is."""
    seen: set[Any] = set()
    for index, item in enumerate(value):
        key = _canonical(item)
        if key in seen:
            return index
        seen.add(key)
    return None


def _unique(value: Any) -> bool:
    return not isinstance(value, list) or repeated_item(value) is None


def compile_check(schema: Any, *, annotations: AbstractSet[str] = frozenset()) -> Check | None:
    """A yes/no check of values against ``schema`` (with ``$ref``s already inlined),
    compiled once; ``None`` when the schema uses a keyword this module does not implement
    or has a shape it does not read (the caller then asks jsonschema). ``annotations``:
    more keywords to ignore. A value nested too deeply raises :class:`RecursionError`."""
    token = _SUPPORTED.set(ANNOTATIONS | _KEYWORDS | frozenset(annotations))
    try:
        return _compile_check(schema)
    except (_Unsupported, re.error, TypeError, AttributeError, RecursionError):
        return None
    finally:
        _SUPPORTED.reset(token)
