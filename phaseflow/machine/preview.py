"""A phase's entry applied to a state as the machine applies it, without host code:
what ``phaseflow describe`` and the web view's workflow page show a reader (what the
model would be told there), with notes on what was applied and which calls were not
run."""

from __future__ import annotations

import copy
from typing import Any

from phaseflow.spec.model import CallEffect, Phase, SetEffect, UnsetEffect


def apply_entry(phase: Phase, state: dict[str, Any]) -> list[str]:
    """Apply ``phase``'s entry to ``state`` in the machine's order (``clear_on_enter``,
    then each ``on_enter`` effect in turn) without running host code; the notes say what
    was applied and which calls were not run."""
    notes: list[str] = []
    for key in phase.clear_on_enter:
        state.pop(key, None)
    if phase.clear_on_enter:
        notes.append(f"clear_on_enter applied: {', '.join(phase.clear_on_enter)}")
    applied: list[str] = []
    calls: list[str] = []
    for effect in phase.on_enter:
        if isinstance(effect, SetEffect):
            state.update(copy.deepcopy(dict(effect.values)))
            applied.append("set " + ", ".join(effect.values))
        elif isinstance(effect, UnsetEffect):
            for key in effect.keys:
                state.pop(key, None)
            applied.append("unset " + ", ".join(effect.keys))
        elif isinstance(effect, CallEffect):
            calls.append(effect.name)
    if applied:
        notes.append(f"on_enter applied: {'; '.join(applied)}")
    if calls:
        notes.append(f"on_enter calls (not run): {', '.join(calls)}")
    return notes
