"""Is a tool's ``parameters`` a valid JSON Schema (draft 2020-12)?

The workflow schema already says that ``parameters`` is a mapping with ``type: object``
(a tool takes keyword arguments); whether the rest is a valid schema is a question for
the draft 2020-12 meta-schema. jsonschema answers it, imported here only when a tool has
``parameters`` (it costs ~90 ms to import, and ``phaseflow validate`` stays lean for
every other file). The answer is a list of problems, each with the path inside the
schema where it is, so the compiler can point at the exact YAML node.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from phaseflow.spec.diagnostics import clip

__all__ = ["JSON_SCHEMA_TYPES", "MAX_PARAMETER_NODES", "parameter_problems"]

#: The largest ``parameters`` schema checked, in values (mappings, lists and scalars):
#: a real tool's schema has tens; a hostile one (aliases expand a file) must stay cheap.
MAX_PARAMETER_NODES = 10_000

#: The type names of JSON Schema, for a helpful message about a misspelt one.
JSON_SCHEMA_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")

#: A problem: the path inside the schema (keys and list indices), and what is wrong there.
Problem = tuple[tuple[str | int, ...], str]


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
            close = difflib.get_close_matches(instance, JSON_SCHEMA_TYPES, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            return [(path, f"'{clip(instance)}' is not a JSON Schema type "
                           f"({', '.join(JSON_SCHEMA_TYPES)}){hint}")]
        return [(path, clip(str(error.message), 200))]
    except (RecursionError, MemoryError):
        return [((), "the schema is too deeply nested to check")]
    except Exception as exc:  # a meta-schema check must never crash the validator
        return [((), f"the schema cannot be checked: {type(exc).__name__}")]
    return []
