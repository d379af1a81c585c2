"""The history as Chat Completions messages: one message per history message, in order,
every call's id and result kept, every function name valid and reversible."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.providers.chat_wire import names_of, request_messages, request_tools
from phaseflow.providers.protocol import ToolSpec
from phaseflow.providers.wire_names import WIRE_NAME
from phaseflow.turn.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.provider_streams import OBJECT, request

_names = st.sampled_from(["crm.lookup", "crm__lookup", "orders.search", "go_to_phase", "a b"])
_text = st.text(max_size=12)


@st.composite
def _histories(draw: st.DrawFn) -> list[Message]:
    history: list[Message] = []
    for turn in range(draw(st.integers(0, 4))):
        content = draw(st.one_of(_text, st.lists(_text.map(TextPart), max_size=3).map(tuple)))
        history.append(UserMessage(content))
        names = draw(st.lists(_names, max_size=3))
        calls = tuple(ToolCall(f"c{turn}_{k}", n, "{}") for k, n in enumerate(names))
        history.append(AssistantMessage(draw(_text), calls))
        history.extend(ToolResultMessage(c.id, draw(_text)) for c in calls)
    return history


@settings(suppress_health_check=[HealthCheck.too_slow])  # generation is slow on a busy machine
@given(_histories(), st.lists(_names, unique=True))
def test_every_message_is_translated_in_order(history: list[Message], tools: list[str]) -> None:
    req = request(*history, tools=[ToolSpec(t, "", OBJECT) for t in tools])
    names = names_of(req)
    out = request_messages(req, names)
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in out[1:]] == [m.role.value for m in history]
    for sent, message in zip(out[1:], history, strict=True):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            wire = [c["function"]["name"] for c in sent["tool_calls"]]
            assert all(WIRE_NAME.fullmatch(w) for w in wire)
            assert [names.from_wire(w) for w in wire] == [c.name for c in message.tool_calls]
            assert [c["id"] for c in sent["tool_calls"]] == [c.id for c in message.tool_calls]
        if isinstance(message, ToolResultMessage):
            assert sent["tool_call_id"] == message.call_id
    offered = [t["function"]["name"] for t in request_tools(req, names)]
    assert [names.from_wire(w) for w in offered] == tools
