"""Untrusted JSON: every ``from_json`` answers any input with a value or a rejection."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from phaseflow.turn import (
    Continuation,
    History,
    Rejected,
    ToolCall,
    ToolOutcome,
    ToolOutput,
    TurnExecution,
    TurnMachine,
    message_from_json,
)

from .helpers import PROPERTY

DECODERS = [
    Continuation.from_json,
    TurnExecution.from_json,
    TurnMachine.from_json,
    ToolOutput.from_json,
    History.from_json,
    ToolCall.from_json,
    ToolOutcome.from_json,
    message_from_json,
]

keys = st.sampled_from(
    [
        "kind",
        "role",
        "content",
        "messages",
        "revision",
        "durable_revision",
        "provenance",
        "request",
        "checkpoint",
        "state",
        "phase",
        "mode",
        "text",
        "capture",
        "presentation",
        "turn_id",
        "calls",
        "outcomes",
        "id",
        "name",
        "arguments",
        "status",
        "effects",
        "added",
        "boundaries",
        "branches",
        "checkpoint_seq",
        "last_turn_id",
        "steering",
        "follow_up",
        "trust",
        "auto_approvals",
        "edit_boundaries",
        "shell_tools",
        "activity",
        "selection",
        "reference",
    ]
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    st.sampled_from(
        [
            "idle",
            "active",
            "user",
            "assistant",
            "tool",
            "generating",
            "exec",
            "complete",
            "truncated",
            "pending",
            "ok",
            "native",
            "x",
        ]
    ),
)
anything = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=6)),
    max_leaves=25,
)


@PROPERTY
@given(anything)
def test_arbitrary_json_never_raises(data: object) -> None:
    for decode in DECODERS:
        value = decode(data)
        if not isinstance(value, Rejected):
            assert decode(json.loads(json.dumps(value.to_json()))) == value  # type: ignore[union-attr]


def _mutations(data: object) -> list[object]:
    """The document with one node at a time replaced by a wrong-shaped value."""
    out: list[object] = []
    if isinstance(data, dict):
        for k in data:
            for bad in (None, 7, "x", [], {}):
                out.append({**data, k: bad})
            out.append({kk: vv for kk, vv in data.items() if kk != k})
            out += [{**data, k: m} for m in _mutations(data[k])[:6]]
    elif isinstance(data, list):
        for i in range(len(data)):
            out.append(data[:i] + data[i + 1 :])
            out += [[*data[:i], m, *data[i + 1 :]] for m in _mutations(data[i])[:6]]
    return out


def test_mutated_real_documents_never_raise() -> None:
    from .test_turn_continuation import finished, with_group
    from .test_turn_state import executing

    docs = [
        (Continuation.from_json, with_group().to_json()),
        (Continuation.from_json, finished(with_group()).to_json()),
        (TurnMachine.from_json, executing()[0].to_json()),
        (TurnExecution.from_json, TurnExecution().begin_turn().to_json()),  # type: ignore[union-attr]
    ]
    count = 0
    for decode, doc in docs:
        for mutated in _mutations(doc):
            decode(mutated)  # must return, never raise
            count += 1
    assert count > 100
    assert isinstance(Continuation.from_json([[[[[]]]]] * 3), Rejected)
    deep: object = []
    for _ in range(5000):
        deep = [deep]
    assert isinstance(Continuation.from_json({"messages": deep}), Rejected)
    huge = {
        "last_turn_id": 1,
        "state": {
            "kind": "cancelling",
            "turn_id": 1,
            "since": 10**400,
            "calls": [],
            "outcomes": [],
        },
    }
    assert isinstance(TurnMachine.from_json(huge), Rejected)
    assert isinstance(
        ToolCall.from_json({"id": "a", "name": "b", "arguments": {"x": 10**5000}}), Rejected
    )
    assert isinstance(
        ToolCall.from_json({"id": "a", "name": "b", "arguments": {"x": float("nan")}}), Rejected
    )
