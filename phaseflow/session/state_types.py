"""TEMPORARY stand-in (replaced by the tools branch)."""
from __future__ import annotations

from typing import Any

_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
          "array": list, "object": dict}


def check_state_type(value: Any, declared: str) -> str | None:
    if declared == "any" or value is None:
        return None
    t = _TYPES.get(declared)
    if t is None:
        return None
    if isinstance(value, bool) and declared in ("integer", "number"):
        return f"expected {declared}"
    return None if isinstance(value, t) else f"expected {declared}, got {type(value).__name__}"
