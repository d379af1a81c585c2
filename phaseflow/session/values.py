"""The session core's vocabulary: its values, the inputs it is given and the commands it
returns (the step function itself is :mod:`phaseflow.session.core`).

``Core`` holds the turn core's two values (:class:`TurnExecution`, :class:`Continuation`)
and the session's own (the user turn number, the requests made in this turn, the open
tool group: :class:`Group` of :class:`Planned` calls, each with how it :class:`Ended`;
the ledger keeps each call's admission and outcome, once). :class:`PhaseView` is what the
runner tells the core about the current phase. Inputs are what happened (:class:`Send`,
:class:`Replied`, ...); commands are what the runner must do, in order
(:class:`Persist`, :class:`CallProvider`, ...). All immutable, all plain data: a test
builds and compares them without I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from phaseflow.providers.protocol import ProviderFailure, ProviderReply
from phaseflow.session import events as ev
from phaseflow.spec.model import ReplyShape
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import (
    ApprovalDecision,
    ApprovalRequest,
    Mode,
    PromptKind,
    TurnExecution,
)
from phaseflow.turn.messages import (
    Content,
    History,
    Message,
    ToolCall,
    ToolOutcome,
    UserMessage,
)

Status = Literal["idle", "running", "awaiting_approval", "finished", "failed", "cancelling"]
#: how a call's result is labelled for the host and for conversation tests
ResultLabel = Literal["ok", "error", "refused", "rejected", "cancelled", "ignored", "unknown",
                      "planned"]




# --- what the runner tells the core about the current phase ---------------------------


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """One tool the model is offered now: ``parameters`` is its argument schema,
    ``approval`` whether every call needs a human's yes, ``writes`` the state keys its
    result may write (with their declared types)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    approval: bool = False
    writes: tuple[str, ...] = ()
    #: the catalogue's ``read_only``: the only tools that run in plan mode
    read_only: bool = False
    #: the compiled check of ``parameters`` (compiled once per tool, not per request)
    check: Callable[[Any], str | None] | None = field(default=None, compare=False, repr=False)
    #: the declared state types of the keys in ``writes`` (a key the workflow declares
    #: no type for takes any JSON value)
    write_types: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PhaseView:
    """Where the conversation is, as far as the loop needs to know: built by the runner
    from the machine before every request."""

    phase: str
    terminal: bool = False
    tools: tuple[OfferedTool, ...] = ()
    #: the ``collect`` keys and their declared types (the ``record`` tool's parameters)
    collect: Mapping[str, str] = field(default_factory=dict)
    #: no boundary from this phase can call the host (no ``call`` effect on leaving it,
    #: on entering any phase it moves to, nor in those phases' preparations): the
    #: boundary after a tool group is then committed with the group's results, in one
    #: commit (it runs in microseconds, with nothing outside the process to wait for)
    quiet: bool = False

    def tool(self, name: str) -> OfferedTool | None:
        for t in self.tools:
            if t.name == name:
                return t
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)


@dataclass(frozen=True, slots=True)
class Limits:
    """The loop's settings (per agent)."""

    max_steps: int = 10
    max_retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 30.0
    parallel_tools: bool = True
    #: the most tokens the history of a request may carry before its oldest turns are
    #: compacted into a summary (None: never)
    max_history_tokens: int | None = None
    #: how many times a reply cut at the model's output limit is continued before the
    #: turn ends ``cut`` (0: never continued)
    max_continuations: int = 2
    #: the agent has a compaction provider of its own (what a context-full recovery
    #: without a budget says it compacts with)
    compaction_provider: bool = False


@dataclass(frozen=True, slots=True)
class Compaction:
    """The oldest part of the conversation, folded into a summary that the model sees
    in its place: the first ``upto`` messages of the history (every message stays in the
    history the store keeps: the transcript). ``replies``: the assistant messages among
    them (a scripted model counts replies)."""

    upto: int
    summary: str
    replies: int


# --- the open tool group ---------------------------------------------------------------

CallKind = Literal["run", "move", "approval", "refused", "ignored", "record", "planned"]


@dataclass(frozen=True, slots=True)
class Ended:
    """How a call ended for the session: its label (for the host and conversation tests),
    the state writes it asks and the move it made. Its outcome (what the model reads) is
    the ledger's: the continuation's checkpoint keeps it, with the admission, once."""

    label: ResultLabel
    writes: tuple[tuple[str, Any], ...] = ()
    move: str | None = None


@dataclass(frozen=True, slots=True)
class Planned:
    """One call of a group, its whole life on the session's side: what the loop decided
    when the reply arrived (``kind``, ``note``, a ``record``'s ``writes``), whether a
    human approved it, and how it ended. The exactly-once facts (admitted, the outcome)
    are the continuation's checkpoint's :class:`ToolEffect` for the same call, never
    copied here: the two together are the call's one record."""

    call: ToolCall
    kind: CallKind
    note: str = ""
    writes: tuple[tuple[str, Any], ...] = ()
    approved: bool = False
    ended: Ended | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """A call's result as the runner reports it (the input :class:`ToolDone` carries):
    what the model sees, its label, and the state writes it asks. ``notes``: what the
    host should see beside the result (writes refused, the state a move's preparations
    fetched), committed just before the result's event. The core keeps its outcome in
    the ledger and the rest as the call's :class:`Ended`."""

    outcome: ToolOutcome
    label: ResultLabel
    writes: tuple[tuple[str, Any], ...] = ()
    move: str | None = None
    notes: tuple[ev.Event, ...] = field(default=(), compare=False)
    #: the output captured for the call, ``(reference, bytes)`` (it was cut for the model)
    captured: tuple[str, int] | None = None

    @property
    def ended(self) -> Ended:
        return Ended(self.label, self.writes, self.move)


@dataclass(frozen=True, slots=True)
class Group:
    """The tool group being worked through, one :class:`Planned` per call in the model's
    order; each grows as a human decides and its tool finishes. ``admitted`` says the
    runnable calls were admitted (and persisted) and handed to the runner."""

    checkpoint_id: str
    calls: tuple[Planned, ...]
    admitted: bool = False
    #: the group of a reply cut at the model's output limit: none of its calls runs,
    #: and its boundary ends the turn
    cut: bool = False

    def entry(self, call_id: str) -> Planned | None:
        for p in self.calls:
            if p.call.id == call_id:
                return p
        return None

    def with_entry(self, entry: Planned) -> Group:
        """This group with ``entry`` in place of the call's entry of the same id."""
        cid = entry.call.id
        calls = tuple(entry if p.call.id == cid else p for p in self.calls)
        return Group(self.checkpoint_id, calls, self.admitted, self.cut)

    @property
    def complete(self) -> bool:
        return all(p.ended is not None for p in self.calls)

    def writes(self) -> tuple[tuple[str, str, str, Any], ...]:
        """The state writes the results ask for, ``(call id, tool, key, value)``, in the
        model's call order (whatever order the calls finished in)."""
        out: list[tuple[str, str, str, Any]] = []
        for p in self.calls:
            if p.ended is not None:
                out.extend((p.call.id, p.call.name, k, v) for k, v in p.ended.writes)
        return tuple(out)


# --- the values ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Core:
    """Everything the loop decides from. Immutable; ``step`` returns the next one."""

    session_id: str
    execution: TurnExecution = field(default_factory=TurnExecution)
    continuation: Continuation = field(default_factory=Continuation)
    status: Status = "idle"
    #: user turns so far (guards' ``turn``); 0 before the first message
    turn: int = 0
    #: provider requests made in this turn, and the attempt number of the current one
    step: int = 0
    attempt: int = 0
    group: Group | None = None
    #: the current request's id (``None`` between requests)
    request_id: str | None = None
    #: the request asked in a terminal phase, with no tools: its reply finishes the session
    final_request: bool = False
    reply: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    #: of the input tokens, those the server read from its prompt cache
    cached_input_tokens: int = 0
    #: where the conversation was at the last request or boundary
    view: PhaseView | None = None
    #: events that happened but wait for the next commit (results of a group whose
    #: other calls are still running: a group's results are committed together)
    pending: tuple[ev.Event, ...] = ()
    #: the history the current request was sent with (the very object: a reply extends
    #: it, so what is stored is what was sent, and flattening it stays incremental)
    sent: History | None = None
    #: plan mode's plan: the calls listed (not run) since the session last entered it
    plan: tuple[ToolCall, ...] = ()
    #: steering messages delivered to the current request (a user message after the
    #: last tool results), until the reply that answers them is in the ledger
    steer: Content | None = None
    #: the history's oldest part folded into a summary (history compaction)
    compaction: Compaction | None = None
    #: tokens per character of a request, as the provider's last usage report says
    #: (before one: an estimate of 4 characters a token)
    tokens_per_char: float = 0.25
    #: the fold a compaction request is making now (a message count), until its summary
    folding: int | None = None
    #: a reply cut at the model's output limit, being continued: its text so far (the
    #: parts stitched), its reasoning, and how many model replies that text holds
    cut: str = ""
    cut_reasoning: str = ""
    cut_parts: int = 0
    #: a final reply that did not match the phase's ``reply`` schema, being sent back
    #: once with ``reply_problem`` (see phaseflow.session.structured)
    reply_retry: str = ""
    reply_problem: str = ""
    #: continuations asked since the last reply that was not cut (max_continuations)
    continued: int = 0
    #: the turn's reply was still cut after the last continuation: it ends ``cut``
    cut_off: bool = False
    #: the session's captured tool outputs, ``(reference, bytes)`` in the order they
    #: were made (what ``read_output`` may read, and the session's capture quota counts)
    captures: tuple[tuple[str, int], ...] = ()
    #: the current request was refused as larger than the model's context and the
    #: history compacted for it, to this many tokens: a second refusal fails the turn
    #: (0: no recovery made for this request)
    recovered: int = 0
    #: a timer's turn that has not run its first boundary yet (the timer's transition):
    #: a turn resumed from here takes that boundary before it asks the model
    awaits_first_boundary: bool = False

    @property
    def pending_approval(self) -> ApprovalRequest | None:
        return self.execution.pending_approval

    def history(self) -> History:
        """The history the next request continues (the open group's results included)."""
        c = self.continuation
        if c.checkpoint is not None:
            base = c.checkpoint.resolved_messages()
        elif c.request is not None:
            base = c.request.messages
        else:
            return c.messages
        return base if self.steer is None else base.append(UserMessage(self.steer))


# --- inputs ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """The user sent a message. ``view``: where the conversation is now."""

    content: Content
    view: PhaseView
    kind: PromptKind = PromptKind.FOLLOW_UP
    #: the turn a due timer starts (no user wrote ``content``: the session's note): the
    #: turn boundary runs first, so a timer's transition is taken before the model asks
    timer: bool = False


@dataclass(frozen=True, slots=True)
class SetMode:
    """The host switched the session's mode (``plan`` or ``exec``), between turns."""

    mode: Mode


@dataclass(frozen=True, slots=True)
class Replied:
    """The model's whole reply to ``request_id``. ``view`` is the phase the request was
    built in (what the model was offered); ``flagged`` the positions of calls the host's
    approval policy wants a human to see."""

    request_id: str
    reply: ProviderReply
    view: PhaseView
    flagged: frozenset[int] = frozenset()
    #: the characters the request carried (system text, tools, history), when the agent
    #: compacts its history: with the reply's usage, the tokens a character costs
    sent_chars: int = 0
    #: the phase's structured reply (``reply:``) the request asked for, or None
    shape: ReplyShape | None = None


@dataclass(frozen=True, slots=True)
class LimitEdits:
    """The host limits what tools may change in the file ``path`` to lines
    ``start..end`` (``start`` None: the limit is lifted)."""

    path: str
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class ChangeTrust:
    """The host trusts every call of ``tool`` for the rest of the session (``grant``), or
    takes back every trust of it (approvals included)."""

    tool: str
    grant: bool


@dataclass(frozen=True, slots=True)
class CompactNow:
    """The host asks for a compaction between turns: everything before the last turn
    is folded into a summary (``max_tokens``: the summary's output limit)."""

    max_tokens: int = 1024


@dataclass(frozen=True, slots=True)
class Compacted:
    """The summary a compaction request produced (``summary`` None: it failed, and
    ``problem`` says why)."""

    request_id: str
    summary: str | None
    problem: str = ""


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The request failed. ``jitter`` in [0, 1) spreads retries (drawn by the runner)."""

    request_id: str
    failure: ProviderFailure
    jitter: float = 0.0


@dataclass(frozen=True, slots=True)
class ToolDone:
    """A call the runner ran has finished (or failed, or timed out)."""

    call_id: str
    done: Done
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class BoundaryDone:
    """The runner applied a group's writes and ran the boundary (or the requested move):
    ``events`` is what it did (state and phase changes, effect errors)."""

    view: PhaseView
    events: tuple[ev.Event, ...] = ()
    final: bool = False


@dataclass(frozen=True, slots=True)
class Resolve:
    """A human decided on the pending approval."""

    call_id: str
    decision: ApprovalDecision
    reason: str = ""
    arguments_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """The host cancelled the turn; the runner has stopped the provider stream and every
    running tool. ``done`` are the results of calls that finished before they stopped;
    ``now`` the time (seconds)."""

    now: float
    done: tuple[ToolDone, ...] = ()
    #: an interrupt: the queued messages start the next turn at once (a plain cancel
    #: leaves them queued for the next message)
    restart: bool = False
    #: calls whose sync tool's thread was still running at its deadline: given up on,
    #: their outcome ``unknown``
    given_up: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cancelling:
    """The host cancelled the turn while sync tools' threads still run (nothing can stop
    them): the turn is ``cancelling`` until each has ended or reached its deadline, then
    :class:`Cancel` ends it. ``tools``: their names."""

    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Interrupt:
    """A message that cancels the turn that runs or waits for a human (as ``cancel()``
    does) and starts the next turn, after what was queued before it. Idle: a message."""

    content: Content
    view: PhaseView
    now: float


@dataclass(frozen=True, slots=True)
class Resume:
    """A session whose worker stopped in the middle of a turn is opened again: finish
    the turn from what was committed. ``idempotent``: the tools the workflow declares
    ``idempotent: true`` (an interrupted call of one of them runs again, with the same
    idempotency key)."""

    view: PhaseView
    idempotent: frozenset[str] = frozenset()


Input = (Send | Replied | RequestFailed | ToolDone | BoundaryDone | Resolve | Cancel | Resume
         | SetMode | Interrupt | Compacted | CompactNow | LimitEdits | ChangeTrust | Cancelling)


# --- commands --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Persist:
    """Commit the session's values now, with these events (one transaction). ``writes``:
    state writes to apply first, with no boundary after them (a cancelled turn's
    results); their ``state_changed`` event is committed before ``events``."""

    events: tuple[ev.Event, ...] = ()
    writes: tuple[tuple[str, str, str, Any], ...] = ()  # (call id, tool, key, value)


@dataclass(frozen=True, slots=True)
class CallProvider:
    """Build a request for the current phase and send it; feed back :class:`Replied`
    or :class:`RequestFailed`. ``final``: the last request, in a terminal phase, offers no
    tools."""

    request_id: str
    history: History
    final: bool = False
    #: replies folded into the summary at the start of ``history`` (compaction)
    folded_replies: int = 0
    #: messages of the session's history folded into that summary (``Compaction.upto``:
    #: where a call's start mark falls in ``history``)
    folded: int = 0


@dataclass(frozen=True, slots=True)
class Compact:
    """Ask a model to fold ``messages`` (with the ``previous`` summary) into one summary;
    feed back :class:`Compacted`. The request waiting for it is asked after."""

    request_id: str
    messages: tuple[Message, ...]
    previous: str
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run these admitted calls (their admission is persisted already) and feed back one
    :class:`ToolDone` each. ``sequential``: one by one in this order."""

    calls: tuple[Planned, ...]
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class RunBoundary:
    """Apply ``writes`` (in the model's call order) to the state, then take ``move`` or
    run one turn boundary; feed back :class:`BoundaryDone`. ``final``: the turn's last
    boundary (it counts as a turn in the phase)."""

    writes: tuple[tuple[str, str, str, Any], ...]  # (call id, tool, key, value)
    move: str | None = None
    final: bool = False


@dataclass(frozen=True, slots=True)
class Pause:
    """The turn waits (for a human's decision): the host's stream ends here."""


@dataclass(frozen=True, slots=True)
class TurnOver:
    """The turn ended (completed, cancelled, failed or step limit)."""

    status: str


Command = Persist | CallProvider | Compact | Sleep | RunTools | RunBoundary | Pause | TurnOver


@dataclass(frozen=True, slots=True)
class Step:
    core: Core
    commands: tuple[Command, ...] = ()
