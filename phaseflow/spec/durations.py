"""A transition's ``after``: a duration read once, and the guard it adds.

``after: 10m`` is a number of seconds (``600``, ``0.5``) or a number with one unit
(``s``, ``m``, ``h``, ``d``): the transition holds only once the conversation has been in
its phase that long. The machine checks it as part of ``when`` (one guard, so every
reader of the edge sees the same rule); the session reads the number to know when the
phase's next timer is due (docs/format.md, "Timers").
"""

from __future__ import annotations

import math
import re

from phaseflow.expr import Guard, compile_guard

#: The longest ``after`` accepted: a year (a longer wait is almost surely a typo).
MAX_SECONDS = 366 * 86400.0

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TEXT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd])\s*")


def parse_duration(value: object) -> float | str:
    """``value`` (a YAML scalar) as seconds, or the reason it is not a duration."""
    if isinstance(value, bool):
        return f"'after' must be a duration such as 10m or 600, not {str(value).lower()}"
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _TEXT.fullmatch(value)
        if match is None:
            return (
                f"'after' must be a duration: a number of seconds or a number with a unit "
                f"s, m, h or d (e.g. 10m, 90s, 1.5h), not {value!r}"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        return f"'after' must be a duration such as 10m or 600, not {type(value).__name__}"
    if not math.isfinite(seconds) or seconds <= 0:
        return f"'after' must be greater than 0 seconds, not {value!r}"
    if seconds > MAX_SECONDS:
        return f"'after' must be at most 366 days, not {value!r}"
    return seconds


def timed_guard(when: Guard | None, after: float) -> Guard:
    """``when`` that also holds only after ``after`` seconds in the phase."""
    clock = f"seconds_in_phase >= {after!r}"
    if when is None:
        return compile_guard(clock)
    return compile_guard(f"({when.source}\n) and {clock}")
