"""The transcript ``phaseflow run`` prints: properties over any events a session emits."""

from __future__ import annotations

import io
import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from phaseflow.cli.render import JsonLines, Transcript, one_line, visible
from phaseflow.session import events as ev

ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: what a terminal must never receive from a model or a tool
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")

texts = st.text(max_size=40)
names = st.text(min_size=1, max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12)

events = st.one_of(
    st.builds(ev.TurnStartedEvent, message=texts),
    st.builds(ev.TextDeltaEvent, text=texts),
    st.builds(ev.ToolCallEvent, call_id=names, name=names, arguments=json_values),
    st.builds(ev.ToolResultEvent, call_id=names, name=names,
              status=st.sampled_from(["ok", "error", "refused", "rejected", "cancelled",
                                      "ignored", "unknown"]), content=texts),
    st.builds(ev.ApprovalRequested, call_id=names, name=names, arguments=json_values),
    st.builds(ev.ApprovalResolvedEvent, call_id=names, name=names,
              decision=st.sampled_from(["approve", "approve_turn", "approve_session",
                                        "reject"]), reason=texts),
    st.builds(ev.StateChanged, keys=st.just(("k",)), new=st.fixed_dictionaries(
        {"k": json_values})),
    st.builds(ev.PhaseChanged, from_phase=names, to_phase=names, trigger=names),
    st.builds(ev.Retrying, attempt=st.integers(1, 5), delay=st.floats(0, 9), message=texts),
    st.builds(ev.ErrorEvent, code=names, message=texts),
    st.builds(ev.TurnFinished, reply=texts, status=st.sampled_from(
        ["completed", "cancelled", "failed", "step_limit"])),
)


def transcript(seq: list[Any], *, colour: bool) -> str:
    out = io.StringIO()
    sink = Transcript(out, colour=colour, echo_user=True)
    for event in seq:
        sink.show(event)
    return out.getvalue()


@given(st.lists(events, max_size=12))
def test_colour_adds_escapes_and_nothing_else(seq: list[Any]) -> None:
    plain = transcript(seq, colour=False)
    assert "\x1b" not in plain
    assert ANSI.sub("", transcript(seq, colour=True)) == plain


@given(st.lists(events, max_size=12))
def test_nothing_a_model_or_tool_sends_reaches_the_terminal_as_a_control(
        seq: list[Any]) -> None:
    assert CONTROL.search(ANSI.sub("", transcript(seq, colour=True))) is None


@given(st.lists(events.filter(lambda e: not isinstance(e, ev.TextDeltaEvent)), max_size=12))
def test_every_event_but_a_text_delta_is_one_line(seq: list[Any]) -> None:
    no_newlines = [e for e in seq if not isinstance(e, ev.TurnStartedEvent | ev.TurnFinished)]
    out = transcript(no_newlines, colour=False)
    assert out.count("\n") == len(no_newlines)


@given(texts, st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=6))
def test_a_streamed_reply_is_printed_once_as_it_came(message: str, pieces: list[str]) -> None:
    reply = "".join(pieces)
    seq = [ev.TurnStartedEvent(message=message), *(ev.TextDeltaEvent(text=p) for p in pieces),
           ev.TurnFinished(reply=reply)]
    assert transcript(seq, colour=False) == (
        f"you: {visible(message)}\nagent: {visible(reply)}\n")


@given(texts)
def test_a_reply_that_was_not_streamed_is_printed_when_the_turn_ends(reply: str) -> None:
    out = transcript([ev.TurnStartedEvent(message="hi"), ev.TurnFinished(reply=reply)],
                     colour=False)
    assert out == "you: hi\n" + (f"agent: {visible(reply)}\n" if reply else "")


@given(json_values, st.integers(10, 200))
def test_one_line_is_one_line_within_the_width(value: Any, width: int) -> None:
    shown = one_line(value, width)
    assert "\n" not in shown and len(shown) <= width
    full = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    compact = visible(" ".join(full.split()))
    if len(compact) <= width:
        assert shown == compact
    else:
        assert shown.endswith("...") and compact.startswith(shown[:-3])


@given(st.lists(events, max_size=8))
def test_json_lines_are_the_events_to_json(seq: list[Any]) -> None:
    out, err = io.StringIO(), io.StringIO()
    sink = JsonLines(out, err)
    for event in seq:
        sink.show(event)
    lines = out.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == [
        json.loads(json.dumps(e.to_json(), default=str)) for e in seq]
    assert err.getvalue() == ""
