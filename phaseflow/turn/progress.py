"""Part 2 - turn progress: which turn is running, and that no tool result is ever lost.

Everything that happens during a turn arrives as an event from some asynchronous source
(a provider stream, a tool runner, a compactor, the user pressing stop). Events for an
old turn arrive late all the time; each event therefore carries the :data:`TurnId` it
belongs to, and an event the current stage does not accept changes nothing and is
answered with a :class:`Rejected` that says why (``stale_turn``, ``cancelling``, ...).

Tool results live in slots, one per call, filled first-come-first-served; the turn goes
on to the follow-up generation only when every slot is filled, and cancelling fills the
empty ones with a ``cancelled`` result instead of dropping them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal, NamedTuple, NewType

from phaseflow.turn import inputs as i
from phaseflow.turn import jsonio as j
from phaseflow.turn import progress_json
from phaseflow.turn.inputs import evolve
from phaseflow.turn.jsonio import JsonValue
from phaseflow.turn.messages import ToolCall, ToolOutcome, read_call, read_outcome
from phaseflow.turn.rejections import Rejected, RejectionReason, refusing

__all__ = [
    "CallOutcome",
    "Cancelling",
    "Compacting",
    "CompactionTrigger",
    "ExecutingTools",
    "Generating",
    "Idle",
    "NextStep",
    "StopReason",
    "StreamEnded",
    "SubPhase",
    "ToolResultAccepted",
    "TurnId",
    "TurnProgress",
    "TurnStage",
    "TurnStarted",
]

R = RejectionReason

TurnId = NewType("TurnId", int)
"""A turn's identity: positive, fresh and strictly increasing within one machine."""


class SubPhase(StrEnum):
    SENDING = "sending"
    THINKING = "thinking"
    STREAMING = "streaming"


class CompactionTrigger(StrEnum):
    MANUAL = "manual"
    AUTO_THRESHOLD = "auto_threshold"
    CONTEXT_LIMIT_RETRY = "context_limit_retry"
    TRUNCATION_RECOVERY = "truncation_recovery"


class StopReason(StrEnum):
    """Why a provider stream ended."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"


@dataclass(frozen=True, slots=True)
class Idle:
    kind: ClassVar[Literal["idle"]] = "idle"


@dataclass(frozen=True, slots=True)
class Generating:
    """A provider call is in flight; text and tool calls stream into it (uncommitted)."""

    turn_id: TurnId
    text: str = ""
    reasoning: str = ""
    token_estimate: int = 0
    sub_phase: SubPhase = SubPhase.SENDING
    pending_tool_calls: tuple[ToolCall, ...] = ()
    continuation: bool = False
    """This generation continues a reply cut by the output cap: stitch, do not start anew."""
    kind: ClassVar[Literal["generating"]] = "generating"

    def __post_init__(self) -> None:
        setf = object.__setattr__
        setf(self, "turn_id", i.integer(self.turn_id, "turn id"))
        setf(self, "text", i.text(self.text, "text"))
        setf(self, "reasoning", i.text(self.reasoning, "reasoning"))
        setf(self, "token_estimate", i.integer(self.token_estimate, "token estimate"))
        setf(self, "sub_phase", i.member(SubPhase, self.sub_phase, "sub-phase"))
        setf(self, "pending_tool_calls", i.sequence(self.pending_tool_calls, "calls", read_call))
        setf(self, "continuation", i.flag(self.continuation, "continuation"))


@dataclass(frozen=True, slots=True)
class ExecutingTools:
    """One outcome slot per call, in call order; ``None`` means not yet filled."""

    turn_id: TurnId
    calls: tuple[ToolCall, ...]
    outcomes: tuple[ToolOutcome | None, ...]
    kind: ClassVar[Literal["executing_tools"]] = "executing_tools"

    def __post_init__(self) -> None:
        object.__setattr__(self, "turn_id", i.integer(self.turn_id, "turn id"))
        object.__setattr__(self, "calls", i.sequence(self.calls, "calls", read_call))
        object.__setattr__(self, "outcomes", i.sequence(self.outcomes, "outcomes", _read_slot))

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(c.id for c, o in zip(self.calls, self.outcomes, strict=True) if o is None)


@dataclass(frozen=True, slots=True)
class Compacting:
    turn_id: TurnId
    trigger: CompactionTrigger
    resume_continuation: bool = False
    kind: ClassVar[Literal["compacting"]] = "compacting"

    def __post_init__(self) -> None:
        object.__setattr__(self, "turn_id", i.integer(self.turn_id, "turn id"))
        object.__setattr__(self, "trigger", i.member(CompactionTrigger, self.trigger, "trigger"))
        resume = i.flag(self.resume_continuation, "resume continuation")
        object.__setattr__(self, "resume_continuation", resume)


@dataclass(frozen=True, slots=True)
class Cancelling:
    """Cancelled; waiting for the runner to confirm the turn's work has stopped.

    ``calls``/``outcomes`` are the turn's tool calls with every slot filled (the empty
    ones with ``cancelled``), so the host can commit a result for every call.
    """

    turn_id: TurnId
    since: float
    calls: tuple[ToolCall, ...] = ()
    outcomes: tuple[ToolOutcome, ...] = ()
    kind: ClassVar[Literal["cancelling"]] = "cancelling"

    def __post_init__(self) -> None:
        object.__setattr__(self, "turn_id", i.integer(self.turn_id, "turn id"))
        object.__setattr__(self, "since", i.number(self.since, "cancel time"))
        object.__setattr__(self, "calls", i.sequence(self.calls, "calls", read_call))
        object.__setattr__(self, "outcomes", i.sequence(self.outcomes, "outcomes", read_outcome))


TurnStage = Idle | Generating | ExecutingTools | Compacting | Cancelling
_STAGES = (Idle, Generating, ExecutingTools, Compacting, Cancelling)


def _read_slot(value: object, what: str) -> ToolOutcome | None:
    return None if value is None else read_outcome(value, what)


class NextStep(StrEnum):
    """What the host does after a stream ends."""

    DONE = "done"
    RUN_TOOLS = "run_tools"
    CONTINUE = "continue"


@dataclass(frozen=True, slots=True)
class TurnStarted:
    progress: TurnProgress
    turn_id: TurnId


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The committed reply fragment and what to do next.

    ``continuation`` is true when this fragment continues the previous assistant reply
    (append it to that message rather than starting a new one).
    """

    progress: TurnProgress
    text: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    continuation: bool
    next: NextStep


class CallOutcome(NamedTuple):
    """One tool call of a finished tool group with the outcome that filled its slot."""

    call: ToolCall
    outcome: ToolOutcome


@dataclass(frozen=True, slots=True)
class ToolResultAccepted:
    progress: TurnProgress
    completed: tuple[CallOutcome, ...] | None
    """Every call with its outcome, in call order, once the last slot was filled."""


@dataclass(frozen=True, slots=True)
class TurnProgress:
    """Where the current turn is (its :data:`TurnStage`) plus the last turn id handed out.

    A value, not a machine: every event method returns the next ``TurnProgress``.
    """

    stage: TurnStage = field(default_factory=Idle)
    last_turn_id: int = 0

    def __post_init__(self) -> None:
        i.exactly(self.stage, _STAGES, "stage")
        object.__setattr__(self, "last_turn_id", i.integer(self.last_turn_id, "last turn id"))

    @property
    def turn_id(self) -> TurnId | None:
        state = self.stage
        return None if isinstance(state, Idle) else state.turn_id

    def _check(self, turn: TurnId, *kinds: type) -> Rejected | None:
        """Whether an event for ``turn`` applies to the current stage (one of ``kinds``)."""
        if type(turn) is not int:
            turn = TurnId(i.integer(turn, "turn"))  # ``refusing`` makes a non-int a rejection
        state = self.stage
        if isinstance(state, Idle) or state.turn_id != turn:
            shown = i.describe(turn)
            return Rejected(R.STALE_TURN, f"event for turn {shown}, current is {self.turn_id}")
        if isinstance(state, Cancelling) and Cancelling not in kinds:
            return Rejected(R.CANCELLING, f"turn {turn} is cancelling; event ignored")
        if not isinstance(state, kinds):
            return Rejected(R.INVALID_STATE, f"turn {turn} is {state.kind}")
        return None

    def _generating(self, turn: TurnId) -> Generating | Rejected:
        """The stage, when an event for ``turn`` applies to it streaming a reply (the
        events of the stream); else why not."""
        bad = self._check(turn, Generating)
        if bad:
            return bad
        s = self.stage
        assert isinstance(s, Generating)
        return s

    def _fresh(self) -> TurnId | Rejected:
        if self.last_turn_id >= i.MAX_INT:
            return Rejected(R.INVALID_STATE, "every turn id has been handed out")
        return TurnId(self.last_turn_id + 1)

    # --- starting ---

    def start_turn(self) -> TurnStarted | Rejected:
        """Idle to ``Generating`` under a fresh turn id."""
        if not isinstance(self.stage, Idle):
            return Rejected(R.TURN_ACTIVE, f"turn {self.turn_id} is {self.stage.kind}")
        turn = self._fresh()
        if isinstance(turn, Rejected):
            return turn
        return TurnStarted(TurnProgress(Generating(turn), turn), turn)

    def start_compaction(self) -> TurnStarted | Rejected:
        """A manual compaction between turns: a turn of its own, ending in ``Idle``."""
        if not isinstance(self.stage, Idle):
            return Rejected(R.TURN_ACTIVE, f"turn {self.turn_id} is {self.stage.kind}")
        turn = self._fresh()
        if isinstance(turn, Rejected):
            return turn
        return TurnStarted(
            TurnProgress(Compacting(turn, CompactionTrigger.MANUAL, False), turn), turn
        )

    # --- streaming ---

    @refusing(R.INVALID_ARGUMENT)
    def reasoning_delta(self, turn: TurnId, text: str) -> TurnProgress | Rejected:
        return self._delta(turn, "reasoning", text, SubPhase.THINKING)

    @refusing(R.INVALID_ARGUMENT)
    def text_delta(self, turn: TurnId, text: str) -> TurnProgress | Rejected:
        return self._delta(turn, "text", text, SubPhase.STREAMING)

    def _delta(self, turn: TurnId, part: Literal["text", "reasoning"], text: str,
               sub_phase: SubPhase) -> TurnProgress | Rejected:
        """A piece of the reply's ``text`` or ``reasoning``, appended to what came before."""
        s = self._generating(turn)
        if isinstance(s, Rejected):
            return s
        text = i.text(text, part)
        changes = {part: getattr(s, part) + text}
        return self._to(evolve(s, sub_phase=sub_phase, **changes))

    @refusing(R.INVALID_ARGUMENT)
    def tool_call(self, turn: TurnId, call: ToolCall) -> TurnProgress | Rejected:
        """A complete tool call parsed from the stream (ids must be unique and non-empty)."""
        s = self._generating(turn)
        if isinstance(s, Rejected):
            return s
        call = read_call(call, "tool call")
        if not call.id or any(c.id == call.id for c in s.pending_tool_calls):
            shown = i.describe(call.id)
            return Rejected(R.INVALID_TOOL_CALLS, f"tool call id {shown} empty or repeated")
        return self._to(
            evolve(
                s, pending_tool_calls=(*s.pending_tool_calls, call), sub_phase=SubPhase.STREAMING
            )
        )

    @refusing(R.INVALID_ARGUMENT)
    def token_estimate(self, turn: TurnId, tokens: int) -> TurnProgress | Rejected:
        s = self._generating(turn)
        if isinstance(s, Rejected):
            return s
        tokens = i.integer(tokens, "token estimate")
        return self._to(evolve(s, token_estimate=max(0, tokens)))

    @refusing(R.INVALID_ARGUMENT)
    def stream_ended(self, turn: TurnId, stop: StopReason) -> StreamEnded | Rejected:
        """Commit the streamed reply. While cancelling this is refused: nothing commits."""
        s = self._generating(turn)
        if isinstance(s, Rejected):
            return s
        stop = i.member(StopReason, stop, "stop reason")
        nxt: TurnStage
        if s.pending_tool_calls:
            calls = s.pending_tool_calls
            nxt, step = ExecutingTools(turn, calls, (None,) * len(calls)), NextStep.RUN_TOOLS
        elif stop is StopReason.MAX_TOKENS:
            nxt, step = Generating(turn, continuation=True), NextStep.CONTINUE
        else:
            nxt, step = Idle(), NextStep.DONE
        return StreamEnded(
            self._to(nxt), s.text, s.reasoning, s.pending_tool_calls, s.continuation, step
        )

    @refusing(R.INVALID_ARGUMENT)
    def fail(self, turn: TurnId) -> TurnProgress | Rejected:
        """The provider call or compaction failed: back to ``Idle``, nothing committed.

        Refused (``invalid_state``) while tools execute: use :meth:`cancel`, which gives
        every call a result.
        """
        bad = self._check(turn, Generating, Compacting)
        return bad or self._to(Idle())

    # --- tools ---

    @refusing(R.INVALID_ARGUMENT)
    def tool_result(
        self, turn: TurnId, call_id: str, outcome: ToolOutcome
    ) -> ToolResultAccepted | Rejected:
        """Fill one slot. Unknown call: ``unknown_call``; filled slot: ``duplicate_result``."""
        bad = self._check(turn, ExecutingTools, Cancelling)
        if bad:
            return bad
        call_id = i.text(call_id, "call id")
        outcome = read_outcome(outcome, "outcome")
        state = self.stage
        if isinstance(state, Cancelling):
            if any(c.id == call_id for c in state.calls):
                return Rejected(R.DUPLICATE_RESULT, f"{i.describe(call_id)} already has a result")
            return Rejected(R.UNKNOWN_CALL, f"no tool call {i.describe(call_id)} in turn {turn}")
        assert isinstance(state, ExecutingTools)
        for index, call in enumerate(state.calls):
            if call.id != call_id:
                continue
            if state.outcomes[index] is not None:
                return Rejected(R.DUPLICATE_RESULT, f"{i.describe(call_id)} already has a result")
            outcomes = (*state.outcomes[:index], outcome, *state.outcomes[index + 1 :])
            if any(o is None for o in outcomes):
                return ToolResultAccepted(self._to(evolve(state, outcomes=outcomes)), None)
            done = tuple(CallOutcome(c, o) for c, o in zip(state.calls, outcomes, strict=True) if o)
            return ToolResultAccepted(self._to(Generating(turn)), done)
        return Rejected(R.UNKNOWN_CALL, f"no tool call {i.describe(call_id)} in turn {turn}")

    # --- compaction ---

    @refusing(R.INVALID_ARGUMENT)
    def compact(self, turn: TurnId, trigger: CompactionTrigger) -> TurnProgress | Rejected:
        """Compact before (re)sending. The continuation flag survives; a
        ``truncation_recovery`` compaction always resumes as a continuation."""
        s = self._generating(turn)
        if isinstance(s, Rejected):
            return s
        trigger = i.member(CompactionTrigger, trigger, "compaction trigger")
        if trigger is CompactionTrigger.MANUAL:
            return Rejected(R.INVALID_STATE, "manual compaction happens between turns")
        resume = s.continuation or trigger is CompactionTrigger.TRUNCATION_RECOVERY
        return self._to(Compacting(turn, trigger, resume))

    @refusing(R.INVALID_ARGUMENT)
    def compaction_finished(self, turn: TurnId) -> TurnProgress | Rejected:
        bad = self._check(turn, Compacting)
        if bad:
            return bad
        s = self.stage
        assert isinstance(s, Compacting)
        if s.trigger is CompactionTrigger.MANUAL:
            return self._to(Idle())
        return self._to(Generating(turn, continuation=s.resume_continuation))

    # --- cancellation ---

    @refusing(R.INVALID_ARGUMENT)
    def cancel(self, turn: TurnId, now: float) -> TurnProgress | Rejected:
        """Stop the turn: every empty slot gets ``cancelled``; wait for confirmation.

        Uncommitted stream content (partial text, tool calls of an unfinished stream)
        is discarded: it never reached the history, so no call lacks a result.
        """
        bad = self._check(turn, Generating, ExecutingTools, Compacting)
        if bad:
            return bad
        try:
            since = i.number(now, "cancel time")
        except i.TurnInputError as exc:
            # ``since`` is persisted: a NaN or infinite time would not survive JSON.
            return Rejected(R.INVALID_STATE, str(exc))
        s = self.stage
        if isinstance(s, ExecutingTools):
            filled = tuple(o if o is not None else ToolOutcome.cancelled() for o in s.outcomes)
            return self._to(Cancelling(turn, since, s.calls, filled))
        return self._to(Cancelling(turn, since))

    @refusing(R.INVALID_ARGUMENT)
    def confirm_stopped(self, turn: TurnId) -> TurnProgress | Rejected:
        """The runner confirms the cancelled turn's work has stopped: back to ``Idle``."""
        bad = self._check(turn, Cancelling)
        return bad or self._to(Idle())

    def _to(self, stage: TurnStage) -> TurnProgress:
        return evolve(self, stage=stage)

    # --- JSON ---

    def to_json(self) -> dict[str, JsonValue]:
        return progress_json.progress_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> TurnProgress | Rejected:
        decoded = j.decode(data, _decode)
        return decoded if isinstance(decoded, Rejected) else decoded.validate()

    def validate(self) -> TurnProgress | Rejected:
        bad = _invalid(self)
        return Rejected(R.INVALID_RESTORE, bad) if bad else self


def _invalid(m: TurnProgress) -> str:
    s = m.stage
    if m.last_turn_id < 0:
        return "negative last turn id"
    if isinstance(s, Idle):
        return ""
    if not 1 <= s.turn_id <= m.last_turn_id:
        return f"turn id {s.turn_id} was never handed out (last {m.last_turn_id})"
    if isinstance(s, Generating):
        ids = [c.id for c in s.pending_tool_calls]
        if s.token_estimate < 0 or "" in ids or len(set(ids)) != len(ids):
            return "bad generating state"
    if isinstance(s, ExecutingTools | Cancelling):
        ids = [c.id for c in s.calls]
        if "" in ids or len(set(ids)) != len(ids) or len(s.outcomes) != len(s.calls):
            return f"bad tool slots in {s.kind}"
    if isinstance(s, ExecutingTools) and (not s.calls or all(o is not None for o in s.outcomes)):
        return "executing tools with no empty slot"
    if (
        isinstance(s, Compacting)
        and s.trigger is CompactionTrigger.MANUAL
        and s.resume_continuation
    ):
        return "a manual compaction has no continuation to resume"
    return ""


# --- JSON: the codec builds values with these classes (it does not import this module) ---

_CLASSES = progress_json.ProgressClasses(
    TurnProgress=TurnProgress,
    Idle=Idle,
    Generating=Generating,
    ExecutingTools=ExecutingTools,
    Compacting=Compacting,
    Cancelling=Cancelling,
    SubPhase=SubPhase,
    CompactionTrigger=CompactionTrigger,
)


def _decode(data: object) -> TurnProgress:
    return progress_json.decode_progress(data, _CLASSES)
