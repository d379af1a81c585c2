"""Reading eval files (``*.eval.yaml``) into positioned, checked values.

Read with the workflows' composer (positions, duplicate keys, YAML 1.2 scalars, bounded
on hostile input) and the test files' reader primitives and tool stand-ins, so every
mistake is reported with its ``file:line:column`` and all of them at once. The format
is in docs/evals.md; its JSON Schema is ``schemas/eval.schema.json``, whose keys equal
the ``*_KEYS`` here (a test holds them equal).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.evals.criteria import Criterion, CriterionError, compile_criterion
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
from phaseflow.testing.convsteps import StandIn, read_stand_ins
from phaseflow.testing.testfile import Mock
from phaseflow.testing.testfile import _Reader as _TestReader
from phaseflow.testing.values import Bad, Spot, TestFileProblem, spot_of

__all__ = [
    "APPROVALS", "Case", "EvalFile", "EvalFileError", "EvalScenario", "Judge", "SimulatedUser",
    "load_eval_file", "read_eval_file",
]

TOP_KEYS = frozenset({"phaseflow-eval", "workflow", "mocks", "tools", "data", "approve",
                      "scenarios"})
SCENARIO_KEYS = frozenset({"name", "user", "model", "state", "mocks", "tools", "data",
                           "approve", "expect", "never", "judge"})
USER_KEYS = frozenset({"persona", "goal", "knows", "will_not", "opens", "max_turns",
                       "script"})
CASE_KEYS = frozenset({"when", "returns", "raises", "record"})
JUDGE_KEYS = frozenset({"rubric"})
APPROVALS = ("always", "never")
#: a user without max_turns stops after this many messages
DEFAULT_MAX_TURNS = 10
MAX_TURNS_LIMIT = 1000


class EvalFileError(PhaseflowError):
    """The eval file is wrong; every problem, each naming file:line:column."""

    def __init__(self, path: str, problems: list[TestFileProblem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.line, p.column))
        super().__init__("\n".join(p.format(path) for p in ordered))
        self.path = path
        self.problems = tuple(ordered)


@dataclass(frozen=True, slots=True)
class Case:
    """One case of a data-set stand-in: when ``when`` holds of the call's ``args`` and
    the ``data``, it returns ``returns`` (or raises ``raises``) and appends the call's
    arguments to the data set's list ``record``."""

    when: Criterion | None
    returns: Any = None
    raises: str | None = None
    record: str | None = None


@dataclass(frozen=True, slots=True)
class SimulatedUser:
    persona: str = ""
    goal: str = ""
    knows: dict[str, Any] = field(default_factory=dict)
    will_not: tuple[str, ...] = ()
    opens: str = ""
    max_turns: int = DEFAULT_MAX_TURNS
    #: the user's messages, in order, for a scripted user (CI)
    script: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Judge:
    rubric: str


@dataclass(frozen=True, slots=True)
class EvalScenario:
    name: str
    line: int
    user: SimulatedUser
    expect: tuple[Criterion, ...]
    never: tuple[Criterion, ...]
    state: dict[str, Any] = field(default_factory=dict)
    mocks: dict[str, Mock] = field(default_factory=dict)
    tools: dict[str, StandIn] = field(default_factory=dict)
    cases: dict[str, tuple[Case, ...]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    #: ``always``, ``never``, or tool name -> ``always``/``never``
    approve: str | dict[str, str] = "always"
    #: the scripted agent's replies (the form of a scripted provider's file)
    model: tuple[Any, ...] | None = None
    judge: Judge | None = None
    column: int = 1


@dataclass(frozen=True, slots=True)
class EvalFile:
    path: str
    workflow_path: str
    scenarios: tuple[EvalScenario, ...]


class _Reader(_TestReader):
    """The test files' reader (its primitives, mocks and tool stand-ins, read the same
    way here), with what eval files add."""

    def expressions(self, node: Node | None, what: str) -> tuple[Criterion, ...]:
        if node is None:
            return ()
        items = [node] if isinstance(node, Scalar) else (
            node.items if isinstance(node, Sequence) else None)
        if items is None:
            raise self.fail(node, f"{what} is an expression or a list of expressions")
        out: list[Criterion] = []
        for item in items:
            with contextlib.suppress(Bad):
                out.append(self.expression(item, what))
        return tuple(out)

    def expression(self, node: Node, what: str) -> Criterion:
        source = self.string(node, f"an item of {what}")
        try:
            return replace(compile_criterion(source), line=node.line, column=node.column)
        except CriterionError as exc:
            column = node.column + (exc.column + 1 if isinstance(node, Scalar)
                                    and node.style in ("'", '"') else exc.column)
            self.problems.append(TestFileProblem(node.line, column, f"{what}: {exc}"))
            raise Bad() from None

    def approve(self, node: Node | None, fallback: str | dict[str, str]
                ) -> str | dict[str, str]:
        if node is None:
            return fallback
        if isinstance(node, Scalar) and node.value in APPROVALS:
            return str(node.value)
        if isinstance(node, Mapping):
            out: dict[str, str] = {}
            for key, value in entries(node):
                if not (isinstance(value, Scalar) and value.value in APPROVALS):
                    self.fail(value, f"approve {key.value}: always or never")
                    continue
                out[str(key.value)] = str(value.value)
            return out
        raise self.fail(node, "approve is always, never, or {TOOL: always|never}")

    def user(self, node: Node | None, name: str) -> SimulatedUser:
        if node is None:
            raise self.fail(node, f"scenario '{name}' needs a user")
        fields = self.mapping(node, f"scenario '{name}' user", USER_KEYS)
        text: dict[str, str] = {}
        for key in ("persona", "goal", "opens"):
            if key in fields:
                with contextlib.suppress(Bad):
                    text[key] = self.string(fields[key], f"user {key}")
        knows: Any = to_python(fields["knows"]) if "knows" in fields else {}
        if not isinstance(knows, dict):
            self.fail(fields["knows"], "user knows is a mapping of facts: {email: ...}")
            knows = {}
        will_not: list[str] = []
        if "will_not" in fields:
            with contextlib.suppress(Bad):
                will_not = self.names(fields["will_not"], "user will_not")
        max_turns = DEFAULT_MAX_TURNS
        if "max_turns" in fields:
            value = fields["max_turns"]
            number = value.value if isinstance(value, Scalar) else None
            if (isinstance(number, bool) or not isinstance(number, int)
                    or not 0 < number <= MAX_TURNS_LIMIT):
                self.fail(value, f"user max_turns is a whole number from 1 to "
                          f"{MAX_TURNS_LIMIT}")
            else:
                max_turns = number
        script: tuple[str, ...] | None = None
        if "script" in fields:
            with contextlib.suppress(Bad):
                script = tuple(self.names(fields["script"], "user script"))
        if script is None and "goal" not in text:
            self.fail(node, f"scenario '{name}' user needs a goal (for a simulated user) "
                      "or a script (for a scripted one)")
        return SimulatedUser(text.get("persona", ""), text.get("goal", ""), knows,
                             tuple(will_not), text.get("opens", ""), max_turns, script)

    def cases(self, node: Node | None) -> tuple[dict[str, tuple[Case, ...]], Node | None]:
        """The stand-ins written as ``{cases: [...]}``, and the rest of ``tools`` (the
        test files' forms) as a mapping node for :func:`read_stand_ins`."""
        if not isinstance(node, Mapping):
            return {}, node
        out: dict[str, tuple[Case, ...]] = {}
        rest = Mapping(node.line, node.column)
        for key, value in entries(node):
            cases = value.get("cases") if isinstance(value, Mapping) else None
            if cases is None:
                rest.pairs.append((key, value))
                continue
            with contextlib.suppress(Bad):
                self.mapping(value, f"tool '{key.value}'", frozenset({"cases"}))
                if not isinstance(cases, Sequence) or not cases.items:
                    raise self.fail(cases, f"tool '{key.value}': cases is a list")
                read: list[Case] = []
                for item in cases.items:
                    with contextlib.suppress(Bad):
                        read.append(self.case(item, str(key.value)))
                out[str(key.value)] = tuple(read)
        return out, rest

    def case(self, node: Node, tool: str) -> Case:
        fields = self.mapping(node, f"a case of tool '{tool}'", CASE_KEYS)
        when = self.expression(fields["when"], "when") if "when" in fields else None
        if "returns" in fields and "raises" in fields:
            raise self.fail(node, f"a case of tool '{tool}': returns or raises, not both")
        raises = self.string(fields["raises"], "raises") if "raises" in fields else None
        record = self.string(fields["record"], "record") if "record" in fields else None
        returns = to_python(fields["returns"]) if "returns" in fields else None
        return Case(when, returns, raises, record)

    def scenario_of(self, node: Node, index: int, shared: dict[str, Any]) -> EvalScenario:
        fields = self.mapping(node, f"scenario {index}", SCENARIO_KEYS)
        name = f"scenario {index}"
        if "name" in fields:
            with contextlib.suppress(Bad):
                name = self.string(fields["name"], f"scenario {index} name")
        user = self.user(fields.get("user"), name)
        state: Any = to_python(fields["state"]) if "state" in fields else {}
        if not isinstance(state, dict):
            self.fail(fields["state"], "scenario state must be a mapping")
            state = {}
        data: Any = to_python(fields["data"]) if "data" in fields else shared["data"]
        if not isinstance(data, dict):
            self.fail(fields["data"], "data must be a mapping")
            data = {}
        cases, rest = self.cases(fields.get("tools"))
        mocks, tools = self.mocks_and_tools(
            {k: v for k, v in (("mocks", fields.get("mocks")), ("tools", rest))
             if v is not None})
        model: tuple[Any, ...] | None = None
        if "model" in fields:
            model = self.model_script(fields["model"])
        judge = None
        if "judge" in fields:
            with contextlib.suppress(Bad):
                judged = self.mapping(fields["judge"], "judge", JUDGE_KEYS)
                judge = Judge(self.string(judged.get("rubric"), "judge rubric"))
        expect = self.expressions(fields.get("expect"), "expect")
        never = self.expressions(fields.get("never"), "never")
        if not expect and not never and judge is None:
            self.fail(node, f"scenario '{name}' has no criteria: give expect, never or judge")
        return EvalScenario(
            name, node.line, user, expect, never, state,
            {**shared["mocks"], **mocks},
            # a scenario's stand-in replaces the file's of that name, whatever its form
            {k: v for k, v in {**shared["tools"], **tools}.items() if k not in cases},
            {k: v for k, v in {**shared["cases"], **cases}.items() if k not in tools}, data,
            self.approve(fields.get("approve"), shared["approve"]), model, judge, node.column)

    def model_script(self, node: Node) -> tuple[Any, ...]:
        from phaseflow.errors import ConfigError
        from phaseflow.providers.scripted import ScriptedProvider

        replies = to_python(node)
        if not isinstance(replies, list):
            raise self.fail(node, "model is a list of the agent's replies (a scripted "
                            "provider's file)")
        try:
            ScriptedProvider(replies)
        except ConfigError as exc:
            raise self.fail(node, f"model: {exc}") from None
        return tuple(replies)

    def read_file(self, text: str) -> EvalFile | None:
        try:
            document = compose(text)
        except YamlProblem as problem:
            self.problems.append(TestFileProblem(problem.line, problem.column, problem.message))
            return None
        for found in document.problems:
            self.problems.append(TestFileProblem(found.line, found.column, found.message))
        root = document.root
        try:
            if root is None:
                raise self.fail(root, "the eval file is empty: it starts with "
                                "'phaseflow-eval: 1'")
            fields = self.mapping(root, "the eval file", TOP_KEYS)
            version = fields.get("phaseflow-eval")
            if not isinstance(version, Scalar) or version.value != 1:
                self.fail(version or root, "an eval file starts with 'phaseflow-eval: 1'")
            workflow = ""
            if "workflow" not in fields:
                self.fail(root, "an eval file names its workflow: 'workflow: PATH' "
                          "(relative to the eval file)")
            else:
                with contextlib.suppress(Bad):
                    workflow = self.string(fields["workflow"], "workflow")
            cases, rest = self.cases(fields.get("tools"))
            mocks, tools = self.mocks_and_tools(
                {k: v for k, v in (("mocks", fields.get("mocks")), ("tools", rest))
                 if v is not None})
            data: Any = to_python(fields["data"]) if "data" in fields else {}
            if not isinstance(data, dict):
                self.fail(fields["data"], "data must be a mapping")
                data = {}
            shared = {"mocks": mocks, "tools": tools, "cases": cases, "data": data,
                      "approve": self.approve(fields.get("approve"), "always")}
            scenarios_node = fields.get("scenarios")
            if not isinstance(scenarios_node, Sequence) or not scenarios_node.items:
                raise self.fail(scenarios_node or root, "the eval file needs a list of "
                                "scenarios")
            scenarios: list[EvalScenario] = []
            names: dict[str, Spot] = {}
            for i, item in enumerate(scenarios_node.items, 1):
                with contextlib.suppress(Bad):
                    scenario = self.scenario_of(item, i, shared)
                    if scenario.name in names:
                        self.fail(item, f"two scenarios are named '{scenario.name}' "
                                  f"(the first at line {names[scenario.name].line}): the "
                                  "reports and 'eval compare' tell them apart by name")
                    names.setdefault(scenario.name, spot_of(item))
                    scenarios.append(scenario)
        except Bad:
            return None
        base = os.path.dirname(self.path)
        return EvalFile(self.path,
                        os.path.normpath(os.path.join(base, workflow)) if workflow else "",
                        tuple(scenarios))


def read_eval_file(path: str) -> tuple[EvalFile | None, list[TestFileProblem]]:
    """Read an eval file as far as it can be read, and every mistake in it."""
    from phaseflow.spec.diagnostics import Diagnostic
    from phaseflow.spec.loader import read_text

    text = read_text(path)
    if isinstance(text, Diagnostic):
        return None, [TestFileProblem(text.line, text.column, text.message)]
    reader = _Reader(path)
    found = reader.read_file(text)
    return found, reader.problems


def load_eval_file(path: str) -> EvalFile:
    """Read and check an eval file; :class:`EvalFileError` carries every problem."""
    found, problems = read_eval_file(path)
    if found is None or problems:
        raise EvalFileError(path, problems)
    return found


# re-exported for the stand-ins: the test files' form of a tool stand-in
__all__ += ["StandIn", "read_stand_ins"]
