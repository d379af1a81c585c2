"""Part 3 - continuation: the exact history, and tool effects that never run twice.

The continuation is what the *next* provider request is built from, so it must be exact
(no lossy re-rendering of display text) and it must survive a crash at any point. Two
mechanisms make that so:

* the **active request** records the identity (request id, turn id, base revision) of
  the one provider exchange in flight, so an outcome is applied at most once and only to
  the history it was built on;
* the **tool checkpoint** is a small ledger written *before* any tool runs: each call is
  ``pending``, then ``admitted`` (the one token to run it, persisted before running),
  then ``completed`` with its result. After a crash, :meth:`Continuation.reconcile_interrupted`
  turns the ledger into history without running anything again.

Histories are :class:`~phaseflow.turn.messages.History` values, so a request on a long
conversation shares the conversation's messages instead of copying them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from phaseflow.turn import continuation_json
from phaseflow.turn import inputs as i
from phaseflow.turn import jsonio as j
from phaseflow.turn.inputs import evolve
from phaseflow.turn.jsonio import JsonValue
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    History,
    Message,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    UserMessage,
    as_history,
    canonical_arguments,
    read_call,
    read_message,
    read_outcome,
)
from phaseflow.turn.progress import TurnId
from phaseflow.turn.rejections import Rejected, RejectionReason, refusing

__all__ = [
    "NOT_EXECUTED_TEXT",
    "OUTCOME_UNKNOWN_TEXT",
    "ActiveRequest",
    "Branch",
    "Continuation",
    "EffectState",
    "HistoryMark",
    "Provenance",
    "Reconciled",
    "RequestOutcome",
    "ToolCheckpoint",
    "ToolEffect",
    "history_problem",
]

R = RejectionReason

OUTCOME_UNKNOWN_TEXT = (
    "Tool call outcome unknown: the session was interrupted while this call was running. "
    "It was not re-run; check its effects before retrying."
)
NOT_EXECUTED_TEXT = "Tool call not executed: the session was interrupted before this call ran."


class Provenance(StrEnum):
    NATIVE = "native"
    LEGACY_RECONSTRUCTED = "legacy_reconstructed"
    """Rebuilt from display text: tool calls, reasoning and exact wording may be lost."""


class EffectState(StrEnum):
    PENDING = "pending"
    ADMITTED = "admitted"
    COMPLETED = "completed"


@dataclass(frozen=True, slots=True)
class ActiveRequest:
    """The provider exchange in flight: its identity and the exact messages it sent."""

    id: str
    turn_id: TurnId
    revision: int
    messages: History

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", i.text(self.id, "request id"))
        object.__setattr__(self, "turn_id", i.integer(self.turn_id, "request turn id"))
        object.__setattr__(self, "revision", i.integer(self.revision, "request revision"))
        object.__setattr__(self, "messages", as_history(self.messages))


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """What a request produced: the full resulting history, tagged with its identity.

    Build ``messages`` by extending the request's (or the checkpoint's) history, e.g.
    ``request.messages.extend(new)``; the extension check is then O(new messages).
    """

    request_id: str
    turn_id: TurnId
    revision: int
    messages: History

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_id", i.text(self.request_id, "outcome request id"))
        object.__setattr__(self, "turn_id", i.integer(self.turn_id, "outcome turn id"))
        object.__setattr__(self, "revision", i.integer(self.revision, "outcome revision"))
        object.__setattr__(self, "messages", as_history(self.messages))


@dataclass(frozen=True, slots=True)
class HistoryMark:
    """Completing revision ``revision`` produced display entry ``display_entry``; the
    history then had ``message_count`` messages (the rewind point for that entry)."""

    display_entry: int
    revision: int
    message_count: int

    def __post_init__(self) -> None:
        setf = object.__setattr__
        setf(self, "display_entry", i.integer(self.display_entry, "mark display entry"))
        setf(self, "revision", i.integer(self.revision, "mark revision"))
        setf(self, "message_count", i.integer(self.message_count, "mark message count"))


def _read_mark(value: object, what: str) -> HistoryMark:
    return i.exactly(value, (HistoryMark,), what)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Branch:
    name: str
    messages: History
    marks: tuple[HistoryMark, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", i.text(self.name, "branch name"))
        object.__setattr__(self, "messages", as_history(self.messages))
        object.__setattr__(self, "marks", i.sequence(self.marks, "branch marks", _read_mark))


def _read_branch(value: object, what: str) -> Branch:
    return i.exactly(value, (Branch,), what)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class ToolEffect:
    call: ToolCall
    state: EffectState = EffectState.PENDING
    result: ToolOutcome | None = None

    def __post_init__(self) -> None:
        read_call(self.call, "effect call")
        object.__setattr__(self, "state", i.member(EffectState, self.state, "effect state"))
        if self.result is not None:
            read_outcome(self.result, "effect result")


def _read_effect(value: object, what: str) -> ToolEffect:
    return i.exactly(value, (ToolEffect,), what)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class ToolCheckpoint:
    """The ledger of one tool group: ``messages`` ends with the assistant's tool calls."""

    id: str
    request_id: str
    messages: History
    effects: tuple[ToolEffect, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", i.text(self.id, "checkpoint id"))
        object.__setattr__(self, "request_id", i.text(self.request_id, "checkpoint request id"))
        object.__setattr__(self, "messages", as_history(self.messages))
        object.__setattr__(self, "effects", i.sequence(self.effects, "effects", _read_effect))

    @property
    def complete(self) -> bool:
        return all(e.state is EffectState.COMPLETED for e in self.effects)

    def effect(self, call_id: str) -> ToolEffect | None:
        for e in self.effects:
            if e.call.id == call_id:
                return e
        return None

    def resolved_messages(self) -> History:
        """``messages`` plus one result per completed call, in call order. O(calls)."""
        return self.messages.extend(
            e.result.to_message(e.call.id) for e in self.effects if e.result is not None
        )


class _LocatedEffect(NamedTuple):
    """A checkpoint's effect and its position (where ``_set_effect`` writes it back)."""

    position: int
    effect: ToolEffect


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The checkpoint became history; which calls had which fate."""

    continuation: Continuation
    completed: tuple[str, ...]
    outcome_unknown: tuple[str, ...]
    not_executed: tuple[str, ...]


def history_problem(
    messages: Iterable[Message], *, system_first: bool = True, open_calls_ok: bool = False
) -> str:
    """Why ``messages`` is not a well-formed finished history ('' when it is).

    Well-formed: a system message only first (or nowhere when ``system_first`` is
    false); every tool result answers an earlier, unanswered call; every call is
    answered exactly once by the end (unless ``open_calls_ok``: a tool group being
    checkpointed is unanswered by definition). O(n).
    """
    if type(messages) is not tuple:
        messages = as_history(messages)  # refuses anything that is not messages
    else:
        for message in messages:
            read_message(message, "message")
    system_first = i.flag(system_first, "system_first")
    open_calls_ok = i.flag(open_calls_ok, "open_calls_ok")
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            if index != 0 or not system_first:
                return f"system message at position {index}"
        elif isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                if not call.id or call.id in open_calls:
                    return f"tool call id {i.describe(call.id)} empty or already open"
                open_calls.add(call.id)
        elif isinstance(message, ToolResultMessage):
            if message.call_id not in open_calls:
                return f"tool result for unknown or answered call {i.describe(message.call_id)}"
            open_calls.discard(message.call_id)
    if open_calls and not open_calls_ok:
        return f"tool calls without a result: {i.describe(sorted(open_calls), 200)}"
    return ""


def _closed_prefixes(messages: Iterable[Message]) -> set[int]:
    """The lengths ``k`` at which the first ``k`` messages leave no tool call open. O(n)."""
    closed = {0}
    open_calls: set[str] = set()
    for index, message in enumerate(messages, 1):
        if isinstance(message, AssistantMessage):
            open_calls.update(c.id for c in message.tool_calls)
        elif isinstance(message, ToolResultMessage):
            open_calls.discard(message.call_id)
        if not open_calls:
            closed.add(index)
    return closed


def _marks_problem(marks: tuple[HistoryMark, ...], messages: History, revision: int) -> str:
    length = len(messages)
    closed = _closed_prefixes(messages) if marks else set()
    prev: HistoryMark | None = None
    for b in marks:
        if b.display_entry < 0 or b.revision < 1 or not 0 <= b.message_count <= length:
            return f"history mark {b} out of range"
        if b.message_count not in closed:
            return f"history mark {b} cuts a tool group (rewinding there would leave calls open)"
        if b.revision > revision:
            return f"history mark revision {b.revision} ahead of revision {revision}"
        if prev is not None and (
            b.display_entry <= prev.display_entry
            or b.revision <= prev.revision
            or b.message_count < prev.message_count
        ):
            return "history marks are not increasing"
        prev = b
    return ""


def _checkpoint_id(request_id: str, seq: int) -> str:
    """The id of a request's tool group number ``seq``: the only form a checkpoint has."""
    return f"{request_id}#{seq}"


def _group_calls_problem(messages: History, calls: tuple[ToolCall, ...]) -> Rejected | None:
    """A tool group's calls: unique, non-empty ids, made by the group's last message.

    One of the two rules of a checkpoint, shared by ``checkpoint_tool_group`` (a live
    group) and restore (a persisted one), so both hold exactly the same values.
    """
    ids = [c.id for c in calls]
    if not calls or "" in ids or len(set(ids)) != len(ids):
        return Rejected(R.INVALID_TOOL_CALLS, "calls need unique, non-empty ids")
    last = messages.last()
    if not isinstance(last, AssistantMessage) or last.tool_calls != calls:
        return Rejected(
            R.INVALID_TOOL_CALLS, "messages must end with the assistant message making calls"
        )
    return None


def _group_history_problem(base: History, messages: History) -> Rejected | None:
    """A tool group's messages strictly extend ``base`` and leave nothing open before it.

    Everything before the group's assistant message must be answered: a call left open
    there would never get a result (not from the ledger, not from reconcile).
    """
    if len(messages) <= len(base) or not messages.starts_with(base):
        return Rejected(R.HISTORY_MISMATCH, "messages do not extend the request's history")
    problem = history_problem(messages.after(len(base))[:-1], system_first=False)
    if problem:
        return Rejected(R.INVALID_HISTORY, problem)
    return None


@dataclass(frozen=True, slots=True)
class Continuation:
    """The exact history and everything needed to continue it. See ``docs/turn-core.md``."""

    messages: History = field(default_factory=History)
    revision: int = 0
    durable_revision: int = 0
    provenance: Provenance = Provenance.NATIVE
    request: ActiveRequest | None = None
    marks: tuple[HistoryMark, ...] = ()
    branches: tuple[Branch, ...] = ()
    checkpoint: ToolCheckpoint | None = None
    checkpoint_seq: int = 0

    def __post_init__(self) -> None:
        # Read every field once, here; the operations below copy the value with
        # ``evolve``, which does not re-check (each field they set was read already).
        setf = object.__setattr__
        setf(self, "messages", as_history(self.messages))
        setf(self, "revision", i.integer(self.revision, "revision"))
        setf(self, "durable_revision", i.integer(self.durable_revision, "durable revision"))
        setf(self, "provenance", i.member(Provenance, self.provenance, "provenance"))
        if self.request is not None:
            i.exactly(self.request, (ActiveRequest,), "request")
        setf(self, "marks", i.sequence(self.marks, "marks", _read_mark))
        setf(self, "branches", i.sequence(self.branches, "branches", _read_branch))
        if self.checkpoint is not None:
            i.exactly(self.checkpoint, (ToolCheckpoint,), "checkpoint")
        setf(self, "checkpoint_seq", i.integer(self.checkpoint_seq, "checkpoint sequence"))

    # --- requests ---

    def begin_request(
        self, request_id: str, turn_id: TurnId, content: Content | None, note: str = ""
    ) -> Continuation | Rejected:
        """Record a request: the history plus ``content`` as a user message (if given;
        ``note``: the session's, not the user's: see :class:`UserMessage`).

        O(1): the request shares the history. The canonical history changes only when
        the outcome is applied.
        """
        if self.checkpoint is not None:
            return Rejected(R.EFFECT_RECONCILIATION_REQUIRED, "a tool checkpoint is unresolved")
        if self.request is not None:
            shown = i.describe(self.request.id)
            return Rejected(R.REQUEST_ACTIVE, f"request {shown} is active")
        try:
            request_id = i.text(request_id, "request id")
            turn_id = TurnId(i.integer(turn_id, "turn id"))
            message = None if content is None else UserMessage(content, note)
        except i.TurnInputError as exc:
            return Rejected(R.INVALID_REQUEST, str(exc))
        if not request_id:
            return Rejected(R.INVALID_REQUEST, "a request needs a non-empty id")
        if turn_id < 1:
            shown = i.describe(turn_id)
            return Rejected(R.INVALID_REQUEST, f"turn id must be a positive integer: {shown}")
        sent = self.messages if message is None else self.messages.append(message)
        return evolve(self, request=ActiveRequest(request_id, turn_id, self.revision, sent))

    @refusing(R.INVALID_ARGUMENT)
    def abandon_request(self, request_id: str) -> Continuation | Rejected:
        """Drop a request that produced nothing (provider failed before any tool ran)."""
        bad = self._request(request_id)
        if bad:
            return bad
        if self.checkpoint is not None:
            return Rejected(R.EFFECT_RECONCILIATION_REQUIRED, "a tool checkpoint is unresolved")
        return evolve(self, request=None)

    @refusing(R.INVALID_ARGUMENT)
    def complete(
        self, outcome: RequestOutcome, display_entry: int | None = None
    ) -> Continuation | Rejected:
        """Apply the outcome of the active request, once. O(new messages + nodes walked).

        The outcome may equal its base (a turn cancelled before any reply keeps its
        prompt and its tool results). ``display_entry`` is the display index this
        completion produced (default: one after the last mark's).
        """
        i.exactly(outcome, (RequestOutcome,), "outcome")
        display_entry = i.opt_integer(display_entry, "display entry")
        request = self.request
        if request is None:
            return Rejected(R.DUPLICATE_OUTCOME, "no request is active")
        if (outcome.request_id, outcome.turn_id, outcome.revision) != (
            request.id,
            request.turn_id,
            request.revision,
        ):
            return Rejected(
                R.STALE_OUTCOME,
                f"outcome for ({i.describe(outcome.request_id)}, {outcome.turn_id},"
                f" {outcome.revision}), active is ({i.describe(request.id)}, {request.turn_id},"
                f" {request.revision})",
            )
        base = request.messages
        if self.checkpoint is not None:
            if not self.checkpoint.complete:
                return Rejected(R.TOOL_EFFECTS_INCOMPLETE, "every tool call must be completed")
            base = self.checkpoint.resolved_messages()
        if not outcome.messages.starts_with(base):
            return Rejected(R.HISTORY_MISMATCH, "outcome does not extend the request's messages")
        new_part = outcome.messages.after(len(request.messages))
        problem = history_problem(new_part, system_first=False)
        if problem:
            return Rejected(R.INVALID_HISTORY, problem)
        last = self.marks[-1].display_entry if self.marks else -1
        entry = last + 1 if display_entry is None else display_entry
        if entry <= last:
            return Rejected(R.INVALID_MARK, f"display entry {entry} is not after {last}")
        revision = self.revision + 1
        return evolve(
            self,
            messages=outcome.messages,
            revision=revision,
            request=None,
            checkpoint=None,
            marks=(*self.marks, HistoryMark(entry, revision, len(outcome.messages))),
        )

    # --- exactly-once tool effects ---

    @refusing(R.INVALID_ARGUMENT)
    def checkpoint_tool_group(
        self, request_id: str, messages: History | Iterable[Message], calls: Iterable[ToolCall]
    ) -> Continuation | Rejected:
        """Record a tool group, every call ``pending``, before any of it runs.

        ``messages`` must extend the request's messages (or, for a later group, the
        previous checkpoint's messages plus results) and end with the assistant message
        that makes exactly ``calls``. The new checkpoint id is ``checkpoint.id``.
        """
        bad = self._request(request_id)
        if bad:
            return bad
        assert self.request is not None
        try:
            history = as_history(messages)
        except i.TurnInputError as exc:
            return Rejected(R.INVALID_HISTORY, str(exc))
        try:
            group = i.sequence(calls, "calls", read_call)
        except i.TurnInputError as exc:
            return Rejected(R.INVALID_TOOL_CALLS, str(exc))
        bad = _group_calls_problem(history, group)
        if bad:
            return bad
        base = self.request.messages
        if self.checkpoint is not None:
            if not self.checkpoint.complete:
                return Rejected(R.TOOL_EFFECTS_INCOMPLETE, "the previous group is not completed")
            base = self.checkpoint.resolved_messages()
        bad = _group_history_problem(base, history)
        if bad:
            return bad
        seq = self.checkpoint_seq + 1
        checkpoint = ToolCheckpoint(
            _checkpoint_id(request_id, seq),
            request_id,
            history,
            tuple(ToolEffect(c) for c in group),
        )
        return evolve(self, checkpoint=checkpoint, checkpoint_seq=seq)

    @refusing(R.INVALID_ARGUMENT)
    def admit_tool_effect(
        self, request_id: str, checkpoint_id: str, call_id: str, name: str, arguments: object
    ) -> Continuation | Rejected:
        """Grant the one token to run a call (``pending`` to ``admitted``).

        ``arguments`` is the JSON value the host is about to run with; it must equal the
        checkpointed call's (key order does not matter). Persist the result of this
        operation *before* running the tool.
        """
        found = self._effect(request_id, checkpoint_id, call_id)
        if isinstance(found, Rejected):
            return found
        index, effect = found.position, found.effect
        name = i.text(name, "tool name")
        canonical = canonical_arguments(arguments)
        if effect.call.name != name or canonical != effect.call.arguments:
            return Rejected(
                R.TOOL_CALL_IDENTITY_MISMATCH,
                f"{i.describe(call_id)} was checkpointed with another name or other arguments",
            )
        if effect.state is not EffectState.PENDING:
            shown = i.describe(call_id)
            return Rejected(R.DUPLICATE_ADMISSION, f"{shown} is already {effect.state}")
        return self._set_effect(index, evolve(effect, state=EffectState.ADMITTED))

    @refusing(R.INVALID_ARGUMENT)
    def admit_call(
        self, request_id: str, checkpoint_id: str, call: ToolCall
    ) -> Continuation | Rejected:
        """:meth:`admit_tool_effect` for a :class:`ToolCall` value (compares canonical text)."""
        call = read_call(call, "call")
        found = self._effect(request_id, checkpoint_id, call.id)
        if isinstance(found, Rejected):
            return found
        index, effect = found.position, found.effect
        if effect.call != call:
            shown = i.describe(call.id)
            return Rejected(R.TOOL_CALL_IDENTITY_MISMATCH, f"{shown} differs from checkpoint")
        if effect.state is not EffectState.PENDING:
            shown = i.describe(call.id)
            return Rejected(R.DUPLICATE_ADMISSION, f"{shown} is already {effect.state}")
        return self._set_effect(index, evolve(effect, state=EffectState.ADMITTED))

    @refusing(R.INVALID_ARGUMENT)
    def complete_tool_effect(
        self,
        request_id: str,
        checkpoint_id: str,
        call_id: str,
        name: str,
        arguments: object,
        result: ToolOutcome,
    ) -> Continuation | Rejected:
        """Record an admitted call's result against the call's identity.

        ``name`` and ``arguments`` must be the checkpointed call's (as for admission);
        the same result again is a no-op (returns this very value); another result for a
        completed call is ``conflicting_tool_outcome``.
        """
        found = self._effect(request_id, checkpoint_id, call_id)
        if isinstance(found, Rejected):
            return found
        index, effect = found.position, found.effect
        name = i.text(name, "tool name")
        result = read_outcome(result, "result")
        if effect.call.name != name or canonical_arguments(arguments) != effect.call.arguments:
            return Rejected(
                R.TOOL_CALL_IDENTITY_MISMATCH,
                f"{i.describe(call_id)} was checkpointed with another name or other arguments",
            )
        return self._record(index, effect, result)

    @refusing(R.INVALID_ARGUMENT)
    def complete_call(
        self, request_id: str, checkpoint_id: str, call: ToolCall, result: ToolOutcome
    ) -> Continuation | Rejected:
        """:meth:`complete_tool_effect` for a :class:`ToolCall` value."""
        call = read_call(call, "call")
        result = read_outcome(result, "result")
        found = self._effect(request_id, checkpoint_id, call.id)
        if isinstance(found, Rejected):
            return found
        index, effect = found.position, found.effect
        if effect.call != call:
            shown = i.describe(call.id)
            return Rejected(R.TOOL_CALL_IDENTITY_MISMATCH, f"{shown} differs from checkpoint")
        return self._record(index, effect, result)

    def _record(
        self, index: int, effect: ToolEffect, result: ToolOutcome
    ) -> Continuation | Rejected:
        shown = i.describe(effect.call.id)
        if effect.state is EffectState.PENDING:
            return Rejected(R.NOT_ADMITTED, f"{shown} was never admitted")
        if effect.state is EffectState.COMPLETED:
            if effect.result == result:
                return self
            return Rejected(R.CONFLICTING_TOOL_OUTCOME, f"{shown} already has another result")
        return self._set_effect(index, evolve(effect, state=EffectState.COMPLETED, result=result))

    def reconcile_interrupted(self) -> Reconciled | Rejected:
        """After a crash: make the checkpoint history without running anything.

        Completed calls keep their results; admitted ones get an error "outcome unknown,
        not re-run"; pending ones get an error "not executed". The request ends.
        """
        checkpoint = self.checkpoint
        if checkpoint is None:
            return Rejected(R.NO_CHECKPOINT, "there is no tool checkpoint to reconcile")
        completed: list[str] = []
        unknown: list[str] = []
        skipped: list[str] = []
        results: list[Message] = []
        for e in checkpoint.effects:
            if e.result is not None:
                completed.append(e.call.id)
                outcome = e.result
            elif e.state is EffectState.ADMITTED:
                unknown.append(e.call.id)
                outcome = ToolOutcome.error(OUTCOME_UNKNOWN_TEXT)
            else:
                skipped.append(e.call.id)
                outcome = ToolOutcome.error(NOT_EXECUTED_TEXT)
            results.append(outcome.to_message(e.call.id))
        nxt = evolve(
            self,
            messages=checkpoint.messages.extend(results),
            revision=self.revision + 1,
            request=None,
            checkpoint=None,
        )
        return Reconciled(nxt, tuple(completed), tuple(unknown), tuple(skipped))

    # --- durability ---

    def mark_durable(self) -> Continuation:
        """The current revision is persisted."""
        return evolve(self, durable_revision=self.revision)

    def durable(self) -> bool:
        return self.durable_revision == self.revision

    # --- branches and rewriting ---

    @refusing(R.INVALID_ARGUMENT)
    def branch_at(self, name: str, display_entry: int) -> Continuation | Rejected:
        """Save the current history as ``name`` and rewind to a history mark's display entry."""
        bad = self._idle_history()
        if bad:
            return bad
        name = i.text(name, "branch name")
        display_entry = i.integer(display_entry, "display entry")
        if not name or self.branch(name) is not None:
            shown = i.describe(name)
            return Rejected(R.BRANCH_EXISTS, f"branch name {shown} is empty or taken")
        kept: list[HistoryMark] = []
        target: HistoryMark | None = None
        for b in self.marks:
            kept.append(b)
            if b.display_entry == display_entry:
                target = b
                break
        if target is None:
            return Rejected(R.MARK_NOT_FOUND, f"no history mark for display entry {display_entry}")
        saved = Branch(name, self.messages, self.marks)
        return evolve(
            self,
            messages=self.messages.take(target.message_count),
            marks=tuple(kept),
            revision=self.revision + 1,
            branches=(*self.branches, saved),
        )

    @refusing(R.INVALID_ARGUMENT)
    def switch_branch(
        self, name: str, save_current_as: str | None = None
    ) -> Continuation | Rejected:
        """Restore a saved branch (it stays saved); optionally save the current one first."""
        bad = self._idle_history()
        if bad:
            return bad
        save_current_as = i.opt_text(save_current_as, "branch name")
        target = self.branch(name)
        if target is None:
            return Rejected(R.BRANCH_NOT_FOUND, f"no branch {i.describe(name)}")
        branches = self.branches
        if save_current_as is not None:
            if not save_current_as or self.branch(save_current_as) is not None:
                shown = i.describe(save_current_as)
                return Rejected(R.BRANCH_EXISTS, f"branch name {shown} is taken")
            branches = (*branches, Branch(save_current_as, self.messages, self.marks))
        return evolve(
            self,
            messages=target.messages,
            marks=target.marks,
            revision=self.revision + 1,
            branches=branches,
        )

    def branch(self, name: str) -> Branch | None:
        name = i.text(name, "branch name")
        for b in self.branches:
            if b.name == name:
                return b
        return None

    def replace_messages(self, messages: History | Iterable[Message]) -> Continuation | Rejected:
        """Install a compacted history as a new revision. Marks are cleared: they
        pointed into the old history (save a branch first to keep it). O(n) validation."""
        bad = self._idle_history()
        if bad:
            return bad
        try:
            history = as_history(messages)
        except i.TurnInputError as exc:
            return Rejected(R.INVALID_HISTORY, str(exc))
        problem = history_problem(history)
        if problem:
            return Rejected(R.INVALID_HISTORY, problem)
        return evolve(self, messages=history, revision=self.revision + 1, marks=())

    @refusing(R.INVALID_ARGUMENT)
    def replace_system(self, message: SystemMessage) -> Continuation | Rejected:
        """Change (or add) the system prompt as a new revision. O(n): copies the history."""
        bad = self._idle_history()
        if bad:
            return bad
        i.exactly(message, (SystemMessage,), "system message")
        first = self.messages[0] if len(self.messages) else None
        marks = self.marks
        if isinstance(first, SystemMessage):
            history = History((message,)).extend(self.messages.after(1))
        else:
            history = History((message,)).extend(self.messages)
            marks = tuple(evolve(b, message_count=b.message_count + 1) for b in marks)
        return evolve(self, messages=history, revision=self.revision + 1, marks=marks)

    # --- restore and legacy import ---

    @classmethod
    def restore(
        cls,
        messages: History | Iterable[Message],
        revision: int,
        durable_revision: int,
        *,
        provenance: Provenance = Provenance.NATIVE,
        request: ActiveRequest | None = None,
        marks: Iterable[HistoryMark] = (),
        branches: Iterable[Branch] = (),
        checkpoint: ToolCheckpoint | None = None,
        checkpoint_seq: int = 0,
    ) -> Continuation | Rejected:
        """Rebuild from persisted parts, validating every part and every invariant.

        Never raises: a part of the wrong type, like a broken invariant, is
        ``invalid_restore``; so is anything the live value could never hold.
        """
        try:
            value = cls(
                as_history(messages),
                revision,
                durable_revision,
                provenance,
                request,
                i.sequence(marks, "marks", _read_mark),
                i.sequence(branches, "branches", _read_branch),
                checkpoint,
                checkpoint_seq,
            )
        except i.TurnInputError as exc:
            return Rejected(R.INVALID_RESTORE, str(exc))
        return value.validate()

    def validate(self) -> Continuation | Rejected:
        problem = _continuation_problem(self)
        return Rejected(R.INVALID_RESTORE, problem) if problem else self

    @classmethod
    def import_legacy(cls, display_messages: Iterable[object]) -> Continuation | Rejected:
        """Build an explicitly lossy history from plain ``(role, text)`` display entries.

        Entries are ``(role, text)`` pairs or ``{"role": ..., "text": ...}`` objects with
        role ``user`` or ``assistant``. Every assistant entry ends a revision and records
        a history mark at its display index, so branching works on imported histories.
        """
        if isinstance(display_messages, str | bytes | Mapping) or not isinstance(
            display_messages, Iterable
        ):
            return Rejected(R.INVALID_HISTORY, "expected a sequence of (role, text) entries")
        messages: list[Message] = []
        marks: list[HistoryMark] = []
        for index, entry in enumerate(display_messages):
            if isinstance(entry, Mapping):
                role, text = entry.get("role"), entry.get("text")
            elif isinstance(entry, tuple | list) and len(entry) == 2:
                role, text = entry
            else:
                return Rejected(R.INVALID_HISTORY, f"entry {index}: expected (role, text)")
            if not isinstance(text, str) or not isinstance(role, str):
                return Rejected(R.INVALID_HISTORY, f"entry {index}: role and text are strings")
            if role == "user":
                messages.append(UserMessage(text))
            elif role == "assistant":
                messages.append(AssistantMessage(text))
                marks.append(HistoryMark(index, len(marks) + 1, len(messages)))
            else:
                return Rejected(
                    R.INVALID_HISTORY, f"entry {index}: role {i.describe(role)} not importable"
                )
        return cls(
            History(messages),
            len(marks),
            0,
            Provenance.LEGACY_RECONSTRUCTED,
            marks=tuple(marks),
        )

    # --- JSON ---

    def to_json(self, *, messages_from: int = 0, marks_from: int = 0) -> dict[str, JsonValue]:
        """Plain JSON. The request and checkpoint store only the messages they add;
        ``messages_from`` / ``marks_from`` leave out the history's first messages and
        marks (for a store that keeps them already: put them back before reading)."""
        return continuation_json.continuation_to_json(self, messages_from, marks_from)

    @classmethod
    def from_json(cls, data: object) -> Continuation | Rejected:
        decoded = j.decode(data, _decode)
        return decoded if isinstance(decoded, Rejected) else decoded.validate()

    # --- helpers ---

    def _request(self, request_id: str) -> Rejected | None:
        """Whether ``request_id`` names the active request (``TurnInputError`` if not a
        string: every caller is an operation that turns it into a rejection)."""
        request_id = i.text(request_id, "request id")
        if self.request is None:
            return Rejected(R.NO_ACTIVE_REQUEST, "no request is active")
        if self.request.id != request_id:
            shown = i.describe(self.request.id)
            return Rejected(R.UNKNOWN_REQUEST, f"active request is {shown}")
        return None

    def _idle_history(self) -> Rejected | None:
        if self.checkpoint is not None:
            return Rejected(R.EFFECT_RECONCILIATION_REQUIRED, "a tool checkpoint is unresolved")
        if self.request is not None:
            shown = i.describe(self.request.id)
            return Rejected(R.REQUEST_ACTIVE, f"request {shown} is active")
        return None

    def _effect(
        self, request_id: str, checkpoint_id: str, call_id: str
    ) -> _LocatedEffect | Rejected:
        bad = self._request(request_id)
        if bad:
            return bad
        checkpoint_id = i.text(checkpoint_id, "checkpoint id")
        call_id = i.text(call_id, "call id")
        if self.checkpoint is None or self.checkpoint.id != checkpoint_id:
            return Rejected(R.CHECKPOINT_NOT_FOUND, f"no checkpoint {i.describe(checkpoint_id)}")
        for index, effect in enumerate(self.checkpoint.effects):
            if effect.call.id == call_id:
                return _LocatedEffect(index, effect)
        return Rejected(
            R.CALL_NOT_FOUND,
            f"no call {i.describe(call_id)} in checkpoint {i.describe(checkpoint_id)}",
        )

    def _set_effect(self, index: int, effect: ToolEffect) -> Continuation:
        assert self.checkpoint is not None
        effects = self.checkpoint.effects
        updated = (*effects[:index], effect, *effects[index + 1 :])
        return evolve(self, checkpoint=evolve(self.checkpoint, effects=updated))


def _continuation_problem(c: Continuation) -> str:
    if c.revision < 0 or not 0 <= c.durable_revision <= c.revision:
        return "durable revision must be between 0 and the revision"
    if c.checkpoint_seq < 0:
        return "negative checkpoint sequence"
    problem = history_problem(c.messages)
    if problem:
        return f"messages: {problem}"
    problem = _marks_problem(c.marks, c.messages, c.revision)
    if problem:
        return problem
    names = [b.name for b in c.branches]
    if "" in names or len(set(names)) != len(names):
        return "branch names must be unique and non-empty"
    for b in c.branches:
        problem = history_problem(b.messages) or _marks_problem(b.marks, b.messages, c.revision)
        if problem:
            return f"branch {i.describe(b.name)}: {problem}"
    r = c.request
    if r is not None:
        if not r.id or r.turn_id < 1 or r.revision != c.revision:
            return "the request must have an id, a turn and be built on the current revision"
        if not len(c.messages) <= len(r.messages) <= len(c.messages) + 1:
            return "the request adds at most one user message"
        if not r.messages.starts_with(c.messages):
            return "the request's messages do not extend the history"
        added = r.messages.after(len(c.messages))
        if added and not isinstance(added[0], UserMessage):
            return "the request adds at most one user message"
    cp = c.checkpoint
    if cp is not None:
        if r is None or cp.request_id != r.id:
            return "a checkpoint exists only with its request"
        if c.checkpoint_seq < 1 or cp.id != _checkpoint_id(r.id, c.checkpoint_seq):
            # Only the id the live value would have generated: any other (an old group's,
            # a future one's) could be handed out again and match a stale admission.
            return "checkpoint id is not the one its request and sequence generate"
        bad = _group_calls_problem(cp.messages, tuple(e.call for e in cp.effects))
        bad = bad or _group_history_problem(r.messages, cp.messages)
        if bad:
            return f"checkpoint: {bad.detail}"
        for e in cp.effects:
            if (e.result is not None) != (e.state is EffectState.COMPLETED):
                return f"effect {i.describe(e.call.id)}: a result exactly when completed"
    return ""


# --- JSON: the codec builds values with these classes (it does not import this module) ---

_CLASSES = continuation_json.ContinuationClasses(
    Continuation=Continuation,
    ActiveRequest=ActiveRequest,
    ToolCheckpoint=ToolCheckpoint,
    HistoryMark=HistoryMark,
    Branch=Branch,
    ToolEffect=ToolEffect,
    Provenance=Provenance,
    EffectState=EffectState,
)


def _decode(data: object) -> Continuation:
    return continuation_json.decode_continuation(data, _CLASSES)
