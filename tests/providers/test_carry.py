"""What a reply carries back: the ``Carried`` value in a message's JSON (what every store
keeps), the assembler's checks of the event, and how the parts are put back."""

from __future__ import annotations

import json

from phaseflow.providers.assembly import ReplyAssembler
from phaseflow.providers.carry import carried, carried_parts, restored
from phaseflow.providers.protocol import ProviderFailure, ProviderReply, StreamEnd, TextDelta
from phaseflow.turn.messages import (
    AssistantMessage,
    Carried,
    ToolCall,
    message_from_json,
    message_to_json,
)
from phaseflow.turn.rejections import Rejected

SIGNED = {"type": "thinking", "thinking": "Plan.", "signature": "c2ln+/=="}


def test_a_carried_message_round_trips_through_its_json_exactly() -> None:
    held = carried("anthropic", [(0, SIGNED)])
    assert held is not None
    message = AssistantMessage("Looking.", (ToolCall("t1", "lookup", "{}"),), carried=held)
    data = json.loads(json.dumps(message_to_json(message)))
    assert data["carried"] == {"provider": "anthropic", "data": held.data}
    back = message_from_json(data)
    assert back == message and isinstance(back, AssistantMessage)
    assert back.carried is not None and back.carried.data == held.data
    assert "carried" not in message_to_json(AssistantMessage("plain"))


def test_a_damaged_carried_value_is_refused_when_read() -> None:
    data = message_to_json(AssistantMessage("x", carried=Carried("anthropic", "[]")))
    data["carried"] = {"provider": "anthropic"}
    assert isinstance(message_from_json(data), Rejected)


def test_only_the_same_wire_gets_its_parts_and_unreadable_data_is_none() -> None:
    message = AssistantMessage("x", carried=carried("anthropic", [(0, SIGNED)]))
    assert carried_parts(message, "anthropic") == [(0, SIGNED)]
    assert carried_parts(message, "gemini") == []
    for data in ("not json", '{"a": 1}', '[["0", {}]]', "[[-1, {}]]"):
        assert carried_parts(AssistantMessage("x", carried=Carried("g", data)), "g") == []


def test_parts_are_put_back_where_they_stood() -> None:
    rebuilt = ["text", "call1", "call2"]
    assert restored(rebuilt, [(0, "think")]) == ["think", "text", "call1", "call2"]
    assert restored(rebuilt, [(2, "think"), (0, "first")]) == [
        "first", "text", "think", "call1", "call2"]
    assert restored(rebuilt, [(9, "late")]) == [*rebuilt, "late"]
    signed = restored(rebuilt, [(1, "signed-call1")], lambda part: part.startswith("signed"))
    assert signed == ["text", "signed-call1", "call2"]


def test_the_assembler_keeps_one_carried_value_and_refuses_a_second_or_bad_data() -> None:
    held = Carried("anthropic", "[]")
    assembler = ReplyAssembler()
    for event in (TextDelta("hi"), held, StreamEnd()):
        assembler.add(event)
    reply = assembler.reply()
    assert isinstance(reply, ProviderReply) and reply.carried == held
    twice = ReplyAssembler()
    twice.add(held)
    failure = twice.add(held)
    assert isinstance(failure, ProviderFailure) and "a second Carried" in failure.message
    bad = ReplyAssembler().add(Carried("anthropic", "{not json"))
    assert isinstance(bad, ProviderFailure) and not bad.retryable
    assert "Carried.data is not JSON text" in bad.message
