"""Shared strategies, hypothesis settings and checks (``ok``, ``rejected``, the JSON
identity) for the turn-core tests.

Settings live here (not in a global conftest) so the turn suite owns its budget: the
stateful machines run a few hundred random programs each, keeping ``tests/turn`` well
under a minute and a half on two cores.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from phaseflow.turn import (
    AssistantMessage,
    Content,
    MediaPart,
    Message,
    Rejected,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    UserMessage,
)

STATEFUL = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROPERTY = settings(max_examples=500, deadline=None)

short_text = st.text(alphabet="abcxyz \n", max_size=12)
names = st.sampled_from(["bash", "shell", "read_file", "write_file", "search"])

content_parts = st.one_of(
    short_text.map(TextPart),
    st.builds(
        MediaPart, st.sampled_from(["image/png", "text/plain"]), st.sampled_from(["t1", "t2"])
    ),
)
contents: st.SearchStrategy[Content] = st.one_of(
    short_text, st.lists(content_parts, max_size=3).map(tuple)
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False),
    short_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"command": st.sampled_from(["ls", "rm -rf x", "pwd"])}),
    st.dictionaries(st.sampled_from(["path", "query", "n"]), json_scalars, max_size=2),
)
outcomes = st.one_of(
    st.builds(ToolOutcome.ok, short_text),
    st.builds(ToolOutcome.error, short_text),
    st.just(ToolOutcome.cancelled()),
)


def tool_call(call_id: str, name: str, args: Any) -> ToolCall:
    return ToolCall.of(call_id, name, args)


def well_formed_history() -> st.SearchStrategy[tuple[Message, ...]]:
    """A finished history: optional system first, user/assistant turns, answered calls."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[Message, ...]:
        out: list[Message] = []
        if draw(st.booleans()):
            out.append(SystemMessage(draw(short_text)))
        for turn in range(draw(st.integers(0, 4))):
            out.append(UserMessage(draw(contents)))
            n = draw(st.integers(0, 2))
            calls = tuple(
                ToolCall.of(f"h{turn}_{i}", draw(names), draw(arguments)) for i in range(n)
            )
            out.append(AssistantMessage(draw(short_text), calls))
            for c in calls:
                out.append(ToolResultMessage(c.id, draw(short_text), draw(st.booleans())))
            if calls:
                out.append(AssistantMessage(draw(short_text)))
        return tuple(out)

    return build()


def assert_json_identity(value: Any, decode: Any) -> None:
    """``decode(to_json(value)) == value``, the JSON is plain JSON, and re-encoding is stable."""
    data = value.to_json()
    text = json.dumps(data)  # fails on non-JSON types
    again = decode(json.loads(text))
    assert not isinstance(again, Rejected), again
    assert again == value
    assert again.to_json() == data


def ok(value: Any) -> Any:
    """Unwrap an expected success, failing the test with the rejection otherwise."""
    assert not isinstance(value, Rejected), value
    return value


def rejected(value: Any, reason: str) -> Rejected:
    assert isinstance(value, Rejected), f"expected {reason}, got {value!r}"
    assert value.reason == reason, value
    return value
