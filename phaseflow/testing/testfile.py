"""Reading workflow test files into positioned, checked values.

A test file is read with the same composer as workflows (positions, duplicate keys,
YAML 1.2 booleans, bounded on hostile input); every mistake in it is reported with its
line, so a failing test always points at the line to fix.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from phaseflow.errors import PhaseflowError
from phaseflow.expr.describe import did_you_mean_or_list
from phaseflow.spec.schema import entries
from phaseflow.spec.yamlnodes import (
    Mapping,
    Node,
    Scalar,
    Sequence,
    YamlProblem,
    compose,
    to_python,
)
from phaseflow.testing.convsteps import StandIn, read_conversation, read_stand_ins
from phaseflow.testing.values import (
    Bad,
    BaseReader,
    ScenarioStep,
    Spot,
    TestFileProblem,
    key_spots,
    spot_of,
)

__all__ = [
    "EXPECT_KEYS",
    "STEP_KINDS",
    "Mock",
    "Scenario",
    "ScenarioStep",
    "Spot",
    "TestFile",
    "TestFileError",
    "TestFileProblem",
    "load_test_file",
    "read_test_file",
]


class _Entry(NamedTuple):
    """One key of a step mapping and its value."""

    key: Scalar
    value: Node


STEP_KINDS = ("set", "unset", "turns", "wait", "request", "tool", "goto", "expect")
EXPECT_KEYS = frozenset(
    {"phase", "terminal", "tools", "state", "needs", "missing", "navigation", "called", "history",
     "path"}
)
TOP_KEYS = frozenset({"phaseflow-test", "workflow", "mocks", "tools", "scenarios"})
SCENARIO_KEYS = frozenset({"name", "state", "mocks", "tools", "steps", "conversation"})
MOCK_KEYS = frozenset({"returns", "raises"})


class TestFileError(PhaseflowError):
    """The test file itself is wrong (not the workflow's behaviour). Carries every error
    found in the file, each naming file:line:column; ``line`` and ``message`` are the
    first one's."""

    __test__ = False  # not a pytest test class

    def __init__(self, path: str, problems: list[TestFileProblem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.line, p.column))
        super().__init__("\n".join(p.format(path) for p in ordered))
        self.path = path
        self.problems = tuple(ordered)
        self.line = ordered[0].line if ordered else 1
        self.message = ordered[0].message if ordered else ""


@dataclass(frozen=True, slots=True)
class Mock:
    """A stand-in for a host callable: returns ``returns`` (merged into the state), or
    raises ``raises`` (to test how the workflow handles a failing call)."""

    name: str
    returns: dict[str, Any] | None = None
    raises: str | None = None
    spot: Spot = field(default_factory=lambda: Spot(1, 1))


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    line: int
    state: dict[str, Any]
    mocks: dict[str, Mock]
    steps: tuple[ScenarioStep, ...]
    #: where each key of ``state`` is written
    state_spots: dict[str, Spot] = field(default_factory=dict)
    #: the scenario's own tool stand-ins (replacing the file's of the same name)
    tools: dict[str, StandIn] = field(default_factory=dict)
    #: the steps of a conversation scenario (``steps`` is empty then); ``None`` for a
    #: machine scenario
    conversation: tuple[ScenarioStep, ...] | None = None


@dataclass(frozen=True, slots=True)
class TestFile:
    __test__ = False

    path: str
    workflow_path: str
    mocks: dict[str, Mock]
    scenarios: tuple[Scenario, ...] = field(default=())
    #: stand-ins for the host's tools, used by conversation scenarios
    tools: dict[str, StandIn] = field(default_factory=dict)


class _Reader(BaseReader):
    """Reads a test file, recording every mistake; :meth:`fail` stops only the part
    (step, mock, scenario) it is in."""

    def mocks(self, node: Node | None) -> dict[str, Mock]:
        if node is None:
            return {}
        mocks: dict[str, Mock] = {}
        if not isinstance(node, Mapping):
            raise self.fail(node, "mocks must be a mapping of callable names to {returns: ...}")
        for key, value in entries(node):
            spot = spot_of(key)
            if isinstance(value, Scalar) and value.value is None:
                mocks[key.value] = Mock(key.value, spot=spot)
                continue
            try:
                fields = self.mapping(value, f"mock '{key.value}'", MOCK_KEYS)
                returns = to_python(fields["returns"]) if "returns" in fields else None
                if returns is not None and not isinstance(returns, dict):
                    raise self.fail(
                        fields["returns"], f"mock '{key.value}': returns must be a mapping"
                    )
                raises = self.string(fields["raises"], "raises") if "raises" in fields else None
            except Bad:
                continue
            mocks[key.value] = Mock(key.value, returns, raises, spot)
        return mocks

    def step(self, node: Node) -> ScenarioStep:
        if not isinstance(node, Mapping):
            raise self.fail(
                node, "a step is a mapping such as {set: {key: value}} or {expect: {...}}"
            )
        fields = {k.value: _Entry(k, v) for k, v in entries(node)}
        kinds = [k for k in fields if k in STEP_KINDS]
        others = [k for k in fields if k not in STEP_KINDS]
        for other in others:
            key = fields[other].key
            hint = did_you_mean_or_list(str(other), STEP_KINDS, "steps")
            self.fail(key, f"unknown step '{other}'{hint}")
        if others:
            raise Bad()
        action = [k for k in kinds if k != "expect"]
        if len(action) > 1:
            raise self.fail(node, f"a step does one thing; found {', '.join(action)}")
        if not action:
            if "expect" not in fields:
                raise self.fail(node, "empty step")
            checks_node = fields["expect"].value
            checks = self.mapping(checks_node, "expect", EXPECT_KEYS)
            values, spots = self.checks(checks)
            return ScenarioStep("expect", node.line, expect=values, spots=spots, column=node.column)
        kind = action[0]
        value_node = fields[kind].value
        expect_node = fields["expect"].value if "expect" in fields else None
        if kind in ("request", "tool"):
            name = self.string(value_node, kind)
            default = "taken" if kind == "request" else "allowed"
            options = ("taken", "refused") if kind == "request" else ("allowed", "refused")
            outcome = default
            if expect_node is not None:
                outcome = self.string(expect_node, "expect")
                if outcome not in options:
                    raise self.fail(
                        expect_node,
                        f"a {kind} step expects {' or '.join(options)}, not '{outcome}'",
                    )
            spots = {"value": spot_of(value_node)}
            return ScenarioStep(kind, node.line, name, outcome, spots, node.column)
        if expect_node is not None:
            raise self.fail(
                expect_node, f"a '{kind}' step takes no expect; add a separate expect step"
            )
        if kind == "set":
            values = to_python(value_node)
            if not isinstance(values, dict):
                raise self.fail(value_node, "set takes a mapping of state keys to values")
            spots = {f"set:{k}": s for k, s in key_spots(value_node).items()}
            return ScenarioStep(kind, node.line, values, spots=spots, column=node.column)
        if kind == "unset":
            named = self.named(value_node, "unset")
            spots = {f"unset:{k}": s for k, s in named}
            return ScenarioStep(kind, node.line, [k for k, _ in named], spots=spots,
                                column=node.column)
        if kind == "goto":
            name = self.string(value_node, "goto")
            spots = {"value": spot_of(value_node)}
            return ScenarioStep(kind, node.line, name, spots=spots, column=node.column)
        number = value_node.value if isinstance(value_node, Scalar) else None
        if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
            raise self.fail(value_node, f"{kind} takes a number that is 0 or more")
        if kind == "turns" and (not isinstance(number, int) or number > 10_000):
            raise self.fail(value_node, "turns takes a whole number up to 10,000")
        return ScenarioStep(kind, node.line, number, column=node.column)

    def checks(self, fields: dict[str, Node]) -> tuple[dict[str, Any], dict[str, Spot]]:
        """An expect step's checks and where the names in them are written; a wrong
        check is reported and the others are still read."""
        checks: dict[str, Any] = {}
        spots: dict[str, Spot] = {}
        for key, node in fields.items():
            try:
                if key in ("phase",):
                    checks[key] = self.string(node, key)
                    spots["phase"] = spot_of(node)
                elif key == "terminal":
                    if not isinstance(node, Scalar) or not isinstance(node.value, bool):
                        raise self.fail(node, "terminal must be true or false")
                    checks[key] = node.value
                elif key == "tools" and isinstance(node, Scalar) and node.value == "all":
                    checks[key] = "all"
                elif key in ("tools", "needs", "missing", "called", "history", "navigation",
                             "path"):
                    self.names_check(key, node, checks, spots)
                elif key == "state":
                    self.state_check(node, checks, spots)
            except Bad:
                continue
        return checks, spots

    def mocks_and_tools(
        self, fields: dict[str, Node]
    ) -> tuple[dict[str, Mock], dict[str, StandIn]]:
        """The ``mocks`` and ``tools`` of a file or a scenario: a mistake in either is
        reported and reading goes on with none of that kind, so one pass finds every
        mistake of the file."""
        mocks: dict[str, Mock] = {}
        with contextlib.suppress(Bad):
            mocks = self.mocks(fields.get("mocks"))
        tools: dict[str, StandIn] = {}
        with contextlib.suppress(Bad):
            tools = read_stand_ins(self, fields.get("tools"))
        return mocks, tools

    def scenario(self, node: Node, index: int) -> Scenario:
        fields = self.mapping(node, f"scenario {index}", SCENARIO_KEYS)
        name = f"scenario {index}"
        if "name" in fields:
            with contextlib.suppress(Bad):
                name = self.string(fields.get("name"), f"scenario {index} name")
        state: Any = {}
        state_spots: dict[str, Spot] = {}
        if "state" in fields:
            state = to_python(fields["state"])
            state_spots = key_spots(fields["state"])
        if state is None:
            state = {}
        if not isinstance(state, dict):
            self.fail(fields["state"], "scenario state must be a mapping")
            state = {}
        mocks, tools = self.mocks_and_tools(fields)
        if "conversation" in fields:
            if "steps" in fields:
                self.fail(fields["steps"], f"scenario '{name}' has steps and a conversation: "
                          "a scenario is one or the other")
            conversation = read_conversation(self, fields["conversation"], name)
            return Scenario(name, node.line, state, mocks, (), state_spots, tools,
                            conversation)
        if tools:
            self.fail(fields["tools"], f"scenario '{name}': tools are stand-ins for a "
                      "conversation; machine steps do not call tools")
        steps_node = fields.get("steps")
        if not isinstance(steps_node, Sequence):
            raise self.fail(steps_node or node, f"scenario '{name}' needs a list of steps "
                            "or a conversation")
        steps: list[ScenarioStep] = []
        for item in steps_node.items:
            try:
                steps.append(self.step(item))
            except Bad:
                continue
        return Scenario(name, node.line, state, mocks, tuple(steps), state_spots)

    def read(self, text: str) -> TestFile | None:
        """What could be read of the file (``None`` when nothing could); every mistake
        is in :attr:`problems`."""
        try:
            document = compose(text)
        except YamlProblem as problem:
            self.problems.append(TestFileProblem(problem.line, problem.column, problem.message))
            return None
        for found in document.problems:
            self.problems.append(TestFileProblem(found.line, found.column, found.message))
        try:
            return self._file(document.root)
        except Bad:
            return None

    def _file(self, root: Node | None) -> TestFile:
        if root is None:
            raise self.fail(root, "the test file is empty: it starts with 'phaseflow-test: 1'")
        fields = self.mapping(root, "the test file", TOP_KEYS)
        version = fields.get("phaseflow-test")
        if not isinstance(version, Scalar) or version.value != 1:
            self.fail(version or root, "a test file starts with 'phaseflow-test: 1'")
        workflow = ""
        if "workflow" not in fields:
            self.fail(root, "a test file names the workflow it tests: 'workflow: PATH' "
                      "(relative to the test file)")
        else:
            with contextlib.suppress(Bad):
                workflow = self.string(fields["workflow"], "workflow")
        base = os.path.dirname(self.path)
        mocks, tools = self.mocks_and_tools(fields)
        scenarios_node = fields.get("scenarios")
        if not isinstance(scenarios_node, Sequence) or not scenarios_node.items:
            raise self.fail(scenarios_node or root, "the test file needs a list of scenarios")
        scenarios: list[Scenario] = []
        for i, item in enumerate(scenarios_node.items, 1):
            try:
                scenarios.append(self.scenario(item, i))
            except Bad:
                continue
        return TestFile(
            self.path,
            os.path.normpath(os.path.join(base, workflow)) if workflow else "",
            mocks,
            tuple(scenarios),
            tools,
        )


def read_test_file(path: str) -> tuple[TestFile | None, list[TestFileProblem]]:
    """Read a test file as far as it can be read, and every mistake found in it (each
    with its line and column), so that a user sees them all at once. The test file is
    ``None`` when nothing usable could be read (it does not parse, or its top level is
    wrong)."""
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import read_text

    text = read_text(path)
    if isinstance(text, Diagnostic):
        return None, [TestFileProblem(text.line, text.column, text.message)]
    reader = _Reader(path)
    test = reader.read(text)
    return test, reader.problems


def load_test_file(path: str) -> TestFile:
    """Read and check a test file; raises :class:`TestFileError` carrying every error
    in it, each with its line and column."""
    test, problems = read_test_file(path)
    if test is None or problems:
        raise TestFileError(path, problems)
    return test
