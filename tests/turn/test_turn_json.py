"""Untrusted JSON: every ``from_json`` answers any input with a value or a rejection."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from phaseflow.turn import (
    AssistantMessage,
    Continuation,
    History,
    MediaPart,
    Rejected,
    TextPart,
    ToolCall,
    ToolOutcome,
    ToolOutput,
    ToolResultMessage,
    TurnExecution,
    TurnProgress,
    UserMessage,
    message_from_json,
    message_to_json,
    trust_key,
)
from tests.support.turn_strategies import PROPERTY
from tests.support.turn_values import executing, finished, with_group

#: Every public decoder with the encoder of what it returns: a message is a plain value
#: with no ``to_json`` of its own, so its encoder is the function ``message_to_json``.
CODECS: list[tuple[Callable[[object], Any], Callable[[Any], object]]] = [
    (Continuation.from_json, Continuation.to_json),
    (TurnExecution.from_json, TurnExecution.to_json),
    (TurnProgress.from_json, TurnProgress.to_json),
    (ToolOutput.from_json, ToolOutput.to_json),
    (History.from_json, History.to_json),
    (ToolCall.from_json, ToolCall.to_json),
    (ToolOutcome.from_json, ToolOutcome.to_json),
    (message_from_json, message_to_json),
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
        "stage",
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
        "marks",
        "branches",
        "checkpoint_seq",
        "last_turn_id",
        "steering",
        "follow_up",
        "trust",
        "auto_approvals",
        "edit_ranges",
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
# Documents some decoder accepts, checked on every run whatever the seed or the examples
# database holds (random data rarely builds one): the round trip below must hold for them.
@example({"role": "user", "content": "idle"})
@example({"role": "tool", "content": [], "call_id": "x", "is_error": False})
@example([{"role": "assistant", "content": "x", "tool_calls": [], "reasoning": "x"}])
@example({"id": "x", "name": "x", "arguments": {"kind": [None, 1.5]}})
@example({"status": "ok", "content": [{"type": "text", "text": "x"}]})
@example({"last_turn_id": 0, "stage": {"kind": "idle"}})
@example(TurnExecution().to_json())
@example(Continuation().to_json())
@example(ToolOutput("x").to_json())
def test_arbitrary_json_never_raises(data: object) -> None:
    for decode, encode in CODECS:
        value = decode(data)
        if not isinstance(value, Rejected):  # what a decoder accepts round-trips exactly
            assert decode(json.loads(json.dumps(encode(value)))) == value


def test_every_codec_pair_round_trips_a_real_value() -> None:
    """Each decoder above is paired with the encoder of its own values: a mismatched pair
    fails here, not only on the rare random document that decoder accepts."""
    values: dict[Callable[[object], Any], object] = {
        Continuation.from_json: finished(with_group()),
        TurnExecution.from_json: TurnExecution().begin_turn(),
        TurnProgress.from_json: TurnProgress().start_turn().progress,  # type: ignore[union-attr]
        ToolOutput.from_json: ToolOutput("text"),
        History.from_json: with_group().messages,
        ToolCall.from_json: ToolCall.of("c", "bash", {"command": "ls"}),
        ToolOutcome.from_json: ToolOutcome.error("no"),
        message_from_json: AssistantMessage("a", (ToolCall.of("c", "bash"),), "why"),
    }
    assert set(values) == {decode for decode, _ in CODECS}
    for decode, encode in CODECS:
        value = values[decode]
        assert decode(json.loads(json.dumps(encode(value)))) == value


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
    docs = [
        (Continuation.from_json, with_group().to_json()),
        (Continuation.from_json, finished(with_group()).to_json()),
        (TurnProgress.from_json, executing()[0].to_json()),
        (TurnExecution.from_json, TurnExecution().begin_turn().to_json()),  # type: ignore[union-attr]
    ]
    count = 0
    for decode, doc in docs:
        for mutated in _mutations(doc):
            value = decode(mutated)  # must return, never raise
            if not isinstance(value, Rejected):  # and what it accepts round-trips exactly
                assert decode(json.loads(json.dumps(value.to_json()))) == value  # type: ignore[operator,union-attr]
            count += 1
    assert count > 100
    assert isinstance(Continuation.from_json([[[[[]]]]] * 3), Rejected)
    deep: object = []
    for _ in range(5000):
        deep = [deep]
    assert isinstance(Continuation.from_json({"messages": deep}), Rejected)
    huge = {
        "last_turn_id": 1,
        "stage": {
            "kind": "cancelling",
            "turn_id": 1,
            "since": 10**400,
            "calls": [],
            "outcomes": [],
        },
    }
    assert isinstance(TurnProgress.from_json(huge), Rejected)
    assert isinstance(
        ToolCall.from_json({"id": "a", "name": "b", "arguments": {"x": 10**5000}}), Rejected
    )
    assert isinstance(
        ToolCall.from_json({"id": "a", "name": "b", "arguments": {"x": float("nan")}}), Rejected
    )


# --- losslessness with the awkward values: any unicode (also lone surrogates), floats,
# --- nested content parts -------------------------------------------------------------

any_text = st.text(st.characters(codec=None), max_size=6)  # surrogates included
finite = st.floats(allow_nan=False, allow_infinity=False)
json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), finite, any_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(any_text, inner, max_size=3)
    ),
    max_leaves=10,
)
any_content = st.one_of(
    any_text,
    st.lists(
        st.one_of(st.builds(TextPart, any_text), st.builds(MediaPart, any_text, any_text)),
        max_size=3,
    ).map(tuple),
)


@PROPERTY
@given(
    st.lists(
        st.one_of(
            st.builds(UserMessage, any_content),
            st.builds(
                AssistantMessage,
                any_content,
                st.lists(st.builds(ToolCall.of, any_text, any_text, json_like), max_size=2).map(
                    tuple
                ),
                any_text,
            ),
            st.builds(ToolResultMessage, any_text, any_content, st.booleans()),
        ),
        max_size=5,
    ),
    st.lists(any_content, max_size=3).map(tuple),
)
def test_awkward_values_round_trip_exactly(messages: list, queue: tuple) -> None:  # type: ignore[type-arg]
    history = History(messages)
    back = History.from_json(json.loads(json.dumps(history.to_json())))
    assert back == history
    assert [type(m) for m in back] == [type(m) for m in history]
    ex = TurnExecution(steering=queue, follow_up=queue[::-1])
    assert TurnExecution.from_json(json.loads(json.dumps(ex.to_json()))) == ex
    for m in history:
        if isinstance(m, AssistantMessage):
            for call in m.tool_calls:
                # arguments survive exactly, floats and all; the trust key never raises
                assert call.argument_value() == json.loads(call.arguments)
                assert trust_key(call).tool == call.name


def test_the_written_json_keeps_its_form() -> None:
    """What ``to_json`` writes, to the letter and in key order (stored snapshots hold it):
    every field and variant of a value, its ``kind`` tag first, enums by value."""
    from phaseflow.turn import (
        ActiveTool,
        ApprovalRequest,
        CaptureIncomplete,
        CaptureReason,
        EditRange,
        Generating,
        Mode,
        OutputReference,
        PendingAutoApproval,
        PresentationTruncated,
        RunActive,
        Selection,
        SelectionKind,
        SelectionUnit,
        SubPhase,
        ToolExecution,
        TrustEntry,
        TrustKey,
        TrustKeyKind,
        TrustScope,
        TurnId,
    )

    call = ToolCall("c1", "bash", '{"command":"ls"}')
    execution = TurnExecution(
        mode=Mode.PLAN,
        phase=RunActive(ToolExecution((ActiveTool("c1", "bash"),)), ApprovalRequest(call, "why"),
                        "err"),
        steering=("hi", (TextPart("a"), MediaPart("image/png", "tok"))),
        trust=(TrustEntry(TrustKey("bash", TrustKeyKind.COMMAND, "ls"), TrustScope.SESSION),),
        auto_approvals=(PendingAutoApproval("c9", TrustScope.TURN),),
        edit_ranges=(EditRange("/a", 1, 3),),
        shell_tools=("bash",),
    )
    assert json.dumps(execution.to_json()) == (
        '{"mode": "plan", "phase": {"kind": "active", "activity": {"kind": "tool_execution", '
        '"active_tools": [{"call_id": "c1", "name": "bash"}]}, "pending_approval": {"call": '
        '{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}, "reason": "why"}, '
        '"error": "err"}, "steering": ["hi", [{"type": "text", "text": "a"}, {"type": "media", '
        '"media_type": "image/png", "token": "tok"}]], "follow_up": [], "trust": [{"key": '
        '{"tool": "bash", "kind": "command", "detail": "ls"}, "scope": "session"}], '
        '"auto_approvals": [{"call_id": "c9", "scope": "turn"}], "edit_ranges": [{"path": '
        '"/a", "start": 1, "end": 3}], "shell_tools": ["bash"]}'
    )
    progress = TurnProgress(Generating(TurnId(3), "t", "r", 5, SubPhase.STREAMING, (call,), True),
                            3)
    assert json.dumps(progress.to_json()) == (
        '{"last_turn_id": 3, "stage": {"kind": "generating", "turn_id": 3, "text": "t", '
        '"reasoning": "r", "token_estimate": 5, "sub_phase": "streaming", "pending_tool_calls": '
        '[{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}], "continuation": true}}'
    )
    output = ToolOutput("t", CaptureIncomplete(CaptureReason.TIMEOUT), PresentationTruncated(3),
                        Selection(SelectionKind.CAPTURED_PREFIX, SelectionUnit.LINES, 0, 2, None),
                        OutputReference("tok", "text/plain", 5, "a" * 64), True)
    assert json.dumps(output.to_json()) == (
        '{"text": "t", "capture": {"kind": "incomplete", "reason": "timeout"}, "presentation": '
        '{"kind": "truncated", "omitted": 3}, "selection": {"kind": "captured_prefix", "unit": '
        '"lines", "start": 0, "count": 2, "total": null}, "reference": {"token": "tok", '
        '"media_type": "text/plain", "size": 5, "sha256": "' + "a" * 64 + '"}, "failed": true}'
    )
    written: Any = json.loads(json.dumps(finished(with_group()).to_json()))
    assert list(written) == ["messages", "revision", "durable_revision", "provenance",
                             "request", "marks", "branches", "checkpoint", "checkpoint_seq"]
    assert list(written["checkpoint"]) == ["id", "request_id", "added", "effects"]
    assert list(written["checkpoint"]["effects"][0]) == ["call", "state", "result"]
