"""A fast yes/no check of the workflow schema, so a valid file never imports jsonschema.

``jsonschema`` costs ~60 ms to import, a third of ``phaseflow validate``'s run time on a
typical file in a pre-commit hook. Most files checked on a commit are valid, and for those
a yes is all we need. So the schema file is compiled here, once, into plain closures for
exactly the keywords it uses; when the answer is no, the caller runs jsonschema to explain
every error (that path is unchanged and still the only source of schema diagnostics).

The compiler refuses any keyword it does not implement (``compile_schema`` returns
``None``), so a schema edit can never silently weaken validation: the caller then always
uses jsonschema. A property test checks that both give the same verdict.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

Check = Callable[[Any], bool]
#: A check that also reports which object keys it evaluated (for unevaluatedProperties).
_Eval = Callable[[Any], "AbstractSet[str] | None"]

_ANNOTATIONS = frozenset(
    {"description", "title", "$schema", "$id", "$comment", "default", "examples"}
)
_SUPPORTED = _ANNOTATIONS | {
    "type", "properties", "additionalProperties", "required", "enum", "const", "pattern",
    "minLength", "minProperties", "items", "minimum", "maximum", "exclusiveMinimum", "oneOf",
    "allOf",
    "dependentRequired", "propertyNames", "unevaluatedProperties", "uniqueItems",
}
_MAX_UNIQUE = 2_000  # longer lists: let jsonschema decide


class _Unsupported(Exception):
    pass


#: The types ``_is_type`` tests with one isinstance (no bool/number subtlety).
_PLAIN_TYPES: dict[str, type] = {"string": str, "object": dict, "array": list}


def _is_type(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    raise _Unsupported(kind)


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0``, but a boolean is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


#: The evaluated keys of a valid non-object (shared: callers only read it or merge it).
_EMPTY: frozenset[str] = frozenset()

#: Keywords that make a schema more than a conjunction of checks on the value itself.
_STRUCTURAL = ("properties", "additionalProperties", "allOf", "oneOf", "unevaluatedProperties")


def _checks(schema: dict[str, Any]) -> list[Check]:
    """The plain yes/no checks of ``schema``'s keywords on the value itself."""
    unknown = set(schema) - _SUPPORTED
    if unknown:
        raise _Unsupported(", ".join(sorted(unknown)))
    checks: list[Check] = []
    kinds = schema.get("type")
    fused_pattern = fused_length = fused_items = False
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        for kind in allowed:
            _is_type(None, kind)  # raises for an unknown type name
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
            checks.append(lambda v: _is_type(v, only))
        else:
            checks.append(lambda v, a=tuple(allowed): any(_is_type(v, k) for k in a))  # type: ignore[misc]
    if "const" in schema:
        const = schema["const"]
        checks.append(lambda v: _equal(v, const))
    if "enum" in schema:
        options = list(schema["enum"])
        if options and all(type(o) is str for o in options):
            # only a string equals a string option under JSON equality
            strings = frozenset(options)
            checks.append(lambda v: type(v) is str and v in strings)
        else:
            checks.append(lambda v: any(_equal(v, o) for o in options))
    if "pattern" in schema and not fused_pattern:
        search = re.compile(schema["pattern"]).search
        checks.append(lambda v: not isinstance(v, str) or search(v) is not None)
    if "minLength" in schema and not fused_length:
        least = schema["minLength"]
        checks.append(lambda v: not isinstance(v, str) or len(v) >= least)
    # Written as jsonschema tests them (the error case negated), so NaN agrees too.
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda v: not _is_type(v, "number") or not v < low)
    if "maximum" in schema:
        high = schema["maximum"]
        checks.append(lambda v: not _is_type(v, "number") or not v > high)
    if "exclusiveMinimum" in schema:
        above = schema["exclusiveMinimum"]
        checks.append(lambda v: not _is_type(v, "number") or not v <= above)
    if "items" in schema and not fused_items:
        item = _compile_check(schema["items"])
        def items(v: Any) -> bool:
            if isinstance(v, list):
                for x in v:
                    if not item(x):
                        return False
            return True

        checks.append(items)
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
    if "minProperties" in schema:
        fewest = schema["minProperties"]
        checks.append(lambda v: not isinstance(v, dict) or len(v) >= fewest)
    if "dependentRequired" in schema:
        depends = {k: tuple(v) for k, v in schema["dependentRequired"].items()}
        checks.append(lambda v: not isinstance(v, dict) or all(
            all(d in v for d in need) for k, need in depends.items() if k in v))
    if "propertyNames" in schema:
        name_check = _compile_check(schema["propertyNames"])
        def names_valid(v: Any) -> bool:
            if isinstance(v, dict):
                for k in v:
                    if not name_check(k):
                        return False
            return True

        checks.append(names_valid)
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
        and not any(k in schema for k in ("oneOf", "allOf", "unevaluatedProperties"))
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

    if not properties and additional is None and not all_of and not one_of and unevaluated is None:
        # A leaf (a name, a string, a list of names): its checks are all there is.
        def evaluate_leaf(value: Any) -> AbstractSet[str] | None:
            return _EMPTY if holds(value) else None

        return evaluate_leaf

    if not all_of and not one_of and unevaluated is None:
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
        if one_of:
            passing = [got for got in (each(value) for each in one_of) if got is not None]
            if len(passing) != 1:
                return None
            seen |= passing[0]
        if unevaluated is False and isinstance(value, dict) and any(k not in seen for k in value):
            return None
        return seen

    return evaluate


def _unique(value: Any) -> bool:
    if not isinstance(value, list):
        return True
    if len(value) > _MAX_UNIQUE:
        raise _Overflow
    return all(not _equal(value[i], value[j])
               for i in range(len(value)) for j in range(i + 1, len(value)))


class _Overflow(Exception):
    """The fast check declines to decide (the caller asks jsonschema)."""


def compile_schema(schema: dict[str, Any]) -> Callable[[Any], bool | None] | None:
    """A checker for ``schema`` (with ``$ref``s already inlined): ``True`` valid, ``False``
    invalid, ``None`` undecided. ``None`` instead of a checker when the schema uses a
    keyword this module does not implement."""
    try:
        evaluate = _compile(schema)
    except (_Unsupported, re.error, TypeError, AttributeError):
        return None

    def check(instance: Any) -> bool | None:
        try:
            return evaluate(instance) is not None
        except (_Overflow, RecursionError):
            return None

    return check
