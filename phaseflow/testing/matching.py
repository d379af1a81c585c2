"""Does a value found match what a test file expects of it?"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_ABSENT = object()


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


def state_problems(expected: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    """How ``state`` differs from an ``expect``'s ``state`` (a subset; ``null`` for a key
    that must be absent), one line a key: the one rule of machine and conversation
    scenarios."""
    problems = []
    for name, value in expected.items():
        actual = state.get(name, _ABSENT)
        if value is None:
            if actual is not _ABSENT and actual is not None:
                problems.append(f"state.{name}: expected absent, found {actual!r}")
        elif actual is _ABSENT or not subset(value, actual):
            shown = "absent" if actual is _ABSENT else repr(actual)
            problems.append(f"state.{name}: expected {value!r}, found {shown}")
    return problems
