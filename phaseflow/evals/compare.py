"""Comparing two eval runs: per scenario, the change in pass rate and how sure it is.

The interval of a difference of two proportions is Newcombe's hybrid score interval
(method 10 of Newcombe 1998), built from each rate's Wilson interval: it behaves at 0
and 1 and with few trials, where the normal approximation does not. A change is a
regression when the whole interval lies below zero (the new run is worse, beyond
noise), an improvement when it lies above. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import sqrt
from typing import Any

__all__ = ["Change", "compare", "newcombe", "wilson"]

#: z of a two-sided 95% interval
Z95 = 1.959963984540054


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of ``successes / trials``."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(c1: int, n1: int, c2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """The interval of p2 - p1 (run B's rate minus run A's)."""
    p1, p2 = c1 / n1, c2 / n2
    l1, u1 = wilson(c1, n1, z)
    l2, u2 = wilson(c2, n2, z)
    difference = p2 - p1
    low = difference - sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = difference + sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return max(-1.0, low), min(1.0, high)


@dataclass(frozen=True, slots=True)
class Change:
    scenario: str
    before: tuple[int, int] | None  # (passed, trials) in run A
    after: tuple[int, int] | None
    low: float = 0.0
    high: float = 0.0

    @property
    def delta(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after[0] / self.after[1] - self.before[0] / self.before[1]

    @property
    def verdict(self) -> str:
        """``regression``, ``improvement``, ``within noise``, ``new`` or ``gone``."""
        if self.before is None:
            return "new"
        if self.after is None:
            return "gone"
        if self.high < 0:
            return "regression"
        if self.low > 0:
            return "improvement"
        return "within noise"

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "before": self.before, "after": self.after,
                "delta": self.delta, "interval": [self.low, self.high],
                "verdict": self.verdict}


def _rates(report: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for workflow in report.get("workflows", ()):
        for scenario in workflow.get("scenarios", ()):
            trials = int(scenario.get("trials", 0))
            if trials > 0:
                key = f"{workflow.get('workflow', '')} :: {scenario.get('name')}"
                out[key] = (int(scenario.get("passed", 0)), trials)
    return out


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Each scenario of either JSON report, matched by workflow and scenario name."""
    a, b = _rates(before), _rates(after)
    changes: list[Change] = []
    for key in list(a) + [k for k in b if k not in a]:
        old, new = a.get(key), b.get(key)
        if old is not None and new is not None:
            low, high = newcombe(old[0], old[1], new[0], new[1])
            changes.append(Change(key, old, new, low, high))
        else:
            changes.append(Change(key, old, new))
    return changes
