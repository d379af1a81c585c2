"""Part 1 - turn execution: mode, runtime phase, prompt queues, approvals, trust, edits.

This is the user-facing control state of one session: can a prompt be sent now or must
it queue, which tool is running, is the user being asked to approve something, which
tools are trusted and for how long. It is a single immutable value, :class:`TurnExecution`;
every operation returns a new value (or a result wrapping one) or a :class:`Rejected`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, ClassVar, Literal

from phaseflow.turn import execution_json
from phaseflow.turn import inputs as i
from phaseflow.turn import jsonio as j
from phaseflow.turn.inputs import evolve
from phaseflow.turn.jsonio import JsonValue
from phaseflow.turn.messages import (
    Content,
    ToolCall,
    freeze_content,
    read_content,
)
from phaseflow.turn.rejections import Rejected, RejectionReason, refusing

__all__ = [
    "DEFAULT_SHELL_TOOLS",
    "ActiveTool",
    "Activity",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalResolved",
    "Completion",
    "CompletionFinished",
    "EditRange",
    "ExecStatus",
    "Mode",
    "PendingAutoApproval",
    "PromptAdmitted",
    "PromptKind",
    "Queued",
    "RunActive",
    "RunFailed",
    "RunIdle",
    "RunPhase",
    "SendNext",
    "SendNow",
    "Starting",
    "Thinking",
    "ToolExecution",
    "ToolStarted",
    "TrustEntry",
    "TrustKey",
    "TrustKeyKind",
    "TrustScope",
    "TurnExecution",
    "trust_key",
]

R = RejectionReason

DEFAULT_SHELL_TOOLS: tuple[str, ...] = ("bash", "exec", "shell")
"""Tools whose trust is keyed by their ``command`` argument rather than an argument hash."""


class Mode(StrEnum):
    EXEC = "exec"
    PLAN = "plan"


class PromptKind(StrEnum):
    STEERING = "steering"
    FOLLOW_UP = "follow_up"


class TrustScope(StrEnum):
    SESSION = "session"
    TURN = "turn"


class ApprovalDecision(StrEnum):
    APPROVE = "approve"
    APPROVE_SESSION = "approve_session"
    APPROVE_TURN = "approve_turn"
    REJECT = "reject"


class ExecStatus(StrEnum):
    """The public one-word summary a UI shows."""

    PLAN = "plan"
    IDLE = "idle"
    THINKING = "thinking"
    TOOL_EXECUTING = "tool_executing"
    ERROR = "error"


# --- activities and phases ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveTool:
    call_id: str
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "call_id", i.text(self.call_id, "active tool call id"))
        object.__setattr__(self, "name", i.text(self.name, "active tool name"))


@dataclass(frozen=True, slots=True)
class Starting:
    kind: ClassVar[Literal["starting"]] = "starting"


@dataclass(frozen=True, slots=True)
class Thinking:
    kind: ClassVar[Literal["thinking"]] = "thinking"


@dataclass(frozen=True, slots=True)
class Completion:
    kind: ClassVar[Literal["completion"]] = "completion"


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """Tools running now, in start order; never empty (the last one out ends it)."""

    active_tools: tuple[ActiveTool, ...]
    kind: ClassVar[Literal["tool_execution"]] = "tool_execution"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "active_tools", i.sequence(self.active_tools, "active tools", _read_active)
        )


Activity = Starting | Thinking | Completion | ToolExecution
_ACTIVITIES = (Starting, Thinking, Completion, ToolExecution)


def _read_active(value: object, what: str) -> ActiveTool:
    return i.exactly(value, (ActiveTool,), what)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A question put to the user: may this tool call run?"""

    call: ToolCall
    reason: str = ""

    def __post_init__(self) -> None:
        i.exactly(self.call, (ToolCall,), "approval call")
        object.__setattr__(self, "reason", i.text(self.reason, "approval reason"))

    @property
    def call_id(self) -> str:
        return self.call.id


@dataclass(frozen=True, slots=True)
class RunIdle:
    kind: ClassVar[Literal["idle"]] = "idle"


@dataclass(frozen=True, slots=True)
class RunActive:
    activity: Activity
    pending_approval: ApprovalRequest | None = None
    error: str | None = None
    kind: ClassVar[Literal["active"]] = "active"

    def __post_init__(self) -> None:
        i.exactly(self.activity, _ACTIVITIES, "activity")
        if self.pending_approval is not None:
            i.exactly(self.pending_approval, (ApprovalRequest,), "pending approval")
        object.__setattr__(self, "error", i.opt_text(self.error, "error"))


@dataclass(frozen=True, slots=True)
class RunFailed:
    message: str
    kind: ClassVar[Literal["failure"]] = "failure"

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", i.text(self.message, "failure message"))


RunPhase = RunIdle | RunActive | RunFailed
_PHASES = (RunIdle, RunActive, RunFailed)


# --- trust ---------------------------------------------------------------------------


class TrustKeyKind(StrEnum):
    NAME = "name"
    COMMAND = "command"
    ARGUMENTS = "arguments"


@dataclass(frozen=True, slots=True, order=True)
class TrustKey:
    """What a trust decision covers: a tool, a shell command, or one exact argument set.

    Structured (not a joined string) so a tool named like ``"bash:rm"`` can never collide
    with the shell command ``rm`` of ``bash``.
    """

    tool: str
    kind: TrustKeyKind = TrustKeyKind.NAME
    detail: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool", i.text(self.tool, "trust key tool"))
        object.__setattr__(self, "kind", i.member(TrustKeyKind, self.kind, "trust key kind"))
        object.__setattr__(self, "detail", i.text(self.detail, "trust key detail"))
        if (self.kind is TrustKeyKind.NAME) != (self.detail == ""):
            raise i.TurnInputError("a name trust key has no detail; the other kinds need one")

    def to_json(self) -> dict[str, JsonValue]:
        return j.fields_to_json(self)


def trust_key(call: ToolCall, shell_tools: Iterable[str] = DEFAULT_SHELL_TOOLS) -> TrustKey:
    """The trust key of a call: exactly what the human saw when approving it, no more.

    A shell-like tool with a non-empty string ``command``: name + the *whole* canonical
    arguments, readable (the command with its working directory, environment and every
    other argument: ``ls`` in ``/repo`` is not ``ls`` in ``/``). Anything else, a shell
    call without a command included: name + SHA-256 of the canonical arguments, so
    approving one argument set never approves another. An approval never yields a bare
    name key (that would trust every call of the tool); only a host sets one.
    """
    i.exactly(call, (ToolCall,), "trust key call")
    if isinstance(shell_tools, set | frozenset):
        shell_tools = tuple(shell_tools)
    return _trust_key(call, i.sequence(shell_tools, "shell tools", i.text))


def _trust_key(call: ToolCall, shell_tools: tuple[str, ...]) -> TrustKey:
    if call.name in shell_tools:
        args: Any = call.argument_value()
        command = args.get("command") if isinstance(args, dict) else None
        if isinstance(command, str) and command:
            return TrustKey(call.name, TrustKeyKind.COMMAND, call.arguments)
    return TrustKey(call.name, TrustKeyKind.ARGUMENTS, j.sha256_hex(call.arguments))


@dataclass(frozen=True, slots=True)
class TrustEntry:
    key: TrustKey
    scope: TrustScope

    def __post_init__(self) -> None:
        i.exactly(self.key, (TrustKey,), "trust entry key")
        object.__setattr__(self, "scope", i.member(TrustScope, self.scope, "trust scope"))


@dataclass(frozen=True, slots=True)
class PendingAutoApproval:
    call_id: str
    scope: TrustScope

    def __post_init__(self) -> None:
        object.__setattr__(self, "call_id", i.text(self.call_id, "auto-approval call id"))
        object.__setattr__(self, "scope", i.member(TrustScope, self.scope, "auto-approval scope"))


@dataclass(frozen=True, slots=True)
class EditRange:
    """A tool may edit ``path`` only within lines ``start..end`` (1-based, inclusive)."""

    path: str
    start: int
    end: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", i.text(self.path, "edit range path"))
        object.__setattr__(self, "start", i.integer(self.start, "edit range start"))
        object.__setattr__(self, "end", i.integer(self.end, "edit range end"))


def _absolute(path: str) -> bool:
    if not path or "\x00" in path:
        return False
    return PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()


# --- results of operations that say more than "the next value" ------------------------


@dataclass(frozen=True, slots=True)
class SendNow:
    """Start a provider call with this prompt now."""

    content: Content


@dataclass(frozen=True, slots=True)
class Queued:
    """The prompt waits in the ``kind`` queue at ``position`` (0-based)."""

    kind: PromptKind
    position: int


@dataclass(frozen=True, slots=True)
class PromptAdmitted:
    """``action``: send it now, wait in a queue, or (prompts were still queued from an
    aborted turn) send everything queued, this prompt included, in queue order."""

    execution: TurnExecution
    action: SendNow | Queued | SendNext


@dataclass(frozen=True, slots=True)
class ToolStarted:
    execution: TurnExecution
    auto_approval: TrustScope | None
    """The pending auto-approval this start consumed, if any."""


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    execution: TurnExecution
    approval: ApprovalRequest
    decision: ApprovalDecision

    @property
    def approved(self) -> bool:
        return self.decision is not ApprovalDecision.REJECT


@dataclass(frozen=True, slots=True)
class SendNext:
    """Everything that was queued, steering first, each in order: the next prompt."""

    contents: tuple[Content, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "contents", i.sequence(self.contents, "contents", read_content))


@dataclass(frozen=True, slots=True)
class CompletionFinished:
    execution: TurnExecution
    next: SendNext | None
    """``None``: nothing was queued and the session is idle."""


# --- the value -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnExecution:
    """The control state of one session. See ``docs/turn-core.md`` for each operation."""

    mode: Mode = Mode.EXEC
    phase: RunPhase = field(default_factory=RunIdle)
    steering: tuple[Content, ...] = ()
    follow_up: tuple[Content, ...] = ()
    trust: tuple[TrustEntry, ...] = ()
    auto_approvals: tuple[PendingAutoApproval, ...] = ()
    edit_ranges: tuple[EditRange, ...] = ()
    shell_tools: tuple[str, ...] = DEFAULT_SHELL_TOOLS

    def __post_init__(self) -> None:
        # Read every field once, here; the operations below copy the value with
        # ``evolve``, which does not re-check (each field they set was read already).
        setf = object.__setattr__
        setf(self, "mode", i.member(Mode, self.mode, "mode"))
        i.exactly(self.phase, _PHASES, "phase")
        setf(self, "steering", i.sequence(self.steering, "steering queue", read_content))
        setf(self, "follow_up", i.sequence(self.follow_up, "follow-up queue", read_content))
        setf(self, "trust", i.sequence(self.trust, "trust", _read_entry))
        setf(self, "auto_approvals", i.sequence(self.auto_approvals, "auto-approvals", _read_auto))
        setf(self, "edit_ranges", i.sequence(self.edit_ranges, "edit ranges", _read_range))
        setf(self, "shell_tools", i.sequence(self.shell_tools, "shell tools", i.text))

    # --- queries ---

    @property
    def active(self) -> bool:
        return type(self.phase) is RunActive

    @property
    def pending_approval(self) -> ApprovalRequest | None:
        return self.phase.pending_approval if isinstance(self.phase, RunActive) else None

    @property
    def active_tools(self) -> tuple[ActiveTool, ...]:
        phase = self.phase
        if isinstance(phase, RunActive) and isinstance(phase.activity, ToolExecution):
            return phase.activity.active_tools
        return ()

    @property
    def reclaimable(self) -> bool:
        """No turn, no pending auto-approval, nothing queued: a host may drop the session."""
        return (
            not self.active and not self.auto_approvals and not self.steering and not self.follow_up
        )

    @property
    def status(self) -> ExecStatus:
        phase = self.phase
        if self.mode is Mode.PLAN:
            return ExecStatus.PLAN
        if isinstance(phase, RunFailed) or (
            isinstance(phase, RunActive) and phase.error is not None
        ):
            return ExecStatus.ERROR
        if isinstance(phase, RunIdle):
            return ExecStatus.IDLE
        if isinstance(phase.activity, ToolExecution):
            return ExecStatus.TOOL_EXECUTING
        return ExecStatus.THINKING

    def trust_key(self, call: ToolCall) -> TrustKey:
        """The key approving ``call`` would store (see :func:`trust_key`)."""
        i.exactly(call, (ToolCall,), "call")
        return _trust_key(call, self.shell_tools)

    def trusted_scope(self, call: ToolCall) -> TrustScope | None:
        """The trust covering ``call``: its specific key first, then a bare tool-name key
        (which only a host sets; an approval never stores one)."""
        specific = self.trust_key(call)
        bare = TrustKey(call.name)
        for wanted in (specific, bare):
            for entry in self.trust:
                if entry.key == wanted:
                    return entry.scope
        return None

    def edit_range(self, path: str) -> EditRange | None:
        path = i.text(path, "path")
        for edit_range in self.edit_ranges:
            if edit_range.path == path:
                return edit_range
        return None

    def may_edit(self, path: str, start: int, end: int) -> bool:
        """Whether lines ``start..end`` of ``path`` may be edited (no range: yes)."""
        start, end = i.integer(start, "start"), i.integer(end, "end")
        edit_range = self.edit_range(path)
        if edit_range is None:
            return True
        return edit_range.start <= start <= end <= edit_range.end

    # --- prompts and the turn ---

    def admit_prompt(self, kind: PromptKind, content: Content) -> PromptAdmitted:
        """Inactive: begin a turn with ``content`` (send now). Active: queue it (FIFO).

        Queue order holds across an abort: when prompts are still queued (a turn was
        aborted), the new one joins its queue and everything queued goes out now, as
        ``finish_completion`` would send it (steering first, each in order).
        Never refused; ``kind`` or ``content`` of the wrong type raise ``TurnInputError``.
        """
        kind = i.member(PromptKind, kind, "prompt kind")
        content = freeze_content(content, "prompt content")
        if self.active:
            if kind is PromptKind.STEERING:
                queued = evolve(self, steering=(*self.steering, content))
                return PromptAdmitted(queued, Queued(kind, len(self.steering)))
            queued = evolve(self, follow_up=(*self.follow_up, content))
            return PromptAdmitted(queued, Queued(kind, len(self.follow_up)))
        if not self.steering and not self.follow_up:
            return PromptAdmitted(evolve(self, phase=_STARTING), SendNow(content))
        steering, follow_up = self.steering, self.follow_up
        if kind is PromptKind.STEERING:
            steering = (*steering, content)
        else:
            follow_up = (*follow_up, content)
        started = evolve(self, phase=_STARTING, steering=(), follow_up=())
        return PromptAdmitted(started, SendNext((*steering, *follow_up)))

    def begin_turn(self) -> TurnExecution | Rejected:
        if self.active:
            return Rejected(R.TURN_ACTIVE, "a turn is already active")
        return evolve(self, phase=_STARTING)

    def provider_started(self) -> TurnExecution | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if not isinstance(phase.activity, Starting):
            return Rejected(R.INVALID_PHASE, f"activity is {phase.activity.kind}, not starting")
        if phase.pending_approval is not None:
            return Rejected(R.APPROVAL_PENDING, "an approval is pending")
        return evolve(self, phase=_THINKING)

    @refusing(R.INVALID_ARGUMENT)
    def tool_started(self, call_id: str, name: str) -> ToolStarted | Rejected:
        call_id, name = i.text(call_id, "call id"), i.text(name, "tool name")
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        running = self.active_tools
        if any(t.call_id == call_id for t in running):
            return Rejected(
                R.TOOL_ALREADY_ACTIVE, f"tool call {i.describe(call_id)} is already active"
            )
        scope: TrustScope | None = None
        remaining: list[PendingAutoApproval] = []
        for pending in self.auto_approvals:
            if pending.call_id == call_id:
                scope = pending.scope
            else:
                remaining.append(pending)
        activity = ToolExecution((*running, ActiveTool(call_id, name)))
        nxt = evolve(
            self,
            phase=RunActive(activity, phase.pending_approval, None),
            auto_approvals=tuple(remaining),
        )
        return ToolStarted(nxt, scope)

    @refusing(R.INVALID_ARGUMENT)
    def tool_completed(self, call_id: str) -> TurnExecution | Rejected:
        call_id = i.text(call_id, "call id")
        phase = self.phase
        running = self.active_tools
        if not isinstance(phase, RunActive) or not any(t.call_id == call_id for t in running):
            return Rejected(R.TOOL_NOT_ACTIVE, f"tool call {i.describe(call_id)} is not active")
        rest = tuple(t for t in running if t.call_id != call_id)
        activity: Activity = ToolExecution(rest) if rest else _COMPLETION
        return evolve(self, phase=RunActive(activity, phase.pending_approval, phase.error))

    # --- approvals and trust ---

    @refusing(R.INVALID_ARGUMENT)
    def request_approval(self, approval: ApprovalRequest) -> TurnExecution | Rejected:
        i.exactly(approval, (ApprovalRequest,), "approval")
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if phase.pending_approval is not None:
            pending = i.describe(phase.pending_approval.call_id)
            return Rejected(R.APPROVAL_PENDING, f"approval for {pending} is pending")
        return evolve(self, phase=RunActive(phase.activity, approval, phase.error))

    @refusing(R.INVALID_ARGUMENT)
    def resolve_approval(
        self, call_id: str | None, decision: ApprovalDecision
    ) -> ApprovalResolved | Rejected:
        # A plain string is read as its enum value; anything else is refused, never
        # silently read as "approve".
        call_id = i.opt_text(call_id, "call id")
        decision = i.member(ApprovalDecision, decision, "decision")
        phase = self.phase
        if not isinstance(phase, RunActive) or phase.pending_approval is None:
            return Rejected(R.NO_PENDING_APPROVAL, "no approval is pending")
        approval = phase.pending_approval
        if call_id is not None and call_id != approval.call_id:
            return Rejected(
                R.APPROVAL_NOT_FOUND,
                f"pending approval is {i.describe(approval.call_id)}, not {i.describe(call_id)}",
            )
        trust = self.trust
        if decision is ApprovalDecision.APPROVE_SESSION:
            trust = _with_trust(trust, self.trust_key(approval.call), TrustScope.SESSION)
        elif decision is ApprovalDecision.APPROVE_TURN:
            trust = _with_trust(trust, self.trust_key(approval.call), TrustScope.TURN)
        nxt = evolve(self, phase=RunActive(phase.activity, None, phase.error), trust=trust)
        return ApprovalResolved(nxt, approval, decision)

    @refusing(R.INVALID_ARGUMENT)
    def auto_approve(self, call: ToolCall, scope: TrustScope) -> TurnExecution | Rejected:
        i.exactly(call, (ToolCall,), "call")
        scope = i.member(TrustScope, scope, "scope")
        if not self.active:
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        rest = tuple(p for p in self.auto_approvals if p.call_id != call.id)
        return evolve(self, auto_approvals=(*rest, PendingAutoApproval(call.id, scope)))

    def put_trust(self, key: TrustKey, scope: TrustScope) -> TurnExecution | Rejected:
        """Trust ``key`` for the ``scope`` (a host's grant: a bare name key trusts every
        call of the tool). Turn trust only while a turn is active."""
        i.exactly(key, (TrustKey,), "trust key")
        scope = i.member(TrustScope, scope, "scope")
        if scope is TrustScope.TURN and not self.active:
            return Rejected(R.NOT_ACTIVE, "turn trust needs an active turn")
        rest = tuple(e for e in self.trust if e.key != key)
        return evolve(self, trust=(*rest, TrustEntry(key, scope)))

    def revoke(self, tool: str) -> TurnExecution:
        """Every trust of ``tool`` taken back (its name key and every argument key);
        the next call of it asks a human again when its tool needs approval."""
        tool = i.text(tool, "tool")
        return evolve(self, trust=tuple(e for e in self.trust if e.key.tool != tool))

    @property
    def trust_levels(self) -> tuple[TrustEntry, ...]:
        """What is trusted now, ordered by tool and key (a stable listing for hosts)."""
        return tuple(sorted(self.trust, key=lambda e: e.key))

    # --- ending the turn ---

    def begin_completion(self) -> TurnExecution | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if isinstance(phase.activity, ToolExecution):
            return Rejected(R.INVALID_PHASE, "tools are still executing")
        if phase.pending_approval is not None:
            return Rejected(R.APPROVAL_PENDING, "an approval is pending")
        return evolve(self, phase=RunActive(_COMPLETION, None, phase.error))

    def finish_completion(self) -> CompletionFinished | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if not isinstance(phase.activity, Completion):
            return Rejected(R.INVALID_PHASE, f"activity is {phase.activity.kind}, not completion")
        if phase.pending_approval is not None:
            return Rejected(R.APPROVAL_PENDING, "an approval is pending")
        queued = (*self.steering, *self.follow_up)
        trust = _session_trust(self.trust)
        if not queued:
            idle = evolve(self, phase=_IDLE, trust=trust, auto_approvals=())
            return CompletionFinished(idle, None)
        nxt = evolve(
            self, phase=_STARTING, trust=trust, auto_approvals=(), steering=(), follow_up=()
        )
        return CompletionFinished(nxt, SendNext(queued))

    def abort(self) -> TurnExecution:
        """Back to idle; turn trust and auto-approvals dropped, queues kept."""
        return evolve(self, phase=_IDLE, trust=_session_trust(self.trust), auto_approvals=())

    def fail(self, message: str) -> TurnExecution:
        """Into failure; the same drops as :meth:`abort`. Never refused (a message that is
        not a string raises ``TurnInputError``)."""
        failed = RunFailed(message)
        return evolve(self, phase=failed, trust=_session_trust(self.trust), auto_approvals=())

    def report_error(self, message: str) -> TurnExecution:
        """During a turn: keep the work, record the error. Otherwise: like ``fail``."""
        phase = self.phase
        if isinstance(phase, RunActive):
            error = i.text(message, "error message")
            return evolve(self, phase=RunActive(phase.activity, phase.pending_approval, error))
        return self.fail(message)

    def recover(self) -> TurnExecution | Rejected:
        if not isinstance(self.phase, RunFailed):
            return Rejected(R.INVALID_PHASE, f"phase is {self.phase.kind}, not failure")
        return evolve(self, phase=_IDLE)

    # --- mode ---

    def enter_plan(self) -> TurnExecution:
        """Plan mode; a pending approval is dropped (no tool runs in plan mode)."""
        phase = self.phase
        if isinstance(phase, RunActive):
            phase = RunActive(phase.activity, None, phase.error)
        return evolve(self, mode=Mode.PLAN, phase=phase)

    def enter_exec(self) -> TurnExecution:
        return evolve(self, mode=Mode.EXEC)

    # --- edit ranges ---

    @refusing(R.INVALID_EDIT_RANGE)
    def set_edit_range(self, path: str, start: int, end: int) -> TurnExecution | Rejected:
        path = i.text(path, "path")
        start, end = i.integer(start, "start"), i.integer(end, "end")
        if not _absolute(path):
            return Rejected(R.INVALID_EDIT_RANGE, f"not an absolute path: {i.describe(path)}")
        if not 1 <= start <= end:
            return Rejected(R.INVALID_EDIT_RANGE, f"bad line range {start}..{end}")
        rest = tuple(b for b in self.edit_ranges if b.path != path)
        return evolve(self, edit_ranges=(*rest, EditRange(path, start, end)))

    def clear_edit_range(self, path: str) -> TurnExecution:
        path = i.text(path, "path")
        return evolve(self, edit_ranges=tuple(b for b in self.edit_ranges if b.path != path))

    # --- JSON ---

    def to_json(self) -> dict[str, JsonValue]:
        return execution_json.execution_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> TurnExecution | Rejected:
        decoded = j.decode(data, _decode)
        return decoded if isinstance(decoded, Rejected) else decoded.validate()

    def validate(self) -> TurnExecution | Rejected:
        """Check the invariants an operation sequence always keeps (for restored values)."""
        bad = _invalid(self)
        return Rejected(R.INVALID_RESTORE, bad) if bad else self


_IDLE = RunIdle()
_STARTING = RunActive(Starting())
_THINKING = RunActive(Thinking())
_COMPLETION = Completion()


def _read_entry(value: object, what: str) -> TrustEntry:
    return i.exactly(value, (TrustEntry,), what)  # type: ignore[no-any-return]


def _read_auto(value: object, what: str) -> PendingAutoApproval:
    return i.exactly(value, (PendingAutoApproval,), what)  # type: ignore[no-any-return]


def _read_range(value: object, what: str) -> EditRange:
    return i.exactly(value, (EditRange,), what)  # type: ignore[no-any-return]


def _with_trust(
    trust: tuple[TrustEntry, ...], key: TrustKey, scope: TrustScope
) -> tuple[TrustEntry, ...]:
    for entry in trust:
        if entry.key == key and entry.scope is TrustScope.SESSION:
            return trust  # never narrow a session decision to the turn
    rest = tuple(e for e in trust if e.key != key)
    return (*rest, TrustEntry(key, scope))


def _session_trust(trust: tuple[TrustEntry, ...]) -> tuple[TrustEntry, ...]:
    return tuple(e for e in trust if e.scope is TrustScope.SESSION)


def _invalid(value: TurnExecution) -> str:
    phase = value.phase
    if isinstance(phase, RunActive) and isinstance(phase.activity, ToolExecution):
        ids = [t.call_id for t in phase.activity.active_tools]
        if not ids:
            return "tool execution with no active tools"
        if len(set(ids)) != len(ids):
            return "a tool call is active twice"
    keys = [e.key for e in value.trust]
    if len(set(keys)) != len(keys):
        return "duplicate trust key"
    if value.auto_approvals and not isinstance(phase, RunActive):
        return "pending auto-approvals outside a turn"
    calls = [p.call_id for p in value.auto_approvals]
    if len(set(calls)) != len(calls):
        return "duplicate pending auto-approval"
    if not isinstance(phase, RunActive) and any(e.scope is TrustScope.TURN for e in value.trust):
        return "turn-scoped trust outside a turn"
    paths = [b.path for b in value.edit_ranges]
    if len(set(paths)) != len(paths):
        return "duplicate edit range"
    for b in value.edit_ranges:
        if not _absolute(b.path) or not 1 <= b.start <= b.end:
            return f"bad edit range for {b.path!r}"
    return ""


# --- JSON: the codec builds values with these classes (it does not import this module) ---

_CLASSES = execution_json.ExecutionClasses(
    TurnExecution=TurnExecution,
    Mode=Mode,
    RunIdle=RunIdle,
    RunActive=RunActive,
    RunFailed=RunFailed,
    Starting=Starting,
    Thinking=Thinking,
    Completion=Completion,
    ToolExecution=ToolExecution,
    ActiveTool=ActiveTool,
    ApprovalRequest=ApprovalRequest,
    TrustKey=TrustKey,
    TrustKeyKind=TrustKeyKind,
    TrustEntry=TrustEntry,
    TrustScope=TrustScope,
    PendingAutoApproval=PendingAutoApproval,
    EditRange=EditRange,
)


def _decode(data: object) -> TurnExecution:
    return execution_json.decode_execution(data, _CLASSES)
