"""Checking a test file against the workflow it tests, before any scenario runs.

The reader (:mod:`phaseflow.testing.testfile`) knows only the test file; this module
knows the workflow too, so it catches what would otherwise pass silently: a
``request: refnud`` with ``expect: refused`` is refused because the phase does not
exist, not because the workflow refuses it. Names of phases, tools and calls that the
workflow does not have are errors (the file does not run); state keys the workflow does
not declare are warnings, as PF301/PF401 are for workflows (a scenario may put keys of
the host's own into the state).
"""

from __future__ import annotations

from collections.abc import Iterable

from phaseflow.expr.describe import did_you_mean, did_you_mean_or_list
from phaseflow.spec.builtin_tools import BUILTIN_TOOLS
from phaseflow.spec.model import CallEffect, Workflow, tree_phases
from phaseflow.testing.testfile import Scenario, ScenarioStep, Spot, TestFile, TestFileProblem

__all__ = ["call_names", "check_against"]

#: the session's built-in tools, offered besides the catalogue's
BUILTINS = BUILTIN_TOOLS


def call_names(workflow: Workflow) -> set[str]:
    """Every callable name the effects and preparations of the workflow and of every
    workflow it uses call (a callee's run in the same conversation)."""
    names: set[str] = set()
    for phase in tree_phases(workflow):
        effects = [*phase.on_enter, *phase.on_exit, *(p.effect for p in phase.prepare)]
        names.update(e.name for e in effects if isinstance(e, CallEffect))
    return names


def _used(workflow: Workflow) -> tuple[Workflow, ...]:
    """Every workflow ``workflow`` calls or hands off to: a scenario crosses into them,
    so their phases, keys and tools are ones it may name."""
    return workflow.used()


class _Checker:
    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.calls = call_names(workflow)
        self.problems: list[TestFileProblem] = []

    def report(self, spot: Spot | None, step: ScenarioStep | None, message: str,
               severity: str) -> None:
        line, column = spot if spot is not None else (
            (step.line, step.column) if step is not None else (1, 1)
        )
        self.problems.append(TestFileProblem(line, column, message, severity))

    def phase(self, name: str, spot: Spot | None, step: ScenarioStep, what: str) -> None:
        phases = self.workflow.phases
        used = _used(self.workflow)
        if name not in phases and not any(name in w.phases or name in w.uses for w in used) and (
                name not in self.workflow.uses):  # a hand-off is asked for by its name
            hint = did_you_mean_or_list(name, phases, "phases")
            self.report(spot, step, f"{what}: the workflow has no phase '{name}'{hint}", "error")

    def tool(self, name: str, spot: Spot | None, step: ScenarioStep) -> None:
        catalogue = self.workflow.tools
        if catalogue is not None and name not in catalogue and not any(
                name in (w.tools or {}) for w in _used(self.workflow)):
            hint = did_you_mean(name, catalogue) or (
                f" (tools: {', '.join(catalogue)})" if catalogue else " (it declares none)"
            )
            self.report(spot, step, f"tool: the workflow's tools have no '{name}'{hint}", "error")

    def key(self, name: str, spot: Spot | None, step: ScenarioStep | None, what: str) -> None:
        declared = self.workflow.state
        if declared and name not in declared and not any(
                name in w.state for w in _used(self.workflow)):
            hint = did_you_mean(name, declared)
            self.report(
                spot, step, f"{what}: '{name}' is not a state key the workflow declares{hint}",
                "warning",
            )

    def keys(self, names: Iterable[str], spots: dict[str, Spot], prefix: str,
             step: ScenarioStep | None, what: str) -> None:
        for name in names:
            self.key(name, spots.get(f"{prefix}:{name}"), step, what)

    def step(self, step: ScenarioStep) -> None:
        spots = step.spots
        if step.kind in ("request", "goto"):
            self.phase(step.value, spots.get("value"), step, step.kind)
        elif step.kind == "tool":
            self.tool(step.value, spots.get("value"), step)
        elif step.kind == "set":
            self.keys(step.value, spots, "set", step, "set")
        elif step.kind == "unset":
            self.keys(step.value, spots, "unset", step, "unset")
        elif step.kind == "expect":
            self.expect(step)

    def expect(self, step: ScenarioStep) -> None:
        checks, spots = step.expect, step.spots
        if "phase" in checks:
            self.phase(checks["phase"], spots.get("phase"), step, "expect phase")
        for name in checks.get("history", ()):
            self.phase(name, spots.get(f"history:{name}"), step, "expect history")
        for name in checks.get("called", ()):
            if name not in self.calls:
                hint = did_you_mean(name, self.calls) or (
                    f" (it calls: {', '.join(sorted(self.calls))})" if self.calls
                    else " (it calls nothing)"
                )
                self.report(spots.get(f"called:{name}"), step,
                            f"expect called: the workflow never calls '{name}'{hint}", "error")
        self.keys(checks.get("state", {}), spots, "state", step, "expect state")
        self.keys(checks.get("needs", ()), spots, "needs", step, "expect needs")
        self.keys(checks.get("missing", ()), spots, "missing", step, "expect missing")

    def scenario(self, scenario: Scenario) -> None:
        spots = {f"state:{k}": v for k, v in scenario.state_spots.items()}
        self.keys(scenario.state, spots, "state", None, f"scenario '{scenario.name}' state")
        for step in scenario.steps:
            self.step(step)
        for step in scenario.conversation or ():
            self.conversation_step(step)

    # --- conversations ------------------------------------------------------------------

    def stand_in(self, name: str, spot: Spot) -> None:
        """A stand-in for a tool the catalogue lacks: the agent would refuse it."""
        catalogue = self.workflow.tools
        if catalogue is not None and name not in catalogue and not any(
                name in (w.tools or {}) for w in _used(self.workflow)):
            hint = did_you_mean(name, catalogue) or (
                f" (tools: {', '.join(catalogue)})" if catalogue else " (it declares none)"
            )
            self.report(spot, None, f"tool '{name}': the workflow's tools have no "
                        f"'{name}'{hint}", "error")

    def known_tool(self, name: str, spot: Spot | None, step: ScenarioStep, what: str) -> None:
        names = self.tool_names()
        if names is not None and name not in names:
            hint = did_you_mean_or_list(name, names, "tools")
            self.report(spot, step, f"{what}: the workflow has no tool '{name}'{hint}",
                        "error")

    def tool_names(self) -> list[str] | None:
        catalogue = self.workflow.tools
        if catalogue is None:
            return None
        used = [t for w in _used(self.workflow) for t in (w.tools or {}) if t not in catalogue]
        return [*catalogue, *dict.fromkeys(used), *BUILTINS]

    def conversation_step(self, step: ScenarioStep) -> None:
        spots = step.spots
        if step.kind == "model":
            names = self.tool_names()
            for index, call in enumerate(step.value.get("calls", ())):
                ((name, args),) = call.items()
                spot = spots.get(f"call:{index}")
                # a name far from every tool is a deliberate hallucination (refused when
                # it runs); one close to a tool is a typo
                hint = did_you_mean(name, names) if names is not None and (
                    name not in names) else ""
                if hint:
                    self.report(spot, step, f"model calls '{name}', which the workflow does "
                                f"not have{hint} (a call of an unknown tool is refused)",
                                "warning")
                target = args.get("phase") if name == "go_to_phase" else None
                if isinstance(target, str) and target not in self.workflow.phases:
                    hint = did_you_mean(target, self.workflow.phases)
                    if hint:
                        self.report(spots.get(f"move:{index}"), step, f"go_to_phase: the "
                                    f"workflow has no phase '{target}'{hint}", "warning")
        elif step.kind in ("approve", "reject"):
            self.known_tool(step.value["tool"], spots.get("value"), step, step.kind)
        elif step.kind == "expect":
            checks = step.expect
            if "phase" in checks:
                self.phase(checks["phase"], spots.get("phase"), step, "expect phase")
            if checks.get("approval"):
                self.known_tool(checks["approval"], spots.get("approval"), step,
                                "expect approval")
            for name in checks.get("offered", ()):
                self.known_tool(name, spots.get(f"offered:{name}"), step, "expect offered")
            tools = self.tool_names()
            for name in checks.get("called", ()):
                if name in self.calls or (tools is None or name in tools):
                    continue
                known = [*sorted(self.calls), *(tools or ())]
                hint = did_you_mean(name, known) or " (it is neither a tool nor a call)"
                self.report(spots.get(f"called:{name}"), step, f"expect called: the "
                            f"workflow has no tool or call '{name}'{hint}", "error")
            self.keys(checks.get("state", {}), spots, "state", step, "expect state")


def check_against(test: TestFile, workflow: Workflow) -> list[TestFileProblem]:
    """The mistakes of ``test`` that only the workflow reveals (see the module's
    docstring); mocks that no scenario calls are found by running them (the runner)."""
    checker = _Checker(workflow)
    mocks = [*test.mocks.values(), *(m for s in test.scenarios for m in s.mocks.values())]
    for mock in mocks:
        if mock.name not in checker.calls:
            hint = did_you_mean(mock.name, checker.calls) or (
                " (it calls nothing)" if not checker.calls else ""
            )
            checker.report(mock.spot, None,
                           f"mock '{mock.name}': the workflow never calls '{mock.name}'{hint}",
                           "warning")
    for scenario in test.scenarios:
        checker.scenario(scenario)
    stand_ins = [*test.tools.values(), *(t for s in test.scenarios for t in s.tools.values())]
    for stand_in in stand_ins:
        checker.stand_in(stand_in.name, stand_in.spot)
    return checker.problems
