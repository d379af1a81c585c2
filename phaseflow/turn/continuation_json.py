"""The plain-JSON form of :class:`~phaseflow.turn.continuation.Continuation` (part 3).

Kept apart from the value so each module has one job: ``continuation`` keeps the exact
history and the tool ledger, this module writes them down and reads them back. The
request and the checkpoint store only the messages they add to the history before them,
so the JSON is linear in the history; reading restores the sharing.

This module sits *below* ``continuation`` and never imports it (``continuation`` imports
this one, for ``to_json`` / ``from_json``): writing follows the one rule of
:func:`~phaseflow.turn.jsonio.fields_to_json` (a value's fields by name), naming only
the fields whose form is their own; reading builds values through the constructors
``continuation`` hands over as :class:`ContinuationClasses`. Reading goes through the
shape readers of :mod:`~phaseflow.turn.jsonio` (``Malformed`` on the first wrong shape);
``Continuation.from_json`` turns that into a rejection and then checks every invariant
(``validate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NamedTuple, Protocol, TypeVar

from phaseflow.turn import jsonio as j
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import History, ToolCall, ToolOutcome, message_to_json
from phaseflow.turn.progress import TurnId

__all__ = ["ContinuationClasses", "continuation_to_json", "decode_continuation"]

T = TypeVar("T")


# --- what writing reads by name ------------------------------------------------------
# The request and the checkpoint hold only the messages they add (``added``), and a store
# may ask for the history's later messages and marks only: these are the fields whose
# form is their own. Every other field, and every value inside (a mark, a branch, a tool
# effect), is written by the one rule of :func:`~phaseflow.turn.jsonio.fields_to_json`.


class _ActiveRequest(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def turn_id(self) -> int: ...
    @property
    def revision(self) -> int: ...
    @property
    def messages(self) -> History: ...


class _ToolCheckpoint(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    @property
    def messages(self) -> History: ...
    @property
    def effects(self) -> tuple[object, ...]: ...


class _Continuation(Protocol):
    @property
    def messages(self) -> History: ...
    @property
    def request(self) -> _ActiveRequest | None: ...
    @property
    def marks(self) -> tuple[object, ...]: ...
    @property
    def checkpoint(self) -> _ToolCheckpoint | None: ...


# --- what reading builds values with ----------------------------------------------------


class ContinuationClasses(NamedTuple, Generic[T]):
    """The classes of ``continuation`` that reading builds values with (``T``: the value).

    Handed over by ``continuation``, which this module must not import. A constructor
    whose arguments are values of ``continuation`` is typed ``...``: each constructor
    reads every argument itself (as for any caller), and a refusal is a wrong shape.
    """

    Continuation: Callable[..., T]
    ActiveRequest: Callable[[str, TurnId, int, History], _ActiveRequest]
    ToolCheckpoint: Callable[..., object]
    HistoryMark: Callable[[int, int, int], object]
    Branch: Callable[..., object]
    ToolEffect: Callable[..., object]
    Provenance: Callable[[str], object]
    EffectState: Callable[[str], object]


# --- writing ---------------------------------------------------------------------------


def continuation_to_json(c: _Continuation, messages_from: int = 0,
                         marks_from: int = 0) -> dict[str, JsonValue]:
    """The JSON form. ``messages_from`` / ``marks_from``: write only the history's
    messages and marks from these positions on (a durable store that already holds the
    earlier ones appends the rest, so a commit does not grow with the conversation);
    reading needs the whole lists back in place."""
    request: JsonValue = None
    if c.request is not None:
        r = c.request
        request = {
            "id": r.id,
            "turn_id": r.turn_id,
            "revision": r.revision,
            "added": History(r.messages.after(len(c.messages))).to_json(),
        }
    checkpoint: JsonValue = None
    if c.checkpoint is not None and c.request is not None:
        cp = c.checkpoint
        checkpoint = {
            "id": cp.id,
            "request_id": cp.request_id,
            "added": History(cp.messages.after(len(c.request.messages))).to_json(),
            "effects": [j.fields_to_json(e) for e in cp.effects],
        }
    if messages_from:
        messages: JsonValue = [
            message_to_json(m) for m in c.messages.after(messages_from)
        ]
    else:
        messages = c.messages.to_json()
    return j.fields_to_json(
        c,
        messages=messages,
        request=request,
        marks=[j.fields_to_json(m) for m in c.marks[marks_from:]],
        checkpoint=checkpoint,
    )


# --- reading ---------------------------------------------------------------------------


def decode_continuation(data: object, classes: ContinuationClasses[T]) -> T:
    """Read a continuation's shape; raises ``Malformed`` (run it through ``j.decode``)."""
    return _Reader(classes).continuation(data)


class _Reader(j.Reader[ContinuationClasses[T]]):
    __slots__ = ()

    def continuation(self, data: object) -> T:
        w = "continuation"
        d = j.obj(data, w)
        messages = History.decode(j.field(d, "messages", w))
        request = None
        raw = d.get("request")
        if raw is not None:
            r = j.obj(raw, "request")
            request = self.make.ActiveRequest(
                j.string(r, "id", "request"),
                TurnId(j.integer(r, "turn_id", "request")),
                j.integer(r, "revision", "request"),
                messages.extend(History.decode(j.field(r, "added", "request"))),
            )
        checkpoint = None
        raw = d.get("checkpoint")
        if raw is not None:
            if request is None:
                raise Malformed("checkpoint without a request")
            cp = j.obj(raw, "checkpoint")
            checkpoint = self.make.ToolCheckpoint(
                j.string(cp, "id", "checkpoint"),
                j.string(cp, "request_id", "checkpoint"),
                request.messages.extend(History.decode(j.field(cp, "added", "checkpoint"))),
                j.items(cp, "effects", "checkpoint", self.effect),
            )
        return self.make.Continuation(
            messages,
            j.integer(d, "revision", w),
            j.integer(d, "durable_revision", w),
            j.enum(d, "provenance", w, self.make.Provenance),
            request,
            j.items(d, "marks", w, self.mark),
            j.items(d, "branches", w, self.branch),
            checkpoint,
            j.integer(d, "checkpoint_seq", w),
        )

    def mark(self, data: object) -> object:
        w = "history mark"
        d = j.obj(data, w)
        return self.make.HistoryMark(
            j.integer(d, "display_entry", w),
            j.integer(d, "revision", w),
            j.integer(d, "message_count", w),
        )

    def branch(self, data: object) -> object:
        d = j.obj(data, "branch")
        return self.make.Branch(
            j.string(d, "name", "branch"),
            History.decode(j.field(d, "messages", "branch")),
            j.items(d, "marks", "branch", self.mark),
        )

    def effect(self, data: object) -> object:
        d = j.obj(data, "tool effect")
        raw = d.get("result")
        return self.make.ToolEffect(
            ToolCall.decode(j.field(d, "call", "tool effect")),
            j.enum(d, "state", "tool effect", self.make.EffectState),
            None if raw is None else ToolOutcome.decode(raw),
        )
