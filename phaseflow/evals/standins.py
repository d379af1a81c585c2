"""The tools and hooks one eval conversation runs with: stand-ins, and a data set.

A stand-in answers as in test files (``returns``, ``raises``, ``echo``), or by cases
over a small data set (``when`` reads the call's ``args`` and the ``data``; ``record``
appends the arguments to a list of the data set), so what the agent did can be scored
from the data afterwards. Each conversation gets its own copy of the data set. The
workflow's ``call`` effects run the eval file's mocks, each call logged into the
conversation's events as a ``hook_call``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from phaseflow.evals.evalfile import Case, EvalScenario
from phaseflow.spec.model import Workflow
from phaseflow.testing.calls import CallLog
from phaseflow.tools.function import ToolContext
from phaseflow.tools.function import tool as make_tool

__all__ = ["StandIns"]


class StandIns:
    """The stand-in tools and mocked hooks of one conversation."""

    def __init__(self, scenario: EvalScenario, workflow: Workflow,
                 events: list[Mapping[str, Any]]) -> None:
        self.scenario = scenario
        self.workflow = workflow
        self.events = events
        self.data: dict[str, Any] = copy.deepcopy(scenario.data)
        #: the data set after each stand-in call, by call id
        self.data_after: dict[str, dict[str, Any]] = {}

    def tools(self, host: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A stand-in for each tool the scenario gives one; ``host``'s for the rest."""
        out: dict[str, Any] = dict(host or {})
        for name in self.scenario.tools:
            out[name] = self._stand_in(name)
        for name in self.scenario.cases:
            out[name] = self._cases(name, self.scenario.cases[name])
        return out

    def hooks(self, host: Mapping[str, Callable[..., Any]] | None = None
              ) -> dict[str, Callable[..., Any]]:
        """A mock for each ``call`` the workflow makes (``host``'s where the scenario
        mocks none), each logged as it runs."""
        log = CallLog()
        mocks = log.hooks(self.workflow, self.scenario.mocks)
        out: dict[str, Callable[..., Any]] = {}
        for name, mock in mocks.items():
            chosen = mock if name in self.scenario.mocks or not host or name not in host \
                else host[name]
            out[name] = self._logged(name, chosen)
        return out

    def _logged(self, name: str, hook: Callable[..., Any]) -> Callable[..., Any]:
        def call(context: Any, **kwargs: Any) -> Any:
            self.events.append({"type": "hook_call", "name": name})
            return hook(context, **kwargs)

        return call

    def _stand_in(self, name: str) -> Any:
        stand_in = self.scenario.tools[name]

        async def call(ctx: ToolContext, **arguments: Any) -> Any:
            if stand_in.raises is not None:
                raise RuntimeError(stand_in.raises)
            if stand_in.echo:
                return copy.deepcopy(arguments)
            return copy.deepcopy(stand_in.returns)

        return make_tool(name=name, parameters={"type": "object"})(call)

    def _cases(self, name: str, cases: tuple[Case, ...]) -> Any:
        async def call(ctx: ToolContext, **arguments: Any) -> Any:
            facts = {"args": arguments, "data": self.data}
            for case in cases:
                if case.when is not None and not case.when.holds(facts, "")[0]:
                    continue
                if case.record is not None:
                    kept = self.data.setdefault(case.record, [])
                    if isinstance(kept, list):
                        kept.append(copy.deepcopy(arguments))
                self.data_after[ctx.call_id] = copy.deepcopy(self.data)
                if case.raises is not None:
                    raise RuntimeError(case.raises)
                return copy.deepcopy(case.returns)
            raise RuntimeError(f"{name}: no case of the eval file matches these arguments")

        return make_tool(name=name, parameters={"type": "object"})(call)
