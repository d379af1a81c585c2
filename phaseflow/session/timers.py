"""A session's timers, as pure decisions: when the next one is due, and whether it is.

A timer is an ``auto`` transition with ``after`` (docs/format.md, "Timers"): it can hold
once the conversation has been ``after`` seconds in its phase. The session keeps one
deadline, by the wall clock (the one clock two processes share), recomputed at every
commit from the phase and its time in it: the earliest ``after`` still ahead. A turn
that runs once a timer is due (the timer's own turn, or a user's message) evaluates the
transition at its boundary, and its commit moves the deadline past it: so a timer is
spent by the first turn after it is due, and fires at most once.
"""

from __future__ import annotations

from phaseflow.spec.model import Phase

#: the note a timer's turn starts with (the model's input: no user wrote it)
TIMER_NOTE = ("[timer] No message from the user: the timer of phase {phase!r} (after "
              "{after}) fired after {waited} in the phase. Continue from here.")


def timer_deadline(phase: Phase, seconds_in_phase: float, now: float, finished: bool
                   ) -> float | None:
    """The wall-clock time the phase's next timer is due, seen at ``now`` with
    ``seconds_in_phase`` spent in it; ``None``: no timer ahead (none declared, all
    spent, or the session finished)."""
    if finished:
        return None
    ahead = [t.after for t in phase.transitions
             if t.after is not None and t.trigger == "auto" and t.after > seconds_in_phase]
    if not ahead:
        return None
    return now + (min(ahead) - seconds_in_phase)


def next_deadline(kept: float | None, kept_turn: int, turn: int, phase: Phase,
                  seconds_in_phase: float, now: float, finished: bool) -> float | None:
    """The deadline a commit stores. A due one (``kept``, stored at turn ``kept_turn``)
    stays until a turn starts after it (a commit that runs no turn - a note, a setting,
    a save - never spends a timer); otherwise the phase's next, by
    :func:`timer_deadline`."""
    if finished:
        return None
    if kept is not None and kept <= now and turn == kept_turn:
        return kept
    return timer_deadline(phase, seconds_in_phase, now, finished)


def is_due(deadline: float | None, now: float, status: str) -> bool:
    """A timer's turn runs now: its deadline has passed and no turn holds the session
    (a running turn's own boundary evaluates the transition; a turn waiting for a human
    evaluates it when the human has decided)."""
    return deadline is not None and deadline <= now and status in ("idle", "failed")


def due_after(phase: Phase, seconds_in_phase: float) -> float | None:
    """The ``after`` of the latest timer of ``phase`` already due (what the note says)."""
    due = [t.after for t in phase.transitions
           if t.after is not None and t.trigger == "auto" and t.after <= seconds_in_phase]
    return max(due) if due else None


def duration_text(seconds: float) -> str:
    """``600`` -> ``10m``, ``90`` -> ``90s``: a duration as a person writes it."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size) == int(seconds / size):
            return f"{int(seconds / size)}{unit}"
    return f"{seconds:g}s"


def timer_note(phase: str, after: float | None, seconds_in_phase: float) -> str:
    """The text of a timer turn's input message."""
    return TIMER_NOTE.format(phase=phase,
                             after=duration_text(after) if after is not None else "?",
                             waited=duration_text(round(seconds_in_phase)))
