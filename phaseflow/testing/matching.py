"""Does a value found match what a test file expects of it?"""

from __future__ import annotations

from typing import Any


def subset(expected: Any, found: Any) -> bool:
    """Does ``found`` match ``expected``? Mappings match when every expected key matches
    (recursively); everything else must be equal."""
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(
            (v is None and found.get(k) is None) or (k in found and subset(v, found[k]))
            for k, v in expected.items()
        )
    return bool(expected == found and type(expected) is type(found)) or (
        isinstance(expected, int | float)
        and not isinstance(expected, bool)
        and isinstance(found, int | float)
        and not isinstance(found, bool)
        and expected == found
    )
