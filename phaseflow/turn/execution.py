"""Part 1 - turn execution: mode, runtime phase, prompt queues, approvals, trust, edits.

This is the user-facing control state of one session: can a prompt be sent now or must
it queue, which tool is running, is the user being asked to approve something, which
tools are trusted and for how long. It is a single immutable value, :class:`TurnExecution`;
every operation returns a new value (or a result wrapping one) or a :class:`Rejected`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from phaseflow.turn import jsonio as j
from phaseflow.turn.jsonio import JsonValue
from phaseflow.turn.messages import (
    Content,
    ToolCall,
    freeze,
    freeze_content,
)
from phaseflow.turn.rejections import Rejected, RejectionReason

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


@dataclass(frozen=True, slots=True)
class Starting:
    kind = "starting"


@dataclass(frozen=True, slots=True)
class Thinking:
    kind = "thinking"


@dataclass(frozen=True, slots=True)
class Completion:
    kind = "completion"


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """Tools running now, in start order; never empty (the last one out ends it)."""

    active_tools: tuple[ActiveTool, ...]
    kind = "tool_execution"

    def __post_init__(self) -> None:
        object.__setattr__(self, "active_tools", freeze(self.active_tools))


Activity = Starting | Thinking | Completion | ToolExecution


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A question put to the user: may this tool call run?"""

    call: ToolCall
    reason: str = ""

    @property
    def call_id(self) -> str:
        return self.call.id


@dataclass(frozen=True, slots=True)
class RunIdle:
    kind = "idle"


@dataclass(frozen=True, slots=True)
class RunActive:
    activity: Activity
    pending_approval: ApprovalRequest | None = None
    error: str | None = None
    kind = "active"


@dataclass(frozen=True, slots=True)
class RunFailed:
    message: str
    kind = "failure"


RunPhase = RunIdle | RunActive | RunFailed


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

    def to_json(self) -> dict[str, JsonValue]:
        from phaseflow.turn import execution_json  # the codec depends on these classes

        return execution_json.trust_key_to_json(self)


def trust_key(call: ToolCall, shell_tools: Iterable[str] = DEFAULT_SHELL_TOOLS) -> TrustKey:
    """The specific trust key of a call.

    A shell-like tool with a string ``command`` argument: name + command. A call with no
    arguments: the bare name. Anything else: name + SHA-256 of the canonical arguments,
    so approving one argument set never approves another.
    """
    args: Any = call.argument_value()
    if call.name in shell_tools and isinstance(args, dict):
        command = args.get("command")
        if isinstance(command, str) and command:
            return TrustKey(call.name, TrustKeyKind.COMMAND, command)
    if args == {}:
        return TrustKey(call.name)
    return TrustKey(call.name, TrustKeyKind.ARGUMENTS, j.sha256_hex(call.arguments))


@dataclass(frozen=True, slots=True)
class TrustEntry:
    key: TrustKey
    scope: TrustScope


@dataclass(frozen=True, slots=True)
class PendingAutoApproval:
    call_id: str
    scope: TrustScope


@dataclass(frozen=True, slots=True)
class EditRange:
    """A tool may edit ``path`` only within lines ``start..end`` (1-based, inclusive)."""

    path: str
    start: int
    end: int


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
    execution: TurnExecution
    action: SendNow | Queued


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
        object.__setattr__(self, "contents", tuple(freeze_content(c) for c in self.contents))


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
        # Sequences are stored as tuples whatever the caller passed: no list is ever
        # reachable from a value. Cheap when they already are tuples (the normal case).
        for name in ("trust", "auto_approvals", "edit_ranges", "shell_tools"):
            value = getattr(self, name)
            if type(value) is not tuple:
                object.__setattr__(self, name, tuple(value))
        for name in ("steering", "follow_up"):
            value = getattr(self, name)
            if type(value) is not tuple:
                object.__setattr__(self, name, tuple(freeze_content(c) for c in value))

    # --- queries ---

    @property
    def active(self) -> bool:
        return isinstance(self.phase, RunActive)

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
        return trust_key(call, self.shell_tools)

    def trusted_scope(self, call: ToolCall) -> TrustScope | None:
        """The trust covering ``call``: its specific key first, then its bare tool name."""
        specific = self.trust_key(call)
        bare = TrustKey(call.name)
        for wanted in (specific, bare):
            for entry in self.trust:
                if entry.key == wanted:
                    return entry.scope
        return None

    def edit_range(self, path: str) -> EditRange | None:
        for edit_range in self.edit_ranges:
            if edit_range.path == path:
                return edit_range
        return None

    def may_edit(self, path: str, start: int, end: int) -> bool:
        """Whether lines ``start..end`` of ``path`` may be edited (no range: yes)."""
        edit_range = self.edit_range(path)
        if edit_range is None:
            return True
        return edit_range.start <= start <= end <= edit_range.end

    # --- prompts and the turn ---

    def admit_prompt(self, kind: PromptKind, content: Content) -> PromptAdmitted:
        """Inactive: begin a turn with ``content`` (send now). RunActive: queue it (FIFO)."""
        content = freeze_content(content)
        if not self.active:
            started = replace(self, phase=RunActive(Starting()))
            return PromptAdmitted(started, SendNow(content))
        if PromptKind(kind) is PromptKind.STEERING:
            queued = replace(self, steering=(*self.steering, content))
            return PromptAdmitted(queued, Queued(PromptKind.STEERING, len(self.steering)))
        queued = replace(self, follow_up=(*self.follow_up, content))
        return PromptAdmitted(queued, Queued(PromptKind.FOLLOW_UP, len(self.follow_up)))

    def begin_turn(self) -> TurnExecution | Rejected:
        if self.active:
            return Rejected(R.TURN_ACTIVE, "a turn is already active")
        return replace(self, phase=RunActive(Starting()))

    def provider_started(self) -> TurnExecution | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if not isinstance(phase.activity, Starting):
            return Rejected(R.INVALID_PHASE, f"activity is {phase.activity.kind}, not starting")
        if phase.pending_approval is not None:
            return Rejected(R.APPROVAL_PENDING, "an approval is pending")
        return replace(self, phase=RunActive(Thinking()))

    def tool_started(self, call_id: str, name: str) -> ToolStarted | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        running = self.active_tools
        if any(t.call_id == call_id for t in running):
            return Rejected(R.TOOL_ALREADY_ACTIVE, f"tool call {call_id!r} is already active")
        scope: TrustScope | None = None
        remaining: list[PendingAutoApproval] = []
        for pending in self.auto_approvals:
            if pending.call_id == call_id:
                scope = pending.scope
            else:
                remaining.append(pending)
        activity = ToolExecution((*running, ActiveTool(call_id, name)))
        nxt = replace(
            self,
            phase=RunActive(activity, phase.pending_approval, None),
            auto_approvals=tuple(remaining),
        )
        return ToolStarted(nxt, scope)

    def tool_completed(self, call_id: str) -> TurnExecution | Rejected:
        phase = self.phase
        running = self.active_tools
        if not isinstance(phase, RunActive) or not any(t.call_id == call_id for t in running):
            return Rejected(R.TOOL_NOT_ACTIVE, f"tool call {call_id!r} is not active")
        rest = tuple(t for t in running if t.call_id != call_id)
        activity: Activity = ToolExecution(rest) if rest else Completion()
        return replace(self, phase=RunActive(activity, phase.pending_approval, phase.error))

    # --- approvals and trust ---

    def request_approval(self, approval: ApprovalRequest) -> TurnExecution | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if phase.pending_approval is not None:
            return Rejected(
                R.APPROVAL_PENDING, f"approval for {phase.pending_approval.call_id!r} is pending"
            )
        return replace(self, phase=RunActive(phase.activity, approval, phase.error))

    def resolve_approval(
        self, call_id: str | None, decision: ApprovalDecision
    ) -> ApprovalResolved | Rejected:
        # A plain string is accepted for its enum value; anything else is a programming
        # error (ValueError), never silently read as "approve".
        decision = ApprovalDecision(decision)
        phase = self.phase
        if not isinstance(phase, RunActive) or phase.pending_approval is None:
            return Rejected(R.NO_PENDING_APPROVAL, "no approval is pending")
        approval = phase.pending_approval
        if call_id is not None and call_id != approval.call_id:
            return Rejected(
                R.APPROVAL_NOT_FOUND, f"pending approval is {approval.call_id!r}, not {call_id!r}"
            )
        trust = self.trust
        if decision is ApprovalDecision.APPROVE_SESSION:
            trust = _with_trust(trust, self.trust_key(approval.call), TrustScope.SESSION)
        elif decision is ApprovalDecision.APPROVE_TURN:
            trust = _with_trust(trust, self.trust_key(approval.call), TrustScope.TURN)
        nxt = replace(self, phase=RunActive(phase.activity, None, phase.error), trust=trust)
        return ApprovalResolved(nxt, approval, decision)

    def auto_approve(self, call: ToolCall, scope: TrustScope) -> TurnExecution | Rejected:
        if not self.active:
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        rest = tuple(p for p in self.auto_approvals if p.call_id != call.id)
        return replace(self, auto_approvals=(*rest, PendingAutoApproval(call.id, scope)))

    # --- ending the turn ---

    def begin_completion(self) -> TurnExecution | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if isinstance(phase.activity, ToolExecution):
            return Rejected(R.INVALID_PHASE, "tools are still executing")
        if phase.pending_approval is not None:
            return Rejected(R.APPROVAL_PENDING, "an approval is pending")
        return replace(self, phase=RunActive(Completion(), None, phase.error))

    def finish_completion(self) -> CompletionFinished | Rejected:
        phase = self.phase
        if not isinstance(phase, RunActive):
            return Rejected(R.NOT_ACTIVE, "no turn is active")
        if not isinstance(phase.activity, Completion):
            return Rejected(R.INVALID_PHASE, f"activity is {phase.activity.kind}, not completion")
        if phase.pending_approval is not None:
            return Rejected(R.APPROVAL_PENDING, "an approval is pending")
        queued = (*self.steering, *self.follow_up)
        cleared = replace(
            self,
            trust=_session_trust(self.trust),
            auto_approvals=(),
            steering=(),
            follow_up=(),
        )
        if not queued:
            return CompletionFinished(replace(cleared, phase=RunIdle()), None)
        return CompletionFinished(replace(cleared, phase=RunActive(Starting())), SendNext(queued))

    def abort(self) -> TurnExecution:
        """Back to idle; turn trust and auto-approvals dropped, queues kept."""
        return replace(self, phase=RunIdle(), trust=_session_trust(self.trust), auto_approvals=())

    def fail(self, message: str) -> TurnExecution:
        return replace(
            self, phase=RunFailed(message), trust=_session_trust(self.trust), auto_approvals=()
        )

    def report_error(self, message: str) -> TurnExecution:
        """During a turn: keep the work, record the error. Otherwise: like ``fail``."""
        phase = self.phase
        if isinstance(phase, RunActive):
            return replace(self, phase=RunActive(phase.activity, phase.pending_approval, message))
        return self.fail(message)

    def recover(self) -> TurnExecution | Rejected:
        if not isinstance(self.phase, RunFailed):
            return Rejected(R.INVALID_PHASE, f"phase is {self.phase.kind}, not failure")
        return replace(self, phase=RunIdle())

    # --- mode ---

    def enter_plan(self) -> TurnExecution:
        """Plan mode; a pending approval is dropped (no tool runs in plan mode)."""
        phase = self.phase
        if isinstance(phase, RunActive):
            phase = RunActive(phase.activity, None, phase.error)
        return replace(self, mode=Mode.PLAN, phase=phase)

    def enter_exec(self) -> TurnExecution:
        return replace(self, mode=Mode.EXEC)

    # --- edit ranges ---

    def set_edit_range(self, path: str, start: int, end: int) -> TurnExecution | Rejected:
        if not _absolute(path):
            return Rejected(R.INVALID_EDIT_RANGE, f"not an absolute path: {path!r}")
        if not 1 <= start <= end:
            return Rejected(R.INVALID_EDIT_RANGE, f"bad line range {start}..{end}")
        rest = tuple(b for b in self.edit_ranges if b.path != path)
        return replace(self, edit_ranges=(*rest, EditRange(path, start, end)))

    def clear_edit_range(self, path: str) -> TurnExecution:
        return replace(self, edit_ranges=tuple(b for b in self.edit_ranges if b.path != path))

    # --- JSON ---

    def to_json(self) -> dict[str, JsonValue]:
        from phaseflow.turn import execution_json  # the codec depends on these classes

        return execution_json.execution_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> TurnExecution | Rejected:
        from phaseflow.turn import execution_json  # the codec depends on these classes

        decoded = j.decode(data, execution_json.decode_execution)
        return decoded if isinstance(decoded, Rejected) else decoded.validate()

    def validate(self) -> TurnExecution | Rejected:
        """Check the invariants an operation sequence always keeps (for restored values)."""
        bad = _invalid(self)
        return Rejected(R.INVALID_RESTORE, bad) if bad else self


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
