"""GeminiProvider through the real ``google-genai`` SDK against a loopback server speaking
``streamGenerateContent``: thought signatures kept and carried back, function calls,
finish reasons and errors."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import Iterator

import pytest

from phaseflow.providers.gemini import GeminiProvider
from phaseflow.providers.protocol import ProviderFailure, ProviderReply, Usage
from phaseflow.turn.messages import (
    AssistantMessage,
    Carried,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.cache_layout import cache_order, converse
from tests.support.provider_streams import assemble, collect, request
from tests.support.wire_scripts import gemini_chunk, gemini_reply, signature
from tests.support.wire_servers import Drop, Fail, WireServer

pytest.importorskip("google.genai")

KEY = "AIzaLoopbackS3cr3tKey"


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer("gemini") as running:
        yield running


def _provider(server: WireServer) -> GeminiProvider:
    return GeminiProvider("gemini-test", base_url=server.base_url, api_key=KEY)


def _reply(server: WireServer, *script: object) -> ProviderReply | ProviderFailure:
    server.push(*script)  # type: ignore[arg-type]
    return assemble(collect(_provider(server), request(UserMessage("Hi"),
                                                       tools=["crm.lookup"])))


def _signature_bytes(value: str) -> bytes:
    return base64.b64decode(value.replace("-", "+").replace("_", "/"))


def test_thoughts_text_and_signed_calls_stream_into_one_reply(server: WireServer) -> None:
    reply = _reply(server, gemini_reply(
        "Checking.", [("crm__lookup", '{"email": "ada@example.com"}')],
        thought="Need a lookup.", signed="sig-A", usage=(50, 10, 30)))
    assert isinstance(reply, ProviderReply)
    assert reply.text == "Checking." and reply.reasoning == "Need a lookup."
    assert [(n, json.loads(a)) for _, n, a in reply.calls] == [
        ("crm.lookup", {"email": "ada@example.com"})]
    assert reply.stop == "tool_use"
    assert reply.usage == Usage(50, 10, cached_input_tokens=30)
    assert reply.carried is not None and reply.carried.provider == "gemini"
    [[position, part]] = json.loads(reply.carried.data)
    assert position == 1 and part["function_call"]["name"] == "crm__lookup"
    assert _signature_bytes(part["thought_signature"]) == _signature_bytes(signature("sig-A"))
    assert server.requests[0].headers["x-goog-api-key"] == KEY


def test_a_signed_text_reply_carries_its_signature(server: WireServer) -> None:
    reply = _reply(server, gemini_reply("All done here.", signed="sig-T"))
    assert isinstance(reply, ProviderReply) and reply.stop == "end_turn"
    assert reply.carried is not None
    [[position, part]] = json.loads(reply.carried.data)
    assert position == 0 and part["text"] == "All done here."
    assert _signature_bytes(part["thought_signature"]) == _signature_bytes(signature("sig-T"))


def test_signatures_go_back_on_their_parts_and_another_wires_parts_do_not(
        server: WireServer) -> None:
    signed = {"function_call": {"name": "crm__lookup", "args": {"q": "ada"}},
              "thought_signature": signature("sig-B")}
    history = (UserMessage("Find Ada"),
               AssistantMessage("Looking.", (ToolCall("call_1", "crm.lookup", '{"q":"ada"}'),),
                                carried=Carried("gemini", json.dumps([[1, signed]]))),
               ToolResultMessage("call_1", "found"),
               AssistantMessage("Done.", carried=Carried("anthropic", "[]")))
    server.push(gemini_reply("ok"))
    collect(_provider(server), request(*history, UserMessage("thanks"), tools=["crm.lookup"]))
    contents = server.requests[0].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    model = contents[1]["parts"]
    assert model[0] == {"text": "Looking."}
    assert model[1]["functionCall"]["name"] == "crm__lookup"
    assert _signature_bytes(model[1]["thoughtSignature"]) == _signature_bytes(
        signature("sig-B"))
    assert contents[2]["parts"][0]["functionResponse"]["response"] == {"result": "found"}
    assert contents[3]["parts"] == [{"text": "Done."}]


def test_max_tokens_is_cut_and_safety_is_a_failure_not_retried(server: WireServer) -> None:
    cut = _reply(server, gemini_reply("partial", finish="MAX_TOKENS"))
    assert isinstance(cut, ProviderReply) and cut.stop == "max_tokens"
    blocked = _reply(server, gemini_reply("x", finish="SAFETY"))
    assert isinstance(blocked, ProviderFailure) and not blocked.retryable
    assert "SAFETY" in blocked.message


def test_errors_map_and_the_key_is_never_shown(server: WireServer) -> None:
    busy = _reply(server, Fail(429, "Resource exhausted", {"Retry-After": "4"},
                               type="resource_exhausted"))
    assert isinstance(busy, ProviderFailure) and busy.retryable and busy.status == 429
    assert busy.retry_after == 4.0
    full = _reply(server, Fail(400, "The input token count (2000000) exceeds the maximum "
                                    "number of tokens allowed (1048576).",
                               type="invalid_argument"))
    assert isinstance(full, ProviderFailure) and not full.retryable
    assert "context window" in full.message
    dropped = _reply(server, Drop([(None, gemini_chunk([{"text": "half"}]))]))
    assert isinstance(dropped, ProviderFailure) and dropped.retryable
    for failure in (busy, full, dropped):
        assert KEY not in failure.message
    assert KEY not in repr(_provider(server))


def test_a_calls_own_id_goes_back_with_its_response_and_a_made_up_one_never(
        server: WireServer) -> None:
    with_id = [(None, gemini_chunk([{"functionCall": {"id": "fc-7", "name": "crm__lookup",
                                                      "args": {"q": "ada"}}},
                                    {"functionCall": {"name": "crm__lookup",
                                                      "args": {"q": "bob"}}}],
                                   "STOP", (5, 1, 0)))]
    reply = _reply(server, with_id)
    assert isinstance(reply, ProviderReply)
    (first_id, _, _), (second_id, _, _) = reply.calls
    assert first_id == "fc-7" and second_id  # the session needs an id for each
    history = (UserMessage("Hi"),
               AssistantMessage("", tuple(ToolCall(i, "crm.lookup", a)
                                          for i, _, a in reply.calls),
                                carried=reply.carried),
               ToolResultMessage(first_id, "Ada"), ToolResultMessage(second_id, "Bob"))
    server.push(gemini_reply("ok"))
    collect(_provider(server), request(*history, tools=["crm.lookup"]))
    contents = server.requests[-1].body["contents"]
    calls = [p["functionCall"] for p in contents[1]["parts"]]
    assert calls[0].get("id") == "fc-7" and "id" not in calls[1]
    responses = [p["functionResponse"] for p in contents[2]["parts"]]
    assert responses[0]["id"] == "fc-7" and "id" not in responses[1]
    assert [r["response"] for r in responses] == [{"result": "Ada"}, {"result": "Bob"}]


BLOCK = "Current phase: help. Look the user up first."


def test_the_phase_block_ends_the_last_user_turn(server: WireServer) -> None:
    blocks = asyncio.run(converse(
        _provider(server), server,
        gemini_reply("", [("lookup", '{"email": "ada@example.com"}')]),
        gemini_reply("Found."), gemini_reply("Bye.")))
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 3 and all("Look the user up" in b for b in blocks)
    for body, block in zip(bodies, blocks, strict=True):
        assert body["contents"][-1]["role"] == "user"
        assert body["contents"][-1]["parts"][-1] == {"text": block}
        assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    # the second turn ends with the function response: the text part comes after it
    assert [next(iter(p)) for p in bodies[1]["contents"][-1]["parts"]] == [
        "functionResponse", "text"]
    for previous, current in itertools.pairwise(bodies):
        before = cache_order("gemini", previous)[:-1]
        after = cache_order("gemini", current)
        assert after[:len(before)] == before  # reusable up to the previous block
        # the history never keeps a block: only the last turn holds one
        assert "Look the user up" not in json.dumps(current["contents"][:-1])


@pytest.mark.parametrize("history", [(), (UserMessage("Hi"), AssistantMessage("Hello."))],
                         ids=["empty", "ends-with-the-model"])
def test_without_a_user_turn_to_end_the_block_is_a_user_turn_of_its_own(
        server: WireServer, history: tuple[UserMessage, ...]) -> None:
    server.push(gemini_reply("ok"))
    collect(_provider(server), request(*history, context=BLOCK))
    contents = server.requests[0].body["contents"]
    assert contents[-1] == {"role": "user", "parts": [{"text": BLOCK}]}
    assert len(contents) == len(history) + 1


def test_an_empty_block_adds_nothing(server: WireServer) -> None:
    history = (UserMessage("Find Ada"),
               AssistantMessage("", (ToolCall("c1", "crm.lookup", "{}"),)),
               ToolResultMessage("c1", "found"))
    server.push(gemini_reply("ok"), gemini_reply("ok"))
    collect(_provider(server), request(*history, tools=["crm.lookup"]))
    collect(_provider(server), request(*history, tools=["crm.lookup"], context=BLOCK))
    plain, with_block = (r.body for r in server.requests)
    assert [next(iter(p)) for p in plain["contents"][-1]["parts"]] == ["functionResponse"]
    assert with_block["contents"][-1]["parts"].pop() == {"text": BLOCK}
    assert with_block == plain
