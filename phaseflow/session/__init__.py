"""The session: one guided conversation - a model, the phase machine, tools, a store.

``Agent`` holds what every conversation shares (the workflow, the provider, the tools,
the store); ``agent.session(id)`` opens one conversation, new or resumed. See
``docs/sessions.md``. Tools (``@tool``, ``ToolContext``, ``ToolResult``) are
:mod:`phaseflow.tools`; the ``Provider`` protocol is :mod:`phaseflow.providers`.
"""

from phaseflow.session.agent import (
    Agent,
    ForkRefused,
    PendingApproval,
    Reply,
    Session,
    SessionBusy,
    SessionError,
    SessionFinished,
    TimersFired,
    Trusted,
    TurnFailed,
)
from phaseflow.session.core import ResolutionRefused
from phaseflow.session.events import (
    ApprovalRequested,
    ApprovalResolvedEvent,
    ErrorEvent,
    Event,
    HistoryCompacted,
    MessageSteered,
    ModeChanged,
    PhaseChanged,
    ReplyContinued,
    Retrying,
    SessionForked,
    StateChanged,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
    TrustChanged,
    TurnCancelling,
    TurnFinished,
    TurnStartedEvent,
    event_from_json,
)
from phaseflow.session.host_inputs import CompactionRefused, EditLimitRefused, ModeRefused

__all__ = [
    "Agent",
    "ApprovalRequested",
    "ApprovalResolvedEvent",
    "CompactionRefused",
    "EditLimitRefused",
    "ErrorEvent",
    "Event",
    "ForkRefused",
    "HistoryCompacted",
    "MessageSteered",
    "ModeChanged",
    "ModeRefused",
    "PendingApproval",
    "PhaseChanged",
    "Reply",
    "ReplyContinued",
    "ResolutionRefused",
    "Retrying",
    "Session",
    "SessionBusy",
    "SessionError",
    "SessionFinished",
    "SessionForked",
    "StateChanged",
    "TextDeltaEvent",
    "TimersFired",
    "ToolCallEvent",
    "ToolResultEvent",
    "TrustChanged",
    "Trusted",
    "TurnCancelling",
    "TurnFailed",
    "TurnFinished",
    "TurnStartedEvent",
    "event_from_json",
]
