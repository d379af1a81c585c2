"""The values a test file is read into, and the reader's primitives.

Shared by the reader of machine steps (:mod:`phaseflow.testing.testfile`) and of
conversation steps (:mod:`phaseflow.testing.convsteps`): every value keeps where it is
written, and every mistake is recorded with its line and column, reading on with the
next part so that a user sees every mistake of the file at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from phaseflow.expr.describe import did_you_mean
from phaseflow.spec.schema import entries
from phaseflow.spec.yamlnodes import Mapping, Node, Scalar, Sequence, to_python


class Spot(NamedTuple):
    """Where something is written in the test file (1-based)."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class TestFileProblem:
    """One mistake in a test file: an ``error`` stops the file from running; a
    ``warning`` (a mock no scenario called, an undeclared state key) does not, unless
    ``phaseflow test --strict``."""

    __test__ = False

    line: int
    column: int
    message: str
    severity: str = "error"

    def format(self, path: str) -> str:
        label = "warning: " if self.severity == "warning" else ""
        return f"{path}:{self.line}:{self.column}: {label}{self.message}"


class Bad(Exception):
    """Internal: the part being read is wrong; it is recorded and reading goes on with
    the next part, so that every error of the file is reported at once."""


@dataclass(frozen=True, slots=True)
class ScenarioStep:
    """One step: ``kind`` is one of :data:`STEP_KINDS`; ``expect`` holds the checks of an
    ``expect`` step, or the outcome expected of a ``request``/``tool`` step."""

    kind: str
    line: int
    value: Any = None
    expect: Any = None
    #: where the names in the step are written: "value" (the phase or tool of a
    #: request/tool/goto), "set:KEY", "unset:KEY", "phase", "history:NAME", "state:KEY"
    #: (of an expect); used to point a check against the workflow at the right column
    spots: dict[str, Spot] = field(default_factory=dict)
    column: int = 1


def spot_of(node: Node) -> Spot:
    return Spot(node.line, node.column)


def key_spots(node: Node) -> dict[str, Spot]:
    """Where each key of a mapping node is written (empty for anything else)."""
    if not isinstance(node, Mapping):
        return {}
    return {str(k.value): spot_of(k) for k, _ in entries(node)}


class BaseReader:
    """Reads a test file, recording every mistake; :meth:`fail` stops only the part
    (step, mock, scenario) it is in."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[TestFileProblem] = []

    def fail(self, node: Node | None, message: str) -> Bad:
        line, column = (node.line, node.column) if node is not None else (1, 1)
        self.problems.append(TestFileProblem(line, column, message))
        return Bad()

    def mapping(self, node: Node | None, what: str, allowed: frozenset[str]) -> dict[str, Node]:
        """The fields of a mapping node; each unknown key is reported (and left out)."""
        if not isinstance(node, Mapping):
            raise self.fail(node, f"{what} must be a mapping")
        fields: dict[str, Node] = {}
        for key, value in entries(node):
            if key.value not in allowed:
                hint = (
                    did_you_mean(str(key.value), allowed)
                    or f" (allowed: {', '.join(sorted(allowed))})"
                )
                self.fail(key, f"unknown key '{key.value}' in {what}{hint}")
                continue
            fields[key.value] = value
        return fields

    def string(self, node: Node | None, what: str) -> str:
        if not isinstance(node, Scalar) or not isinstance(node.value, str) or not node.value:
            raise self.fail(node, f"{what} must be a non-empty string")
        return node.value

    def names(self, node: Node | None, what: str) -> list[str]:
        return [name for name, _ in self.named(node, what)]

    def named(self, node: Node | None, what: str) -> list[tuple[str, Spot]]:
        """A name or a list of names, each with where it is written."""
        if isinstance(node, Scalar) and isinstance(node.value, str):
            return [(node.value, spot_of(node))]
        if not isinstance(node, Sequence):
            raise self.fail(node, f"{what} must be a list of names")
        return [(self.string(item, f"an item of {what}"), spot_of(item)) for item in node.items]

    def names_check(self, key: str, node: Node, checks: dict[str, Any],
                    spots: dict[str, Spot]) -> None:
        """An ``expect`` check that lists names (``called``, ``navigation``, ...), each
        name's place kept as ``KEY:NAME``: the one reading of machine and conversation
        scenarios."""
        named = self.named(node, key)
        checks[key] = [name for name, _ in named]
        spots.update((f"{key}:{name}", spot) for name, spot in named)

    def state_check(self, node: Node, checks: dict[str, Any], spots: dict[str, Spot]) -> None:
        """An ``expect``'s ``state``: a mapping, each key's place kept as ``state:KEY``."""
        value = to_python(node)
        if not isinstance(value, dict):
            raise self.fail(node, "expect state must be a mapping")
        checks["state"] = value
        spots.update((f"state:{k}", s) for k, s in key_spots(node).items())

