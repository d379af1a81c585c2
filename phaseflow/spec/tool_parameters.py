"""Is a tool's ``parameters`` a valid JSON Schema (draft 2020-12), using only its keywords?

The workflow schema already says that ``parameters`` is a mapping with ``type: object``
(a tool takes keyword arguments); whether the rest is a valid schema is a question for
the draft 2020-12 meta-schema. jsonschema answers it, imported here only when a tool has
``parameters`` (it costs ~90 ms to import, and ``phaseflow validate`` stays lean for
every other file). The answer is a list of problems, each with the path inside the
schema where it is, so the compiler can point at the exact YAML node.

The meta-schema lets any unknown keyword through (draft 2020-12 calls them annotations),
so ``{type: string, description: The phone, E.164}`` passes it with a cut description and
a keyword ``E.164``, and ``requried: [id]`` silently makes every argument optional.
:func:`unknown_keywords` walks the subschemas and reports each keyword outside the
vocabulary (PF104), at its key, with "did you mean".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phaseflow.expr.describe import clip, closest_hint, did_you_mean
from phaseflow.spec import yamlnodes
from phaseflow.spec.flow_cuts import cut_keys, quote_hint, written_empty
from phaseflow.spec.scalar_positions import SourceText
from phaseflow.spec.schema import entries

__all__ = [
    "JSON_SCHEMA_TYPES",
    "MAX_PARAMETER_NODES",
    "SCHEMA_KEYWORDS",
    "parameter_problems",
    "unknown_keywords",
]

#: The largest ``parameters`` schema checked, in values (mappings, lists and scalars):
#: a real tool's schema has tens; a hostile one (aliases expand a file) must stay cheap.
MAX_PARAMETER_NODES = 10_000

#: The type names of JSON Schema, for a helpful message about a misspelt one.
JSON_SCHEMA_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")

#: A problem: the path inside the schema (keys and list indices), and what is wrong there.
Problem = tuple[tuple[str | int, ...], str]

#: The keywords a draft 2020-12 schema may use: every vocabulary of the meta-schema (core,
#: applicator, unevaluated, validation, meta-data, format, content) and the four it keeps
#: for older drafts (``definitions``, ``dependencies``, ``$recursiveAnchor``,
#: ``$recursiveRef``). A test holds this to jsonschema's copy of the meta-schemas.
SCHEMA_KEYWORDS = frozenset({
    # core
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
    "$comment", "$defs",
    # applicator
    "prefixItems", "items", "contains", "additionalProperties", "properties",
    "patternProperties", "dependentSchemas", "propertyNames", "if", "then", "else",
    "allOf", "anyOf", "oneOf", "not",
    # unevaluated
    "unevaluatedItems", "unevaluatedProperties",
    # validation
    "type", "const", "enum", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
    "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
    "required", "dependentRequired",
    # meta-data, format, content
    "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
    "format", "contentEncoding", "contentMediaType", "contentSchema",
    # kept by the 2020-12 meta-schema for older drafts
    "definitions", "dependencies", "$recursiveAnchor", "$recursiveRef",
})
_KEYWORD_POOL = sorted(SCHEMA_KEYWORDS)
#: An extension keyword (OpenAPI's convention): sent to the model as written, never flagged.
EXTENSION_PREFIX = "x-"

#: Keywords whose value is one subschema, a mapping of names to subschemas, or a list of
#: subschemas: the places the walk looks for more keywords (every other value is data).
_ONE_SCHEMA = frozenset({
    "additionalProperties", "items", "contains", "propertyNames", "if", "then", "else",
    "not", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
})
_NAMED_SCHEMAS = frozenset({
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
    "dependencies",  # its values may also be lists of names (data): those are skipped
})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})

#: Keywords of other dialects that people write, and what draft 2020-12 says instead.
_OTHER_DIALECTS = {
    "nullable": "'nullable' is OpenAPI 3.0, not JSON Schema: allow null with "
                "type: [{type}, 'null']",
    "additionalItems": "draft 2020-12 has no 'additionalItems': 'items' applies to the "
                       "items after 'prefixItems'",
}

#: How many unknown keywords of one schema get a "did you mean" (a garbage schema with
#: thousands stays fast; past that the message says what the vocabulary is).
_HINTED_KEYWORDS = 100

#: A keyword outside the vocabulary: its key node, its path and the message.
KeywordProblem = tuple[yamlnodes.Scalar, tuple[str | int, ...], str]


def _size(value: Any, limit: int) -> int:
    """How many values ``value`` holds, counting up to just past ``limit`` (no recursion)."""
    count = 0
    stack = [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count


_WANTED = {"object": "a mapping", "boolean": "true or false", "string": "a string",
           "array": "a list", "number": "a number", "integer": "an integer"}


def _null_message(path: tuple[str | int, ...], wanted: Any) -> str:
    """What the meta-schema says of a null where it wants a value, in a user's words
    (jsonschema's own message prints Python's ``None``)."""
    kinds = wanted if isinstance(wanted, list) else [wanted]
    what = " or ".join(_WANTED.get(str(k), str(k)) for k in kinds)
    if set(kinds) == {"object", "boolean"}:
        what = "a schema (a mapping, or true or false)"
    name = f"'{clip(str(path[-1]))}'" if path and isinstance(path[-1], str) else "the item"
    return f"{name} is empty (null), but must be {what}; write its value, or remove it"


def parameter_problems(schema: Mapping[str, Any]) -> list[Problem]:
    """What makes ``schema`` an invalid draft 2020-12 JSON Schema (at most one problem,
    jsonschema's best match; none when it is valid). Never raises."""
    if _size(schema, MAX_PARAMETER_NODES) > MAX_PARAMETER_NODES:
        return [((), f"the schema is too large to check (over {MAX_PARAMETER_NODES:,} values)")]
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        path = tuple(error.absolute_path)
        instance = error.instance
        if path and path[-1] == "type" and isinstance(instance, str):
            hint = did_you_mean(instance, JSON_SCHEMA_TYPES)
            return [(path, f"'{clip(instance)}' is not a JSON Schema type "
                           f"({', '.join(JSON_SCHEMA_TYPES)}){hint}")]
        if instance is None and error.validator == "type":
            return [(path, _null_message(path, error.validator_value))]
        return [(path, clip(str(error.message), 200))]
    except (RecursionError, MemoryError):
        return [((), "the schema is too deeply nested to check")]
    except Exception as exc:  # a meta-schema check must never crash the validator
        return [((), f"the schema cannot be checked: {type(exc).__name__}")]
    return []


def unknown_keywords(root: yamlnodes.Node, source: SourceText | None = None
                     ) -> list[KeywordProblem]:
    """Each keyword of the schema written at ``root`` (and of its subschemas, at any depth)
    that draft 2020-12 does not have and that is not an ``x-`` extension, in the order
    written, once where it is written (an alias or a merge key may use it many times).
    With the file's ``source``, a key written without ':' in a flow mapping
    (``{description: The phone, E.164}``: a ',' in an unquoted value started it) gets the
    fix: quote the value it was cut from. Looks at most :data:`MAX_PARAMETER_NODES` keys,
    without recursion, in time linear in them; never raises."""
    found: list[KeywordProblem] = []
    stack: list[tuple[yamlnodes.Node, tuple[str | int, ...]]] = [(root, ())]
    budget = MAX_PARAMETER_NODES
    reported: set[int] = set()
    while stack and budget > 0:
        node, path = stack.pop()
        if not isinstance(node, yamlnodes.Mapping):
            continue  # true/false, or not a schema (the meta-schema check says so)
        pairs = entries(node)
        budget -= len(pairs) + 1
        below: list[tuple[yamlnodes.Node, tuple[str | int, ...]]] = []
        cuts: dict[int, tuple[str, str]] | None = None
        for key, value in pairs:
            keyword = key.value
            if not isinstance(keyword, str):
                continue
            if keyword in _ONE_SCHEMA:
                below.append((value, (*path, keyword)))
            elif keyword in _NAMED_SCHEMAS and isinstance(value, yamlnodes.Mapping):
                below.extend((v, (*path, keyword, k.value)) for k, v in entries(value))
            elif keyword in _SCHEMA_LISTS and isinstance(value, yamlnodes.Sequence):
                below.extend((v, (*path, keyword, i)) for i, v in enumerate(value.items))
            elif (keyword not in SCHEMA_KEYWORDS and not keyword.startswith(EXTENSION_PREFIX)
                  and id(key) not in reported):  # an alias repeats what is written once
                reported.add(id(key))
                if cuts is None:
                    cuts = cut_keys(source, node) if source is not None else {}
                hinted = len(found) < _HINTED_KEYWORDS
                hint = _keyword_hint(keyword, value, pairs, cuts.get(id(key)), hinted)
                where = f" at '{'.'.join(str(p) for p in path)}'" if path else ""
                empty = " with no value" if written_empty(value) else ""
                found.append((key, path, f"parameters{where} has unknown JSON Schema keyword "
                                         f"'{clip(keyword)}'{empty}{hint}"))
        stack.extend(reversed(below))
    return found


def _keyword_hint(keyword: str, value: yamlnodes.Node,
                  pairs: list[tuple[yamlnodes.Scalar, yamlnodes.Node]],
                  split: tuple[str, str] | None, hinted: bool) -> str:
    """The likeliest fix for an unknown keyword, as a message's tail; ``split``: the key
    whose unquoted value a ',' cut this keyword from, and that value as it was meant."""
    if keyword in _OTHER_DIALECTS:
        kind = next((v.value for k, v in pairs if k.value == "type"
                     and isinstance(v, yamlnodes.Scalar) and isinstance(v.value, str)), "string")
        return "; " + _OTHER_DIALECTS[keyword].format(type=clip(kind, 20))
    if split is not None:
        return ": " + quote_hint(*split)
    close = closest_hint(keyword, _KEYWORD_POOL) if hinted else ""
    if close:
        return close
    if isinstance(value, yamlnodes.Mapping):
        return (f"; to declare an argument '{clip(keyword)}', write it under 'properties'"
                f" (extension keywords start with '{EXTENSION_PREFIX}')")
    return f"; JSON Schema has no such keyword (extension keywords start with '{EXTENSION_PREFIX}')"
