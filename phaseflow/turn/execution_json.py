"""The plain-JSON form of :class:`~phaseflow.turn.execution.TurnExecution` (part 1).

Kept apart from the value so each module has one job: ``execution`` says what a session's
control state may do, this module says how it is written down and read back.

This module sits *below* ``execution`` and never imports it (``execution`` imports this
one, for ``to_json`` / ``from_json``): writing follows the one rule of
:func:`~phaseflow.turn.jsonio.fields_to_json` (a value's fields by name), naming only the
fields whose form is their own (the queued prompts' content); reading builds values through
the constructors ``execution`` hands over as :class:`ExecutionClasses`. Reading goes
through the shape readers of :mod:`~phaseflow.turn.jsonio` (``Malformed`` on the first
wrong shape); ``TurnExecution.from_json`` turns that into a rejection and then checks the
invariants (``validate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NamedTuple, Protocol, TypeVar

from phaseflow.turn import jsonio as j
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import Content, ToolCall, content_from_json, content_to_json

__all__ = ["ExecutionClasses", "decode_execution", "execution_to_json"]

T = TypeVar("T")


# --- what writing reads by name ------------------------------------------------------


class _TurnExecution(Protocol):
    """The fields of the value whose JSON form is their own: every other field, and every
    value inside, is written by the one rule of :func:`~phaseflow.turn.jsonio.fields_to_json`."""

    @property
    def steering(self) -> tuple[Content, ...]: ...
    @property
    def follow_up(self) -> tuple[Content, ...]: ...


# --- what reading builds values with ----------------------------------------------------


class ExecutionClasses(NamedTuple, Generic[T]):
    """The classes of ``execution`` that reading builds values with (``T``: the value).

    Handed over by ``execution``, which this module must not import. A constructor whose
    arguments are values of ``execution`` is typed ``...``: each constructor reads every
    argument itself (as for any caller), and a refusal is a wrong shape.
    """

    TurnExecution: Callable[..., T]
    Mode: Callable[[str], object]
    RunIdle: Callable[[], object]
    RunActive: Callable[..., object]
    RunFailed: Callable[[str], object]
    Starting: Callable[[], object]
    Thinking: Callable[[], object]
    Completion: Callable[[], object]
    ToolExecution: Callable[..., object]
    ActiveTool: Callable[[str, str], object]
    ApprovalRequest: Callable[[ToolCall, str], object]
    TrustKey: Callable[..., object]
    TrustKeyKind: Callable[[str], object]
    TrustEntry: Callable[..., object]
    TrustScope: Callable[[str], object]
    PendingAutoApproval: Callable[..., object]
    EditRange: Callable[[str, int, int], object]


# --- writing ---------------------------------------------------------------------------


def execution_to_json(ex: _TurnExecution) -> dict[str, JsonValue]:
    return j.fields_to_json(
        ex,
        steering=[content_to_json(c) for c in ex.steering],
        follow_up=[content_to_json(c) for c in ex.follow_up],
    )


# --- reading ---------------------------------------------------------------------------


def decode_execution(data: object, classes: ExecutionClasses[T]) -> T:
    """Read an execution value's shape; raises ``Malformed`` (run it through ``j.decode``)."""
    return _Reader(classes).execution(data)


class _Reader(j.Reader[ExecutionClasses[T]]):
    __slots__ = ()

    def execution(self, data: object) -> T:
        w = "turn execution"
        d = j.obj(data, w)
        return self.make.TurnExecution(
            mode=j.enum(d, "mode", w, self.make.Mode),
            phase=self.phase(j.field(d, "phase", w)),
            steering=j.items(d, "steering", w, content_from_json),
            follow_up=j.items(d, "follow_up", w, content_from_json),
            trust=j.items(d, "trust", w, self.trust),
            auto_approvals=j.items(d, "auto_approvals", w, self.auto),
            edit_ranges=j.items(d, "edit_ranges", w, self.edit_range),
            shell_tools=j.items(d, "shell_tools", w, _decode_name),
        )

    def activity(self, data: object) -> object:
        d = j.obj(data, "activity")
        kind = j.string(d, "kind", "activity")
        simple: dict[str, Callable[[], object]] = {
            "starting": self.make.Starting,
            "thinking": self.make.Thinking,
            "completion": self.make.Completion,
        }
        if kind in simple:
            return simple[kind]()
        if kind == "tool_execution":
            return self.make.ToolExecution(
                j.items(d, "active_tools", "activity", self.active_tool)
            )
        raise Malformed(f"activity: unknown kind {kind!r}")

    def active_tool(self, data: object) -> object:
        d = j.obj(data, "active tool")
        return self.make.ActiveTool(
            j.string(d, "call_id", "active tool"), j.string(d, "name", "active tool")
        )

    def phase(self, data: object) -> object:
        d = j.obj(data, "phase")
        kind = j.string(d, "kind", "phase")
        if kind == "idle":
            return self.make.RunIdle()
        if kind == "failure":
            return self.make.RunFailed(j.string(d, "message", "phase"))
        if kind != "active":
            raise Malformed(f"phase: unknown kind {kind!r}")
        activity = self.activity(j.field(d, "activity", "phase"))
        raw = d.get("pending_approval")
        approval = None
        if raw is not None:
            a = j.obj(raw, "approval")
            approval = self.make.ApprovalRequest(
                ToolCall.decode(j.field(a, "call", "approval")), j.string(a, "reason", "approval")
            )
        return self.make.RunActive(activity, approval, j.opt_string(d, "error", "phase"))

    def trust_key(self, data: object) -> object:
        d = j.obj(data, "trust key")
        # the constructor refuses a name key with a detail and the reverse
        return self.make.TrustKey(
            j.string(d, "tool", "trust key"),
            j.enum(d, "kind", "trust key", self.make.TrustKeyKind),
            j.string(d, "detail", "trust key"),
        )

    def trust(self, data: object) -> object:
        d = j.obj(data, "trust entry")
        return self.make.TrustEntry(
            self.trust_key(j.field(d, "key", "trust entry")),
            j.enum(d, "scope", "trust entry", self.make.TrustScope),
        )

    def auto(self, data: object) -> object:
        d = j.obj(data, "auto approval")
        return self.make.PendingAutoApproval(
            j.string(d, "call_id", "auto approval"),
            j.enum(d, "scope", "auto approval", self.make.TrustScope),
        )

    def edit_range(self, data: object) -> object:
        w = "edit range"
        d = j.obj(data, w)
        return self.make.EditRange(
            j.string(d, "path", w), j.integer(d, "start", w), j.integer(d, "end", w)
        )


def _decode_name(data: object) -> str:
    if not isinstance(data, str):
        raise Malformed("shell tool: expected a string")
    return data
