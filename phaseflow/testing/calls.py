"""The stand-ins a scenario runs with, and the log of what they were called with.

Machine scenarios and conversation scenarios share them: a mock for each ``call``
effect the workflow makes (a callable the test file does not mock is recorded as
"unmocked", which fails the scenario), and, for conversations, a stand-in for each of
the host's tools. ``called`` is what an ``expect: {called}`` compares with.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from phaseflow.spec.model import Workflow
from phaseflow.testing.crosscheck import call_names
from phaseflow.testing.testfile import Mock, Spot


class CallLog:
    """What was called, in order; ``used`` collects where the stand-ins that were
    called are written (for the "never called" warnings)."""

    def __init__(self, used: set[Spot] | None = None) -> None:
        self.called: list[str] = []
        self.unmocked: list[str] = []
        self.used: set[Spot] = used if used is not None else set()

    def hooks(self, workflow: Workflow, mocks: dict[str, Mock]) -> dict[str, Callable[..., Any]]:
        """A callable for every name the workflow calls (and every mock)."""
        return {
            name: self.mock(mocks[name]) if name in mocks else self.missing(name)
            for name in call_names(workflow) | set(mocks)
        }

    def mock(self, mock: Mock) -> Callable[..., Any]:
        def call(context: Any, **kwargs: Any) -> Any:
            self.called.append(mock.name)
            self.used.add(mock.spot)
            if mock.raises is not None:
                raise RuntimeError(mock.raises)
            return copy.deepcopy(mock.returns) if mock.returns is not None else None

        return call

    def missing(self, name: str) -> Callable[..., Any]:
        def call(context: Any, **kwargs: Any) -> Any:
            self.called.append(name)
            self.unmocked.append(name)
            return None

        return call

    def take(self) -> list[str]:
        """What was called since the last ``take`` (an ``expect`` step takes it)."""
        called, self.called = self.called, []
        return called
