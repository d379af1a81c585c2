"""What a session tells its host: one tagged union of events.

Every event has ``type``, ``seq`` (its place in the store's log; 0 for an event that is
not persisted, such as a text delta), ``session_id``, ``turn`` (the user turn it belongs
to) and ``at`` (wall-clock seconds). ``to_json`` is the form that is stored and that
``phaseflow run --json`` prints; :func:`event_from_json` reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from phaseflow.errors import PhaseflowError


@dataclass(frozen=True, slots=True, kw_only=True)
class _Event:
    type: ClassVar[str]
    session_id: str = ""
    turn: int = 0
    at: float = 0.0
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in dataclasses.fields(self))
        for name in names:
            out[name] = getattr(self, name)
        return out


#: each event class's fields, in order (``dataclasses.fields`` builds them anew on every
#: call, and every persisted event is encoded)
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStartedEvent(_Event):
    """A turn began with the user's message (the queued prompts joined, in order), or
    with a timer's note."""

    type: ClassVar[str] = "turn_started"
    message: str = ""
    #: ``"timer"``: a timer's turn (``message`` is the session's note, no user wrote it);
    #: left out of the JSON when empty
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = _Event.to_json(self)
        if not self.note:
            del out["note"]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDeltaEvent(_Event):
    """Streamed reply text (not persisted: the final text is, in ``turn_finished``)."""

    type: ClassVar[str] = "text_delta"
    text: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent(_Event):
    """The model called a tool (before it is checked, approved or run)."""

    type: ClassVar[str] = "tool_call"
    call_id: str = ""
    name: str = ""
    arguments: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent(_Event):
    """A call's result as the model sees it. ``status``: ok, error, refused, rejected,
    cancelled, ignored, unknown (admitted, then interrupted) or planned (plan mode: not
    run, listed as the plan)."""

    type: ClassVar[str] = "tool_result"
    call_id: str = ""
    name: str = ""
    status: str = "ok"
    content: str = ""
    duration: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested(_Event):
    type: ClassVar[str] = "approval_requested"
    call_id: str = ""
    name: str = ""
    arguments: Any = None
    arguments_hash: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalResolvedEvent(_Event):
    type: ClassVar[str] = "approval_resolved"
    call_id: str = ""
    name: str = ""
    decision: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChanged(_Event):
    """Keys written (by a tool, ``record``, an effect or the host): old and new values
    (``None`` for an absent key)."""

    type: ClassVar[str] = "state_changed"
    keys: tuple[str, ...] = ()
    old: Mapping[str, Any] = field(default_factory=dict)
    new: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        out = _Event.to_json(self)
        out["keys"] = list(self.keys)
        out["old"], out["new"] = dict(self.old), dict(self.new)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseChanged(_Event):
    """The conversation moved: ``to_phase`` is the phase it is in once the move settled
    (inside a workflow the move entered, or back in the caller a call returned to), and
    ``path``, in a workflow that composes others, where that phase is (each workflow and
    its phase, outermost first; absent from the JSON form of a flat workflow's move)."""

    type: ClassVar[str] = "phase_changed"
    from_phase: str = ""
    to_phase: str = ""
    trigger: str = ""
    path: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = _Event.to_json(self)
        if self.path:
            out["path"] = list(self.path)
        else:
            del out["path"]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Retrying(_Event):
    type: ClassVar[str] = "retrying"
    attempt: int = 0
    delay: float = 0.0
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnFinished(_Event):
    """The turn ended. ``status``: completed, awaiting_approval, cancelled, failed,
    step_limit or cut (the reply still cut at the output limit after the last
    continuation)."""

    type: ClassVar[str] = "turn_finished"
    reply: str = ""
    status: str = "completed"
    input_tokens: int = 0
    output_tokens: int = 0
    #: of ``input_tokens``, those the server read from its prompt cache (0 when it says
    #: nothing of a cache)
    cached_input_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageSteered(_Event):
    """Steering messages sent while the turn ran were delivered into it: the model's next
    request carries them (joined, in order) as a user message after the last results."""

    type: ClassVar[str] = "message_steered"
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryCompacted(_Event):
    """The oldest ``folded`` messages the model saw were folded into ``summary``: from
    now on a request carries the summary, then the history from message ``upto`` on
    (every message is still kept: ``Session.transcript``)."""

    type: ClassVar[str] = "history_compacted"
    folded: int = 0
    upto: int = 0
    summary: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnCancelling(_Event):
    """The turn was cancelled while these sync tools' threads still ran: the session is
    ``cancelling`` until each has ended (its result kept) or reached its deadline (its
    result ``unknown``); then ``turn_finished`` says ``cancelled``."""

    type: ClassVar[str] = "turn_cancelling"
    tools: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = _Event.to_json(self)
        out["tools"] = list(self.tools)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyContinued(_Event):
    """The model's reply was cut at its output limit: the session asks it to go on
    (``continuation``: this one's number, from 1; ``of``: ``max_continuations``).
    ``calls``: the cut reply's tool calls, none of which ran (each has a result saying
    so). A text reply's parts are stitched into one message, marked ``continued``."""

    type: ClassVar[str] = "reply_continued"
    continuation: int = 0
    of: int = 0
    calls: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeChanged(_Event):
    """The host switched the session to ``plan`` mode (only read-only tools run; every
    other call is listed as the plan) or back to ``exec``."""

    type: ClassVar[str] = "mode_changed"
    mode: str = "exec"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustChanged(_Event):
    """The host granted trust in ``tool`` (``change`` ``granted``: every call of it runs
    without asking, for the rest of the session) or took every trust of it back
    (``revoked``; ``keys``: how many trust entries went)."""

    type: ClassVar[str] = "trust_changed"
    tool: str = ""
    change: str = "granted"
    keys: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionForked(_Event):
    """The session began as a fork of ``from_session`` at the end of its turn
    ``at_turn``: its history, state, phase and machine are that turn's end (the first
    event of a fork's log; the original's events stay in the original's log)."""

    type: ClassVar[str] = "session_forked"
    from_session: str = ""
    at_turn: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(_Event):
    """Something went wrong that the host should know: ``code`` is stable
    (``provider_error``, ``tool_error``, ``write_refused``, ``step_limit``, ``reply_invalid``,
    ``effect_error``, ``guard_error``, ``template_error``, ``workflow_changed``, ...)."""

    type: ClassVar[str] = "error"
    code: str = ""
    message: str = ""


Event = (
    TurnStartedEvent | TextDeltaEvent | ToolCallEvent | ToolResultEvent | ApprovalRequested
    | ApprovalResolvedEvent | StateChanged | PhaseChanged | Retrying | TurnFinished
    | ModeChanged | MessageSteered | HistoryCompacted | SessionForked | ErrorEvent
    | ReplyContinued | TurnCancelling | TrustChanged
)

EVENT_TYPES: dict[str, type[_Event]] = {
    cls.type: cls
    for cls in (TurnStartedEvent, TextDeltaEvent, ToolCallEvent, ToolResultEvent,
                ApprovalRequested, ApprovalResolvedEvent, StateChanged, PhaseChanged, Retrying,
                TurnFinished, ModeChanged, MessageSteered, HistoryCompacted, SessionForked,
                ErrorEvent, ReplyContinued, TurnCancelling, TrustChanged)
}


class EventError(PhaseflowError):
    """A stored event that is not one of the event types (a corrupted or foreign log)."""


def event_from_json(data: Mapping[str, Any]) -> Event:
    """The event a ``to_json`` form describes; :class:`EventError` for anything else."""
    if not isinstance(data, Mapping):
        raise EventError(f"an event must be an object, not {type(data).__name__}")
    cls = EVENT_TYPES.get(str(data.get("type")))
    if cls is None:
        raise EventError(f"unknown event type {data.get('type')!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in data.items() if k in names}
    if cls is StateChanged and "keys" in values:
        values["keys"] = tuple(values["keys"])
    if cls is PhaseChanged and isinstance(values.get("path"), list):
        values["path"] = tuple(str(n) for n in values["path"])
    if cls is TurnCancelling and isinstance(values.get("tools"), list):
        values["tools"] = tuple(values["tools"])
    try:
        return cls(**values)  # type: ignore[return-value]
    except TypeError as exc:
        raise EventError(f"event {data.get('type')!r}: {exc}") from None
