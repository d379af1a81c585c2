"""The host's settings between turns, as steps of the pure core: the session's mode,
the edit limits tools read, the trust it grants and takes back, and a compaction the
host asks for. Each is a small decision with one commit; they live apart from the
turn's loop (:mod:`.core`), which dispatches them here.
"""

from __future__ import annotations

from phaseflow.errors import PhaseflowError
from phaseflow.session import events as ev
from phaseflow.session.values import (
    ChangeTrust,
    Compact,
    CompactNow,
    Core,
    LimitEdits,
    Persist,
    SetMode,
    Step,
)
from phaseflow.turn.execution import Mode, TrustKey, TrustScope
from phaseflow.turn.inputs import evolve
from phaseflow.turn.messages import UserMessage
from phaseflow.turn.rejections import Rejected

# --- a compaction the host asks for ----------------------------------------------------------


def host_compaction_id(core: Core) -> str:
    """The id of a compaction the host asked for (its summary's :class:`Compacted`)."""
    return f"{core.session_id}:{core.turn}:compact-now"


def on_compact_now(core: Core, event: CompactNow) -> Step:
    """Fold everything before the last turn now (between turns). Nothing to fold (one
    turn so far, or folded already): nothing happens."""
    if core.status in ("running", "awaiting_approval", "cancelling"):
        raise CompactionRefused(f"session {core.session_id!r}: a compaction asked by the "
                                f"host waits for the turn to end (it is {core.status})")
    history = core.history()
    start = core.compaction.upto if core.compaction is not None else 0
    recent = history.after(start)
    last = max((i for i, m in enumerate(recent) if isinstance(m, UserMessage)), default=0)
    if last <= 0:
        return Step(core)
    previous = core.compaction.summary if core.compaction is not None else ""
    core = evolve(core, folding=start + last, sent=history)
    return Step(core, (Compact(host_compaction_id(core), recent[:last], previous,
                               event.max_tokens),))


class CompactionRefused(PhaseflowError):
    """``Session.compact()`` while a turn runs or waits for a human."""


# --- modes ---------------------------------------------------------------------------------


class ModeRefused(PhaseflowError):
    """A mode switch asked while a turn runs or waits for a human: modes change between
    turns (a call half-way through its approval keeps the mode it was planned in)."""


def on_mode(core: Core, event: SetMode) -> Step:
    if core.status in ("running", "awaiting_approval", "cancelling"):
        raise ModeRefused(f"session {core.session_id!r}: the mode changes between turns, and "
                          f"a turn is {core.status.replace('_', ' ')}")
    if core.execution.mode is event.mode:
        return Step(core)
    if event.mode is Mode.PLAN:
        core = evolve(core, execution=core.execution.enter_plan(), plan=())
    else:
        core = evolve(core, execution=core.execution.enter_exec())
    return Step(core, (Persist((ev.ModeChanged(mode=event.mode.value, turn=core.turn),)),))


# --- edit limits ---------------------------------------------------------------------------


def on_limit_edits(core: Core, event: LimitEdits) -> Step:
    """The turn core's edit ranges, set by the host: committed, and carried by every
    tool's context from the next call on."""
    if event.start is None:
        execution = core.execution.clear_edit_range(event.path)
    else:
        limited = core.execution.set_edit_range(event.path, event.start,
                                                event.end if event.end is not None else 0)
        if isinstance(limited, Rejected):
            raise EditLimitRefused(f"session {core.session_id!r}: {limited.detail}")
        execution = limited
    return Step(evolve(core, execution=execution), (Persist(),))


class EditLimitRefused(PhaseflowError):
    """An edit limit that is not one: a relative path, or lines that are not a range."""


# --- trust -----------------------------------------------------------------------------------


def on_change_trust(core: Core, event: ChangeTrust) -> Step:
    """A host's grant (every call of the tool, for the session) or revocation (every
    trust of the tool, approvals included): committed with a ``trust_changed`` event.
    A revocation of a tool nothing trusts changes nothing."""
    execution = core.execution
    if event.grant:
        key = TrustKey(event.tool)
        if any(e.key == key and e.scope is TrustScope.SESSION for e in execution.trust):
            return Step(core)
        granted = execution.put_trust(key, TrustScope.SESSION)
        assert not isinstance(granted, Rejected)  # session trust is never refused
        change = ev.TrustChanged(tool=event.tool, change="granted", keys=1, turn=core.turn)
        return Step(evolve(core, execution=granted), (Persist((change,)),))
    gone = sum(1 for e in execution.trust if e.key.tool == event.tool)
    if not gone:
        return Step(core)
    change = ev.TrustChanged(tool=event.tool, change="revoked", keys=gone, turn=core.turn)
    return Step(evolve(core, execution=execution.revoke(event.tool)), (Persist((change,)),))
