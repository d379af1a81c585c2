"""A session's timers, as pure decisions: when the next one is due, and whether it is.

A timer is the moment an ``auto`` transition's guard can first become true by time
alone: its ``after`` (docs/format.md, "Timers"), or what a guard on ``seconds_in_phase``
says (``seconds_in_phase >= 600``; :mod:`phaseflow.expr.time_terms`), each a
transition's ``timers``. The session keeps one deadline, by the wall clock (the one
clock two processes share), recomputed at every commit from the phase and its time in
it: the earliest moment still ahead. A deadline that has passed is kept until a turn
boundary runs at or after it - the timer's own turn's first boundary, or the next
boundary of a turn that was running or starts meanwhile (a user's message) - which
evaluates the transition: so a timer is spent by the first boundary after it is due,
and fires at most one turn.
"""

from __future__ import annotations

from phaseflow.spec.model import Phase

#: the note a timer's turn starts with (the model's input: no user wrote it)
TIMER_NOTE = ("[timer] No message from the user: the timer of phase {phase!r} (after "
              "{after}) fired after {waited} in the phase. Continue from here.")


def _moments(phase: Phase) -> list[float]:
    return [m for t in phase.transitions if t.trigger == "auto" for m in t.timers]


def timer_deadline(phase: Phase, seconds_in_phase: float, now: float, finished: bool
                   ) -> float | None:
    """The wall-clock time the phase's next timer is due, seen at ``now`` with
    ``seconds_in_phase`` spent in it; ``None``: no timer ahead (none declared, all
    spent, or the session finished)."""
    if finished:
        return None
    ahead = [m for m in _moments(phase) if m > seconds_in_phase]
    if not ahead:
        return None
    return now + (min(ahead) - seconds_in_phase)


def next_deadline(kept: float | None, evaluated_at: float | None, phase: Phase,
                  seconds_in_phase: float, now: float, finished: bool) -> float | None:
    """The deadline a commit made at ``now`` stores. A due one (``kept``) stays until a
    turn boundary has run at or after it (``evaluated_at``: when this process last ran
    one; a commit that runs none - a turn's start, a note, a setting, a save - never
    spends a timer); otherwise the phase's next, by :func:`timer_deadline`."""
    if finished:
        return None
    if kept is not None and kept <= now and (evaluated_at is None or evaluated_at < kept):
        return kept
    return timer_deadline(phase, seconds_in_phase, now, finished)


def is_due(deadline: float | None, now: float, status: str) -> bool:
    """A timer's turn runs now: its deadline has passed and no turn holds the session
    (a running turn's own boundary evaluates the transition; a turn waiting for a human
    evaluates it when the human has decided)."""
    return deadline is not None and deadline <= now and status in ("idle", "failed")


def due_after(phase: Phase, seconds_in_phase: float) -> float | None:
    """The moment of the latest timer of ``phase`` already due (what the note says)."""
    due = [m for m in _moments(phase) if m <= seconds_in_phase]
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
