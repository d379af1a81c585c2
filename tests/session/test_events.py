"""The session's events keep their names on the wire and in the store, whatever their
classes are called: an event stored before a rename still reads back."""

from __future__ import annotations

from phaseflow.session.events import (
    EVENT_TYPES,
    TextDeltaEvent,
    TurnStartedEvent,
    event_from_json,
)


def test_stored_turn_started_and_text_delta_events_read_back() -> None:
    stored = {"type": "turn_started", "message": "hi", "session_id": "s", "turn": 1,
              "at": 2.0, "seq": 3}
    event = event_from_json(stored)
    assert event == TurnStartedEvent(message="hi", session_id="s", turn=1, at=2.0, seq=3)
    assert event.to_json() == stored
    assert event_from_json({"type": "text_delta", "text": "a"}) == TextDeltaEvent(text="a")
    assert TextDeltaEvent(text="a").to_json()["type"] == "text_delta"


def test_the_event_types_on_the_wire_are_unchanged() -> None:
    """Types are only ever added (an old log reads back): ``mode_changed`` came with plan
    mode, ``message_steered`` with double texting, ``history_compacted`` with compaction,
    ``session_forked`` with forks, ``reply_continued`` with cut replies' continuation,
    ``trust_changed`` with trust a host grants and revokes."""
    assert set(EVENT_TYPES) == {
        "turn_started", "text_delta", "tool_call", "tool_result", "approval_requested",
        "approval_resolved", "state_changed", "phase_changed", "retrying", "turn_finished",
        "mode_changed", "message_steered", "history_compacted",
        "session_forked", "error", "reply_continued", "turn_cancelling", "trust_changed"}
