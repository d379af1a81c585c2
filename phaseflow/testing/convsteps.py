"""Reading a conversation scenario's steps and the file's tool stand-ins.

A conversation scenario drives a real session (a scripted model, stand-in tools, a
store in memory); its steps are what the user, the model and the human approver do,
and ``expect`` checks in between. Everything is read with its line and column, and the
order of the steps is checked here, before anything runs: a ``model:`` step with no
turn to belong to, or a ``cancel`` with nothing to cancel, is a mistake in the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from phaseflow.expr.describe import did_you_mean_or_list
from phaseflow.spec.schema import entries
from phaseflow.spec.yamlnodes import Mapping, Node, Scalar, Sequence, to_python
from phaseflow.testing.values import Bad, BaseReader, ScenarioStep, Spot, spot_of

__all__ = [
    "CONVERSATION_EXPECT_KEYS",
    "CONVERSATION_STEPS",
    "RESULT_STATUSES",
    "SESSION_STATUSES",
    "StandIn",
    "read_conversation",
    "read_stand_ins",
]

CONVERSATION_STEPS = ("user", "model", "approve", "reject", "cancel", "crash", "wait",
                      "expect", "steer", "interrupt", "mode", "compact", "fork")
#: the steps that end the model's replies of a turn (the user side of the conversation)
USER_SIDE = frozenset({"user", "approve", "reject", "cancel", "crash", "wait", "mode",
                       "compact", "fork"})
#: messages sent while a turn runs: the replies written after them go on in the same
#: stream (the steered turn, or the turn the interrupt starts)
INLINE = frozenset({"steer", "interrupt"})
#: the steps whose replies follow (a crash that stops a turn: its resumed replies)
#: (a ``wait`` followed by replies: they answer the turn of the timer that came due)
OPENERS = ("user", "approve", "reject", "crash", "wait")
#: the longest ``wait`` step, and the most all of a conversation's waits add up to (in
#: seconds: a year, a century), so the phase clock always holds an exact number
WAIT_LIMIT = 365 * 24 * 3600
WAITS_LIMIT = 100 * WAIT_LIMIT
CONVERSATION_EXPECT_KEYS = frozenset({
    "phase", "state", "offered", "results", "reply", "status", "approval", "called",
    "navigation", "path",
})
#: machine-scenario checks, with what a conversation checks instead
_MACHINE_ONLY = {
    "tools": "offered (the tools of the model's request)",
    "terminal": "status: finished",
    "needs": "state",
    "missing": "navigation",
    "history": "phase",
}
RESULT_STATUSES = (
    "ok", "error", "refused", "rejected", "cancelled", "ignored", "unknown", "pending",
    "planned",
)
SESSION_STATUSES = ("idle", "running", "awaiting_approval", "finished", "failed")
_SCOPES = {"once": "approve", "turn": "approve_turn", "session": "approve_session"}
_STAND_IN_KEYS = frozenset({"returns", "raises", "echo"})
_MODEL_KEYS = frozenset({"text", "calls", "stop"})
#: what a scripted reply's ``stop`` may say (``max_tokens``: cut at the output limit)
_MODEL_STOPS = ("end_turn", "tool_use", "max_tokens")


@dataclass(frozen=True, slots=True)
class StandIn:
    """A stand-in for one of the host's tools: returns ``returns`` (any JSON value; a
    mapping's keys in the tool's ``writes`` are written to the state, as a real tool's
    are), or the call's arguments (``echo``), or raises an exception with the message
    ``raises``."""

    name: str
    returns: Any = None
    raises: str | None = None
    spot: Spot = field(default_factory=lambda: Spot(1, 1))
    #: return the call's arguments (a tool that records what the model passes it)
    echo: bool = False


def read_stand_ins(reader: BaseReader, node: Node | None) -> dict[str, StandIn]:
    """A ``tools:`` section: tool name -> ``{returns: X}``, ``{raises: MSG}``,
    ``{echo: true}`` or null."""
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise reader.fail(node, "tools must be a mapping of tool names to {returns: ...}, "
                                "{raises: MESSAGE} or {echo: true}")
    out: dict[str, StandIn] = {}
    for key, value in entries(node):
        spot = spot_of(key)
        name = str(key.value)
        if isinstance(value, Scalar) and value.value is None:
            out[name] = StandIn(name, spot=spot)
            continue
        try:
            fields = reader.mapping(value, f"tool '{name}'", _STAND_IN_KEYS)
            if len(fields) > 1:
                raise reader.fail(value, f"tool '{name}': one of returns, raises or echo")
            returns = to_python(fields["returns"]) if "returns" in fields else None
            raises = reader.string(fields["raises"], "raises") if "raises" in fields else None
            echo = False
            if "echo" in fields:
                flag = fields["echo"]
                if not isinstance(flag, Scalar) or flag.value is not True:
                    raise reader.fail(flag, f"tool '{name}': echo takes true")
                echo = True
        except Bad:
            continue
        out[name] = StandIn(name, returns, raises, spot, echo)
    return out


class _Steps:
    """Reads one conversation's steps; every mistake goes to the reader's problems."""

    def __init__(self, reader: BaseReader) -> None:
        self.reader = reader

    def fail(self, node: Node | None, message: str) -> Bad:
        return self.reader.fail(node, message)

    def step(self, node: Node) -> ScenarioStep:
        if not isinstance(node, Mapping) or len(node.pairs) != 1:
            raise self.fail(node, "a conversation step is a mapping with one key, such as "
                                  "{user: TEXT}, {model: TEXT} or {expect: {...}}")
        ((key, value),) = node.pairs
        kind = str(key.value)
        if kind not in CONVERSATION_STEPS:
            hint = did_you_mean_or_list(kind, CONVERSATION_STEPS, "steps")
            raise self.fail(key, f"unknown conversation step '{kind}'{hint}")
        line, column = node.line, node.column
        if kind in ("user", "steer", "interrupt"):
            return ScenarioStep(kind, line, self.text(value, kind), column=column)
        if kind == "mode":
            mode = value.value if isinstance(value, Scalar) else None
            if mode not in ("plan", "exec"):
                raise self.fail(value, "mode takes plan or exec")
            return ScenarioStep(kind, line, mode, column=column)
        if kind == "fork":
            at = value.value if isinstance(value, Scalar) else None
            if isinstance(value, Mapping):
                fields = self.reader.mapping(value, "fork", frozenset({"at"}))
                at_node = fields.get("at")
                at = at_node.value if isinstance(at_node, Scalar) else None
            if isinstance(at, bool) or not isinstance(at, int) or at < 1:
                raise self.fail(value, "fork takes the turn to fork at: 'fork: {at: N}' "
                                       "(N from 1)")
            return ScenarioStep(kind, line, at, column=column)
        if kind == "compact":
            if not isinstance(value, Scalar) or value.value is not True:
                raise self.fail(value, "compact takes true: 'compact: true'")
            return ScenarioStep(kind, line, True, column=column)
        if kind == "crash" and isinstance(value, Mapping):
            fields = self.reader.mapping(value, "crash", frozenset({"during"}))
            if "during" not in fields:
                raise self.fail(value, "crash takes true, or {during: TOOL}")
            tool = self.reader.string(fields["during"], "crash during")
            return ScenarioStep(kind, line, {"during": tool},
                                spots={"value": spot_of(fields["during"])}, column=column)
        if kind == "model":
            reply, spots = self.model(value)
            return ScenarioStep(kind, line, reply, spots=spots, column=column)
        if kind in ("approve", "reject"):
            decision, spots = self.decision(kind, value)
            return ScenarioStep(kind, line, decision, spots=spots, column=column)
        if kind in ("cancel", "crash"):
            if not isinstance(value, Scalar) or value.value is not True:
                hint = ", or {during: TOOL}" if kind == "crash" else ""
                raise self.fail(value, f"{kind} takes true: '{kind}: true'{hint}")
            return ScenarioStep(kind, line, True, column=column)
        if kind == "wait":
            seconds = value.value if isinstance(value, Scalar) else None
            if (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                    or not 0 <= seconds < math.inf):
                raise self.fail(value, "wait takes a number of seconds that is 0 or more")
            if seconds > WAIT_LIMIT:
                raise self.fail(value, f"wait takes at most {WAIT_LIMIT:,} seconds (a year)")
            return ScenarioStep(kind, line, seconds, column=column)
        checks, spots = self.checks(value)
        return ScenarioStep("expect", line, expect=checks, spots=spots, column=column)

    def text(self, node: Node, what: str) -> str:
        if not isinstance(node, Scalar) or not isinstance(node.value, str):
            raise self.fail(node, f"{what} takes a text")
        return node.value

    def model(self, node: Node) -> tuple[dict[str, Any], dict[str, Spot]]:
        """A reply, in the scripted provider's form ``{text, calls: [{TOOL: ARGS}]}``;
        spots ``call:N`` (the tool name of call N, from 0) and ``move:N`` (the phase of
        a ``go_to_phase`` call)."""
        if isinstance(node, Scalar):
            return {"text": self.text(node, "model")}, {}
        fields = self.reader.mapping(node, "model", _MODEL_KEYS)
        reply: dict[str, Any] = {}
        spots: dict[str, Spot] = {}
        if "text" in fields:
            reply["text"] = self.text(fields["text"], "model text")
        if "stop" in fields:
            stop = self.text(fields["stop"], "model stop")
            if stop not in _MODEL_STOPS:
                raise self.fail(fields["stop"], f"stop is one of {', '.join(_MODEL_STOPS)}, "
                                                f"not {stop!r}")
            reply["stop"] = stop
        calls_node = fields.get("calls")
        if calls_node is not None:
            if not isinstance(calls_node, Sequence):
                raise self.fail(calls_node, "calls is a list of {TOOL: ARGUMENTS}")
            calls: list[dict[str, Any]] = []
            for index, item in enumerate(calls_node.items):
                if not isinstance(item, Mapping) or len(item.pairs) != 1:
                    raise self.fail(item, "a call is a mapping with one key, the tool's name: "
                                          "{TOOL: {ARGUMENT: VALUE}}")
                ((name_node, args_node),) = item.pairs
                name = str(name_node.value)
                if not name:
                    raise self.fail(name_node, "a tool name must not be empty")
                args = to_python(args_node)
                if args is None:
                    args = {}
                if not isinstance(args, dict):
                    raise self.fail(args_node, f"the arguments of '{name}' are a mapping "
                                               "(or nothing)")
                spots[f"call:{index}"] = spot_of(name_node)
                if name == "go_to_phase" and isinstance(args_node, Mapping):
                    target = args_node.get("phase")
                    if isinstance(target, Scalar) and isinstance(target.value, str):
                        spots[f"move:{index}"] = spot_of(target)
                calls.append({name: args})
            reply["calls"] = calls
        if not reply.get("text") and not reply.get("calls"):
            raise self.fail(node, "a model reply needs text or calls")
        return reply, spots

    def decision(self, kind: str, node: Node) -> tuple[dict[str, str], dict[str, Spot]]:
        """``approve: TOOL`` / ``{tool, scope}``, ``reject: TOOL`` / ``{tool, reason}``;
        the value holds ``tool`` and ``decision`` (the session's word) and ``reason``."""
        if isinstance(node, Scalar):
            tool = self.reader.string(node, kind)
            decision = {"tool": tool, "decision": "approve" if kind == "approve" else "reject",
                        "reason": ""}
            return decision, {"value": spot_of(node)}
        extra = "scope" if kind == "approve" else "reason"
        fields = self.reader.mapping(node, kind, frozenset({"tool", extra}))
        if "tool" not in fields:
            raise self.fail(node, f"{kind} names the tool: {{tool: TOOL}}")
        tool = self.reader.string(fields["tool"], f"{kind} tool")
        spots = {"value": spot_of(fields["tool"])}
        if kind == "approve":
            scope = "once"
            if "scope" in fields:
                scope = self.reader.string(fields["scope"], "scope")
                if scope not in _SCOPES:
                    raise self.fail(fields["scope"], f"scope is once, turn or session, not "
                                                     f"'{scope}'")
            return {"tool": tool, "decision": _SCOPES[scope], "reason": ""}, spots
        reason = self.text(fields["reason"], "reason") if "reason" in fields else ""
        return {"tool": tool, "decision": "reject", "reason": reason}, spots

    def checks(self, node: Node) -> tuple[dict[str, Any], dict[str, Spot]]:
        if isinstance(node, Mapping):
            for key, _ in entries(node):
                instead = _MACHINE_ONLY.get(str(key.value))
                if instead is not None:
                    self.fail(key, f"'{key.value}' checks a machine scenario; a conversation "
                                   f"checks {instead}")
        fields = self.reader.mapping(
            node, "expect", CONVERSATION_EXPECT_KEYS | frozenset(_MACHINE_ONLY))
        checks: dict[str, Any] = {}
        spots: dict[str, Spot] = {}
        for name, value in fields.items():
            if name in _MACHINE_ONLY:
                continue
            try:
                self.check(name, value, checks, spots)
            except Bad:
                continue
        return checks, spots

    def check(self, key: str, node: Node, checks: dict[str, Any],
              spots: dict[str, Spot]) -> None:
        reader = self.reader
        if key in ("phase", "reply"):
            checks[key] = reader.string(node, key)
            spots[key] = spot_of(node)
        elif key == "status":
            status = reader.string(node, "status")
            if status not in SESSION_STATUSES:
                raise self.fail(node, f"status is one of {', '.join(SESSION_STATUSES)}, "
                                      f"not '{status}'")
            checks[key] = status
        elif key == "approval":
            if isinstance(node, Scalar) and node.value is None:
                checks[key] = None
            else:
                checks[key] = reader.string(node, "approval")
                spots["approval"] = spot_of(node)
        elif key in ("offered", "called", "navigation", "path"):
            reader.names_check(key, node, checks, spots)
        elif key == "state":
            reader.state_check(node, checks, spots)
        elif key == "results":
            checks[key] = self.results(node)

    def results(self, node: Node) -> list[dict[str, str]]:
        if not isinstance(node, Sequence):
            raise self.fail(node, "results is a list, one per call of the last tool group: "
                                  "ok, error, refused, ... or {status: S, contains: TEXT}")
        out: list[dict[str, str]] = []
        for item in node.items:
            where: Node = item
            if isinstance(item, Scalar):
                status, contains = self.reader.string(item, "a result"), ""
            else:
                fields = self.reader.mapping(item, "a result", frozenset({"status",
                                                                           "contains"}))
                if "status" not in fields:
                    raise self.fail(item, "a result names its status: {status: S}")
                where = fields["status"]
                status = self.reader.string(where, "status")
                contains = self.text(fields["contains"], "contains") if (
                    "contains" in fields) else ""
            if status not in RESULT_STATUSES:
                hint = did_you_mean_or_list(status, RESULT_STATUSES, "statuses")
                raise self.fail(where, f"unknown result status '{status}'{hint}")
            out.append({"status": status, "contains": contains})
        return out

    def order(self, steps: list[ScenarioStep], nodes: list[Node]) -> None:
        """The steps make a conversation: each ``model:`` step belongs to a turn (a
        ``user``, ``approve`` or ``reject`` step before it, with only ``model`` and
        ``expect`` steps between), and a ``cancel`` follows what it can cancel."""
        opener: str | None = None  # the user-side step the current replies follow
        previous: ScenarioStep | None = None
        waited = 0.0
        for step, node in zip(steps, nodes, strict=True):
            if step.kind == "wait" and waited <= WAITS_LIMIT:  # (said once)
                waited += step.value
                if waited > WAITS_LIMIT:
                    self.fail(node, f"the conversation's waits add up to more than "
                                    f"{WAITS_LIMIT:,} seconds (a century)")
            if step.kind == "model" and opener not in OPENERS:
                after = f"after '{opener}'" if opener else "before any user step"
                self.fail(node, f"a model step is a reply in a turn: it follows a user, "
                                f"approve, reject, crash or wait step ({after})")
            if step.kind == "cancel":
                self._cancel(previous, node)
            if step.kind in INLINE:
                self._inline(step, previous, opener, node)
            if step.kind in USER_SIDE:
                opener = step.kind
            previous = step

    def _inline(self, step: ScenarioStep, previous: ScenarioStep | None, opener: str | None,
                node: Node) -> None:
        """``steer`` and ``interrupt`` are sent while a turn runs: after the replies of
        that turn they follow (a steering message after a reply with calls, which it
        steers; an interrupt after a user step or such a reply)."""
        if opener not in OPENERS or previous is None:
            self.fail(node, f"{step.kind} is sent while a turn runs: it follows a user step "
                            "or a model step with calls")
        elif previous.kind == "model" and not previous.value.get("calls"):
            self.fail(node, f"{step.kind} after a reply without calls: that reply ended the "
                            "turn (send a user step instead)")
        elif step.kind == "steer" and previous.kind != "model":
            self.fail(node, "steer follows a model step with calls: the steering message "
                            "goes with the request after that reply's tools")
        elif previous.kind == "expect":
            self.fail(node, f"{step.kind} follows the reply it comes after directly: put "
                            "the checks after it")

    def _cancel(self, previous: ScenarioStep | None, node: Node) -> None:
        if previous is None:
            self.fail(node, "cancel: there is no turn to cancel yet (add a user step)")
        elif previous.kind == "expect":
            self.fail(node, "cancel follows the turn it cancels directly: put the checks "
                            "after the cancel step")
        elif previous.kind == "model" and not previous.value.get("calls"):
            self.fail(node, "cancel after a reply without calls: that reply ended the turn "
                            "(cancel follows a user step, or a model step with calls)")
        elif previous.kind == "cancel":
            self.fail(node, "cancel twice: the turn is already cancelled")


def read_conversation(reader: BaseReader, node: Node | None, name: str) -> tuple[ScenarioStep, ...]:
    """The steps of a ``conversation:`` list, read and checked for order."""
    if not isinstance(node, Sequence) or not node.items:
        raise reader.fail(node, f"scenario '{name}': conversation is a list of steps")
    read = _Steps(reader)
    steps: list[ScenarioStep] = []
    nodes: list[Node] = []
    for item in node.items:
        try:
            steps.append(read.step(item))
            nodes.append(item)
        except Bad:
            continue
    read.order(steps, nodes)
    return tuple(steps)
