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
from typing import Any

Check = Callable[[Any], bool]
#: A check that also reports which object keys it evaluated (for unevaluatedProperties).
_Eval = Callable[[Any], "set[str] | None"]

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


def _compile(schema: Any) -> _Eval:
    """A function returning the set of evaluated keys (objects) or an empty set when the
    instance is valid, and ``None`` when it is not."""
    if schema is True:
        return lambda value: set()
    if schema is False:
        return lambda value: None
    if not isinstance(schema, dict):
        raise _Unsupported(repr(schema))
    unknown = set(schema) - _SUPPORTED
    if unknown:
        raise _Unsupported(", ".join(sorted(unknown)))
    checks: list[Check] = []
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        for kind in allowed:
            _is_type(None, kind)  # raises for an unknown type name
        if len(allowed) == 1 and allowed[0] in _PLAIN_TYPES:
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
        checks.append(lambda v: any(_equal(v, o) for o in options))
    if "pattern" in schema:
        search = re.compile(schema["pattern"]).search
        checks.append(lambda v: not isinstance(v, str) or search(v) is not None)
    if "minLength" in schema:
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
    if "items" in schema:
        item = _compile(schema["items"])
        def items(v: Any) -> bool:
            if isinstance(v, list):
                for x in v:
                    if item(x) is None:
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
        name_check = _compile(schema["propertyNames"])
        def names_valid(v: Any) -> bool:
            if isinstance(v, dict):
                for k in v:
                    if name_check(k) is None:
                        return False
            return True

        checks.append(names_valid)
    one_of = [_compile(s) for s in schema.get("oneOf", [])]
    all_of = [_compile(s) for s in schema.get("allOf", [])]
    properties = {k: _compile(s) for k, s in schema.get("properties", {}).items()}
    additional = (
        _compile(schema["additionalProperties"]) if "additionalProperties" in schema else None
    )
    unevaluated = schema.get("unevaluatedProperties")
    if unevaluated not in (None, False):
        raise _Unsupported("unevaluatedProperties other than false")

    if not properties and additional is None and not all_of and not one_of and unevaluated is None:
        # A leaf (a name, a string, a list of names): its checks are all there is.
        def evaluate_leaf(value: Any) -> set[str] | None:
            for check in checks:
                if not check(value):
                    return None
            return set()

        return evaluate_leaf

    def evaluate(value: Any) -> set[str] | None:
        for check in checks:
            if not check(value):
                return None
        seen: set[str] = set()
        if isinstance(value, dict):
            # One pass over the instance's keys (a phase has 2 of its 13 properties): the
            # same checks as properties then additionalProperties, in another order, and
            # only a yes counts (an invalid or undecided instance goes to jsonschema).
            for key, item in value.items():
                sub = properties.get(key, additional)
                if sub is not None:
                    if sub(item) is None:
                        return None
                    seen.add(key)
        for sub in all_of:
            got = sub(value)
            if got is None:
                return None
            seen |= got
        if one_of:
            passing = [got for got in (sub(value) for sub in one_of) if got is not None]
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
