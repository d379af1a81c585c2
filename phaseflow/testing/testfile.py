"""Reading workflow test files into positioned, checked values.

A test file is read with the same composer as workflows (positions, duplicate keys,
YAML 1.2 booleans, bounded on hostile input); every mistake in it is reported with its
line, so a failing test always points at the line to fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from phaseflow.errors import PhaseflowError
from phaseflow.spec.diagnostics import did_you_mean
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


class _Entry(NamedTuple):
    """One key of a step mapping and its value."""

    key: Scalar
    value: Node


STEP_KINDS = ("set", "unset", "turns", "wait", "request", "tool", "goto", "expect")
EXPECT_KEYS = frozenset(
    {"phase", "terminal", "tools", "state", "needs", "missing", "navigation", "called", "history"}
)
TOP_KEYS = frozenset({"phaseflow-test", "workflow", "mocks", "scenarios"})
SCENARIO_KEYS = frozenset({"name", "state", "mocks", "steps"})
MOCK_KEYS = frozenset({"returns", "raises"})


class TestFileError(PhaseflowError):
    """The test file itself is wrong (not the workflow's behaviour); names file:line."""

    __test__ = False  # not a pytest test class

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class Mock:
    """A stand-in for a host callable: returns ``returns`` (merged into the state), or
    raises ``raises`` (to test how the workflow handles a failing call)."""

    name: str
    returns: dict[str, Any] | None = None
    raises: str | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One step: ``kind`` is one of :data:`STEP_KINDS`; ``expect`` holds the checks of an
    ``expect`` step, or the outcome expected of a ``request``/``tool`` step."""

    kind: str
    line: int
    value: Any = None
    expect: Any = None


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    line: int
    state: dict[str, Any]
    mocks: dict[str, Mock]
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class TestFile:
    __test__ = False

    path: str
    workflow_path: str
    mocks: dict[str, Mock]
    scenarios: tuple[Scenario, ...] = field(default=())


def is_test_text(text: str) -> bool:
    """Cheap test for discovery: a top-level ``phaseflow-test`` key."""
    import re

    return re.search(r"(?m)^[\"']?phaseflow-test[\"']?[ \t]*:", text) is not None


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, node: Node | None, message: str) -> TestFileError:
        return TestFileError(self.path, node.line if node is not None else 1, message)

    def mapping(self, node: Node | None, what: str, allowed: frozenset[str]) -> dict[str, Node]:
        if not isinstance(node, Mapping):
            raise self.fail(node, f"{what} must be a mapping")
        fields: dict[str, Node] = {}
        for key, value in entries(node):
            if key.value not in allowed:
                hint = (
                    did_you_mean(str(key.value), allowed)
                    or f" (allowed: {', '.join(sorted(allowed))})"
                )
                raise self.fail(key, f"unknown key '{key.value}' in {what}{hint}")
            fields[key.value] = value
        return fields

    def string(self, node: Node | None, what: str) -> str:
        if not isinstance(node, Scalar) or not isinstance(node.value, str) or not node.value:
            raise self.fail(node, f"{what} must be a non-empty string")
        return node.value

    def names(self, node: Node | None, what: str) -> list[str]:
        if isinstance(node, Scalar) and isinstance(node.value, str):
            return [node.value]
        if not isinstance(node, Sequence):
            raise self.fail(node, f"{what} must be a list of names")
        return [self.string(item, f"an item of {what}") for item in node.items]

    def mocks(self, node: Node | None) -> dict[str, Mock]:
        if node is None:
            return {}
        mocks: dict[str, Mock] = {}
        if not isinstance(node, Mapping):
            raise self.fail(node, "mocks must be a mapping of callable names to {returns: ...}")
        for key, value in entries(node):
            if isinstance(value, Scalar) and value.value is None:
                mocks[key.value] = Mock(key.value)
                continue
            fields = self.mapping(value, f"mock '{key.value}'", MOCK_KEYS)
            returns = to_python(fields["returns"]) if "returns" in fields else None
            if returns is not None and not isinstance(returns, dict):
                raise self.fail(fields["returns"], f"mock '{key.value}': returns must be a mapping")
            raises = self.string(fields["raises"], "raises") if "raises" in fields else None
            mocks[key.value] = Mock(key.value, returns, raises)
        return mocks

    def step(self, node: Node) -> Step:
        if not isinstance(node, Mapping):
            raise self.fail(
                node, "a step is a mapping such as {set: {key: value}} or {expect: {...}}"
            )
        fields = {k.value: _Entry(k, v) for k, v in entries(node)}
        kinds = [k for k in fields if k in STEP_KINDS]
        others = [k for k in fields if k not in STEP_KINDS]
        if others:
            key = fields[others[0]].key
            hint = did_you_mean(str(others[0]), STEP_KINDS) or f" (steps: {', '.join(STEP_KINDS)})"
            raise self.fail(key, f"unknown step '{others[0]}'{hint}")
        action = [k for k in kinds if k != "expect"]
        if len(action) > 1:
            raise self.fail(node, f"a step does one thing; found {', '.join(action)}")
        if not action:
            if "expect" not in fields:
                raise self.fail(node, "empty step")
            checks_node = fields["expect"].value
            checks = self.mapping(checks_node, "expect", EXPECT_KEYS)
            return Step("expect", node.line, expect=self.checks(checks))
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
            return Step(kind, node.line, name, outcome)
        if expect_node is not None:
            raise self.fail(
                expect_node, f"a '{kind}' step takes no expect; add a separate expect step"
            )
        if kind == "set":
            values = to_python(value_node)
            if not isinstance(values, dict):
                raise self.fail(value_node, "set takes a mapping of state keys to values")
            return Step(kind, node.line, values)
        if kind == "unset":
            return Step(kind, node.line, self.names(value_node, "unset"))
        if kind == "goto":
            return Step(kind, node.line, self.string(value_node, "goto"))
        number = value_node.value if isinstance(value_node, Scalar) else None
        if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
            raise self.fail(value_node, f"{kind} takes a number that is 0 or more")
        if kind == "turns" and (not isinstance(number, int) or number > 10_000):
            raise self.fail(value_node, "turns takes a whole number up to 10,000")
        return Step(kind, node.line, number)

    def checks(self, fields: dict[str, Node]) -> dict[str, Any]:
        checks: dict[str, Any] = {}
        for key, node in fields.items():
            if key in ("phase",):
                checks[key] = self.string(node, key)
            elif key == "terminal":
                if not isinstance(node, Scalar) or not isinstance(node.value, bool):
                    raise self.fail(node, "terminal must be true or false")
                checks[key] = node.value
            elif key == "tools" and isinstance(node, Scalar) and node.value == "all":
                checks[key] = "all"
            elif key in ("tools", "needs", "missing", "called", "history", "navigation"):
                checks[key] = self.names(node, key)
            elif key == "state":
                value = to_python(node)
                if not isinstance(value, dict):
                    raise self.fail(node, "expect state must be a mapping")
                checks[key] = value
        return checks

    def scenario(self, node: Node, index: int) -> Scenario:
        fields = self.mapping(node, f"scenario {index}", SCENARIO_KEYS)
        name = (
            self.string(fields.get("name"), f"scenario {index} name")
            if "name" in fields
            else f"scenario {index}"
        )
        state = to_python(fields["state"]) if "state" in fields else {}
        if state is None:
            state = {}
        if not isinstance(state, dict):
            raise self.fail(fields["state"], "scenario state must be a mapping")
        steps_node = fields.get("steps")
        if not isinstance(steps_node, Sequence):
            raise self.fail(steps_node or node, f"scenario '{name}' needs a list of steps")
        steps = tuple(self.step(item) for item in steps_node.items)
        return Scenario(name, node.line, state, self.mocks(fields.get("mocks")), steps)

    def read(self, text: str) -> TestFile:
        try:
            document = compose(text)
        except YamlProblem as problem:
            raise TestFileError(self.path, problem.line, problem.message) from None
        if document.problems:
            first = document.problems[0]
            raise TestFileError(self.path, first.line, first.message)
        fields = self.mapping(document.root, "the test file", TOP_KEYS)
        version = fields.get("phaseflow-test")
        if not isinstance(version, Scalar) or version.value != 1:
            raise self.fail(version or document.root, "a test file starts with 'phaseflow-test: 1'")
        workflow = self.string(fields.get("workflow"), "workflow")
        base = os.path.dirname(self.path)
        scenarios_node = fields.get("scenarios")
        if not isinstance(scenarios_node, Sequence) or not scenarios_node.items:
            raise self.fail(
                scenarios_node or document.root, "the test file needs a list of scenarios"
            )
        scenarios = tuple(self.scenario(item, i) for i, item in enumerate(scenarios_node.items, 1))
        return TestFile(
            self.path,
            os.path.normpath(os.path.join(base, workflow)),
            self.mocks(fields.get("mocks")),
            scenarios,
        )


def load_test_file(path: str) -> TestFile:
    """Read and check a test file; raises :class:`TestFileError` naming the line."""
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import read_text

    text = read_text(path)
    if isinstance(text, Diagnostic):
        raise TestFileError(path, text.line, text.message)
    return _Reader(path).read(text)
