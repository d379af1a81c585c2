"""TEMPORARY stand-in (replaced by the tools branch)."""
from __future__ import annotations

from typing import Any


def validate_arguments(schema: dict[str, Any], value: Any) -> str | None:
    import jsonschema

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return exc.message
    return None
