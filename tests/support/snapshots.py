"""Shared helpers of the snapshot tests (``tests/machine/test_machine_snapshot*.py``): the
bundled workflows, loaded once each, and what every saved snapshot must be (plain JSON,
the same after a trip through JSON text)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import phaseflow
from phaseflow.spec.model import Workflow

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


@cache
def bundled(name: str) -> Workflow:
    """A bundled workflow, loaded without a registry: its ``call`` effects fail at run
    time, which puts positioned ``effect_error`` events in the trace."""
    return phaseflow.load_workflow(WORKFLOWS / f"{name}.yaml")


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def assert_plain_json(snapshot: Any) -> None:
    for v in _walk(snapshot):
        assert type(v) in (dict, list, str, int, float, bool, type(None)), type(v)
        if type(v) is float:
            assert math.isfinite(v)
    json.dumps(snapshot, allow_nan=False)


def through_json(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=False))
