"""The runtime: one :class:`PhaseMachine` per conversation, over a shared compiled workflow.

See ``docs/embedding.md`` for how a host drives it.
"""

from phaseflow.machine.effects import EffectContext
from phaseflow.machine.machine import (
    HISTORY_LIMIT,
    TRACE_LIMIT,
    Clock,
    PhaseMachine,
    ReentrantCallError,
)
from phaseflow.machine.results import (
    MODEL_REQUEST,
    Blocked,
    BoundaryResult,
    ErrorKind,
    ErrorRecord,
    GuardTrigger,
    HistoryRecord,
    ModelTrigger,
    ProgrammaticTrigger,
    Ready,
    TransitionResult,
    TransitionTrigger,
)
from phaseflow.machine.snapshot import SNAPSHOT_VERSION, SnapshotError
from phaseflow.machine.state import State, StateChange, Writer

__all__ = [
    "HISTORY_LIMIT",
    "MODEL_REQUEST",
    "SNAPSHOT_VERSION",
    "TRACE_LIMIT",
    "Blocked",
    "BoundaryResult",
    "Clock",
    "EffectContext",
    "ErrorKind",
    "ErrorRecord",
    "GuardTrigger",
    "HistoryRecord",
    "ModelTrigger",
    "PhaseMachine",
    "ProgrammaticTrigger",
    "Ready",
    "ReentrantCallError",
    "SnapshotError",
    "State",
    "StateChange",
    "TransitionResult",
    "TransitionTrigger",
    "Writer",
]
