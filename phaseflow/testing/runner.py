"""Running workflow test scenarios against fresh machines, with a clock that starts at 0
and moves only when a step says so. Failures are values (the scenario, the step's line,
what was expected and what was found), never exceptions."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from phaseflow.expr.describe import did_you_mean
from phaseflow.machine import PhaseMachine, State, TransitionResult
from phaseflow.spec.model import Workflow
from phaseflow.testing.calls import CallLog
from phaseflow.testing.coverage import Coverage
from phaseflow.testing.crosscheck import call_names, check_against
from phaseflow.testing.matching import state_problems
from phaseflow.testing.testfile import Scenario, ScenarioStep, Spot, TestFile, TestFileProblem


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """One scenario's outcome; ``failure`` is the readable reason when it failed."""

    name: str
    line: int
    failure: str | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None


@dataclass(slots=True)
class TestFileResult:
    """What running one test file found; ``error`` is set when it could not run at all
    (every error of the file, one per line); ``warnings`` are the test file's mistakes
    that do not stop it (they fail it only under ``phaseflow test --strict``)."""

    __test__ = False

    path: str
    workflow_path: str | None = None
    scenarios: list[ScenarioResult] = field(default_factory=list)
    error: str | None = None
    coverage: Coverage | None = None
    warnings: list[TestFileProblem] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(1 for s in self.scenarios if s.passed)

    @property
    def failed(self) -> int:
        return sum(1 for s in self.scenarios if not s.passed) + (1 if self.error else 0)


class _StepFailed(Exception):
    """Internal: stops a scenario at the failing step."""


def _show(values: Any) -> str:
    if isinstance(values, list | tuple | set | frozenset):
        return "[" + ", ".join(str(v) for v in values) + "]"
    return repr(values)


class _Run:
    """One scenario's run: the machine, the state, the clock and what was called."""

    def __init__(
        self,
        test: TestFile,
        scenario: Scenario,
        workflow: Workflow,
        coverage: Coverage,
        used: set[Spot] | None = None,
    ) -> None:
        self.test = test
        self.scenario = scenario
        self.workflow = workflow
        self.coverage = coverage
        self.now = 0.0
        self.turn = 0
        self.log = CallLog(used)
        self.entered: list[str] = []
        self.blocked_missing: tuple[str, ...] = ()
        registry = self.log.hooks(workflow, {**test.mocks, **scenario.mocks})
        values = workflow.defaults()
        values.update(copy.deepcopy(scenario.state))
        self.state = State(values)
        self.machine = PhaseMachine(
            workflow.initial, clock=lambda: self.now, workflow=workflow, registry=registry
        )
        coverage.phase(workflow.initial)
        self.machine._settled = []  # the caller's moves right after a call returns

    def fail(self, step: ScenarioStep, message: str) -> _StepFailed:
        return _StepFailed(f"{self.test.path}:{step.line}: {message}")

    def _moved(self, result: TransitionResult | None, where: Workflow | None = None) -> None:
        """Credit a move (taken in ``where``, the workflow current before it; the root by
        default) and, when workflows compose, what the machine did after it: the moves
        of callers a call returned to, and the phase it rests in."""
        machine = self.machine
        if result is not None:
            self.entered.append(result.to_phase)
            coverage = self.coverage.of(where)
            if where is None or result.to_phase in where.phases:  # (not a hand-off's)
                coverage.phase(result.to_phase)
            coverage.taken(result.from_phase, result.to_phase, result.trigger)
        settled = machine._settled
        if settled:
            for workflow, record in settled:  # (workflow, HistoryRecord)
                coverage = self.coverage.of(workflow)
                if record.to_phase in workflow.phases:
                    coverage.phase(record.to_phase)
                coverage.taken(record.from_phase, record.to_phase, record.trigger)
            settled.clear()
        if machine._composes:  # every phase on the path is entered
            self.coverage.of(machine.workflow).phase(machine.current)
            for frame in machine._stack or ():
                self.coverage.of(frame.caller.workflow).phase(frame.caller.current)

    def boundary(self) -> None:
        self.turn += 1
        where = self.machine.workflow
        result = self.machine.advance_sync(self.state, turn=self.turn)
        self.blocked_missing = result.missing if result.blocked else ()
        self._moved(result.transition, where)

    def step(self, step: ScenarioStep) -> None:
        kind = step.kind
        if kind == "set":
            for key, value in step.value.items():
                self.state.set(key, copy.deepcopy(value))
            self.boundary()
        elif kind == "unset":
            for key in step.value:
                self.state.unset(key)
            self.boundary()
        elif kind == "turns":
            for _ in range(step.value):
                self.boundary()
        elif kind == "wait":
            self.now += float(step.value)
            self.boundary()
        elif kind == "request":
            before, where = self.machine.current, self.machine.workflow
            result = self.machine.take_request_sync(step.value, self.state, turn=self.turn + 1)
            self._moved(result, where)
            taken = "taken" if result is not None else "refused"
            if taken != step.expect:
                raise self.fail(
                    step,
                    f"request {step.value}: expected {step.expect}, found "
                    f"{taken} (asked in phase '{before}')",
                )
        elif kind == "tool":
            allowed = "allowed" if self.machine.tool_allowed(step.value) else "refused"
            if allowed != step.expect:
                tools = self.machine.active_tools()
                shown = "all tools" if tools is None else _show(tools)
                raise self.fail(
                    step,
                    f"tool {step.value}: expected {step.expect}, found "
                    f"{allowed} (phase '{self.machine.current}' allows {shown})",
                )
        elif kind == "goto":
            if step.value not in self.workflow.phases:
                hint = did_you_mean(step.value, self.workflow.phases)
                raise self.fail(step, f"goto: no phase '{step.value}'{hint}")
            where = self.machine.workflow
            self._moved(self.machine.goto_sync(step.value, self.state, turn=self.turn + 1),
                        where)
        elif kind == "expect":
            self.expect(step)
        if self.log.unmocked:
            names = ", ".join(sorted(set(self.log.unmocked)))
            raise self.fail(
                step,
                f"the workflow called {names}, which the test file does not "
                "mock; add it under 'mocks'",
            )

    def expect(self, step: ScenarioStep) -> None:
        checks: dict[str, Any] = step.expect
        problems: list[str] = []
        machine = self.machine
        phase = machine.current_phase
        for key, expected in checks.items():
            found: Any
            if key == "phase":
                found = machine.current
                if found != expected:
                    hint = (
                        did_you_mean(expected, self.workflow.phases)
                        if expected not in self.workflow.phases
                        else ""
                    )
                    problems.append(f"phase: expected '{expected}'{hint}, found '{found}'")
            elif key == "path":
                found = list(machine.path)
                if found != list(expected):
                    problems.append(f"path: expected {' › '.join(expected)}, found "
                                    f"{' › '.join(found)}")
            elif key == "terminal":
                found = bool(phase is not None and phase.terminal)
                if found != expected:
                    problems.append(
                        f"terminal: expected {str(expected).lower()}, found "
                        f"{str(found).lower()} (phase '{machine.current}')"
                    )
            elif key == "tools":
                tools = machine.active_tools()
                if expected == "all":
                    if tools is not None:
                        problems.append(f"tools: expected all, found {_show(sorted(tools))}")
                elif tools is None or sorted(set(tools)) != sorted(set(expected)):
                    shown = "all" if tools is None else _show(sorted(tools))
                    problems.append(f"tools: expected {_show(sorted(expected))}, found {shown}")
            elif key == "state":
                problems.extend(state_problems(expected, self.state))
            elif key == "needs":
                still = [k for k in (phase.needs if phase else ()) if self.state.get(k) is None]
                if sorted(still) != sorted(expected):
                    problems.append(
                        f"needs: expected {_show(sorted(expected))}, found {_show(sorted(still))}"
                    )
            elif key == "missing":
                if sorted(self.blocked_missing) != sorted(expected):
                    problems.append(
                        f"missing: expected {_show(sorted(expected))}, found "
                        f"{_show(sorted(self.blocked_missing))}"
                    )
            elif key == "navigation":
                block = machine.describe_navigation(self.state)
                absent = [s for s in expected if s not in block]
                if absent:
                    quoted = ", ".join(repr(s) for s in absent)
                    problems.append(
                        f"navigation: expected to contain {quoted}, found:\n"
                        + "\n".join(f"      | {line}" for line in block.splitlines())
                    )
            elif key == "called":
                if self.log.called != list(expected):
                    problems.append(
                        f"called: expected {_show(expected)}, found {_show(self.log.called)}"
                    )
            elif key == "history" and self.entered != list(expected):
                problems.append(
                    f"history: expected {_show(expected)}, found {_show(self.entered)}"
                )
        self.log.take()
        if problems:
            raise self.fail(step, "expect failed:\n  " + "\n  ".join(problems))


def run_scenario(
    test: TestFile,
    scenario: Scenario,
    workflow: Workflow,
    coverage: Coverage,
    used: set[Spot] | None = None,
    *,
    context_position: str = "end",
    offer_tools: str = "phase",
) -> ScenarioResult:
    """Run one scenario; ``used`` collects where the mocks (and tool stand-ins) it
    called are written. A conversation's agent lays its requests out as
    ``context_position`` and ``offer_tools`` say (``Agent``'s options)."""
    if scenario.conversation is not None:
        from phaseflow.testing.conversation import run_conversation

        failure = run_conversation(test, scenario, workflow, coverage,
                                   used if used is not None else set(),
                                   context_position=context_position,
                                   offer_tools=offer_tools)
        return ScenarioResult(scenario.name, scenario.line, failure)
    run = _Run(test, scenario, workflow, coverage, used)
    for step in scenario.steps:
        try:
            run.step(step)
        except _StepFailed as failed:
            return ScenarioResult(scenario.name, scenario.line, str(failed))
    return ScenarioResult(scenario.name, scenario.line)


def _unused_mocks(test: TestFile, workflow: Workflow, used: set[Spot]) -> list[TestFileProblem]:
    """Mocks of calls the workflow makes that no scenario called (a mock of a name the
    workflow never calls is reported by :func:`check_against` already)."""
    calls = call_names(workflow)
    problems: list[TestFileProblem] = []
    for scenario in (None, *test.scenarios):
        mocks = test.mocks if scenario is None else scenario.mocks
        where = "any scenario" if scenario is None else f"scenario '{scenario.name}'"
        for mock in mocks.values():
            if mock.name in calls and mock.spot not in used:
                problems.append(TestFileProblem(
                    mock.spot.line, mock.spot.column,
                    f"mock '{mock.name}' is never called by {where}", "warning",
                ))
    if not any(s.conversation is not None for s in test.scenarios):
        return problems
    for scenario in (None, *test.scenarios):
        stand_ins = test.tools if scenario is None else scenario.tools
        where = "any scenario" if scenario is None else f"scenario '{scenario.name}'"
        for stand_in in stand_ins.values():
            if stand_in.spot not in used:
                problems.append(TestFileProblem(
                    stand_in.spot.line, stand_in.spot.column,
                    f"tool '{stand_in.name}' is never called by {where}", "warning",
                ))
    return problems


def run_test_file(path: str, *, context_position: str = "end",
                  offer_tools: str = "phase") -> TestFileResult:
    """Load ``path`` and its workflow, check the test file against the workflow, and run
    every scenario (a conversation's requests laid out as ``context_position`` and
    ``offer_tools`` say). Never raises for anything in the files: problems become the
    result's ``error`` or ``warnings``, or a scenario's failure."""
    from phaseflow.spec.loader import check_text
    from phaseflow.spec.tree import load_tree
    from phaseflow.testing.testfile import TestFileError, read_test_file

    test, problems = read_test_file(path)
    if test is None or not test.workflow_path:
        return TestFileResult(path, error=str(TestFileError(path, problems)))
    result = TestFileResult(path, test.workflow_path)
    checked, _ = load_tree(test.workflow_path, check_text)  # and every workflow it uses
    if checked.workflow is None:
        shown = "\n".join(d.format() for d in checked.diagnostics if d.severity == "error")
        own = f"{TestFileError(path, problems)}\n" if problems else ""
        result.error = f"{own}{path}: workflow {test.workflow_path} cannot be loaded:\n{shown}"
        return result
    workflow = checked.workflow
    problems = problems + check_against(test, workflow)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        result.error = str(TestFileError(path, errors))
        result.warnings = sorted(
            (p for p in problems if p.severity != "error"), key=lambda p: (p.line, p.column)
        )
        return result
    result.coverage = Coverage.for_workflow(workflow)
    used: set[Spot] = set()
    for scenario in test.scenarios:
        result.scenarios.append(run_scenario(test, scenario, workflow, result.coverage, used,
                                             context_position=context_position,
                                             offer_tools=offer_tools))
    warnings = problems + _unused_mocks(test, workflow, used)
    result.warnings = sorted(warnings, key=lambda p: (p.line, p.column))
    return result
