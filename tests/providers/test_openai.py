"""OpenAIProvider against a real OpenAI-compatible HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.errors import ConfigError
from phaseflow.providers import OpenAIProvider, ScriptedProvider
from phaseflow.providers.openai import failure_of
from phaseflow.providers.protocol import (
    Provider,
    ProviderFailure,
    ProviderReply,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
    Usage,
)
from phaseflow.turn.messages import (
    AssistantMessage,
    MediaPart,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.fake_openai_server import (
    Drop,
    Fail,
    FakeOpenAIServer,
    Garbage,
    Stall,
    chunk,
    reply,
    text_reply,
    tool_call,
    tool_calls_reply,
    usage_chunk,
)
from tests.support.provider_streams import assemble, collect, request


def _provider(server: FakeOpenAIServer, **options: object) -> OpenAIProvider:
    return OpenAIProvider("test-model", base_url=server.base_url, **options)  # type: ignore[arg-type]


def _reply(server: FakeOpenAIServer, *responses: object, **req: object) -> ProviderReply:
    server.push(*responses)  # type: ignore[arg-type]
    reply = assemble(collect(_provider(server), request(UserMessage("Hi"), **req)))  # type: ignore[arg-type]
    assert isinstance(reply, ProviderReply), reply
    return reply


def _failure(server: FakeOpenAIServer, *responses: object) -> ProviderFailure:
    server.push(*responses)  # type: ignore[arg-type]
    failure = assemble(collect(_provider(server), request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure), failure
    return failure


# -- replies -----------------------------------------------------------------------------

def test_a_text_reply_streams_in_deltas_with_usage(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("Hello, how can I help?", parts=4, usage=(12, 6)))
    events = collect(_provider(fake_openai), request(UserMessage("Hi")))
    assert [e.text for e in events if isinstance(e, TextDelta)] == [
        "Hello,", " how c", "an I h", "elp?"]
    assert assemble(events) == ProviderReply("Hello, how can I help?", usage=Usage(12, 6))
    body = fake_openai.requests[0].body
    assert body["model"] == "test-model" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hi"}]
    assert "tools" not in body and "tool_choice" not in body


def test_tool_calls_interleaved_and_split_mid_json_are_assembled(
    fake_openai: FakeOpenAIServer,
) -> None:
    reply = _reply(fake_openai, tool_calls_reply(
        ("call_a", "crm__lookup_customer", '{"email": "ada@example.com"}'),
        ("call_b", "orders__search", '{"customer_id": "C-1", "limit": 5}'), split=4),
        tools=["crm.lookup_customer", "orders.search"])
    assert reply.stop == "tool_use"
    assert reply.calls == (
        ("call_a", "crm.lookup_customer", '{"email": "ada@example.com"}'),
        ("call_b", "orders.search", '{"customer_id": "C-1", "limit": 5}'),
    )
    assert reply.usage == Usage(20, 9)


def test_the_history_is_translated_with_wire_names(fake_openai: FakeOpenAIServer) -> None:
    call = ToolCall("call_1", "crm.lookup_customer", '{"email":"ada@example.com"}')
    history = (
        UserMessage((TextPart("Here is my receipt"),
                     MediaPart("image/png", "https://example.com/r.png"),
                     MediaPart("application/pdf", "blob-7"))),
        AssistantMessage("", (call,)),
        ToolResultMessage("call_1", '{"customer_id":"C-1"}'),
        AssistantMessage("Found you, Ada."),
        UserMessage("Thanks"),
    )
    schema = {"type": "object", "properties": {"email": {"type": "string"}},
              "required": ["email"]}
    tools = (ToolSpec("crm.lookup_customer", "Find a customer.", schema),
             ToolSpec("go_to_phase", "Move on.", {"type": "object"}))
    fake_openai.push(text_reply("ok"))
    collect(_provider(fake_openai), request(
        *history, tools=tools, tool_choice="none", max_output_tokens=300, temperature=0.2,
        request_id="turn-3-step-2"))
    recorded = fake_openai.requests[0]
    body = recorded.body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "Here is my receipt"},
            {"type": "image_url", "image_url": {"url": "https://example.com/r.png"}},
            {"type": "text", "text": "[attachment application/pdf: blob-7]"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "crm__lookup_customer", "arguments": '{"email":"ada@example.com"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"customer_id":"C-1"}'},
        {"role": "assistant", "content": "Found you, Ada."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {"type": "function", "function": {"name": "crm__lookup_customer",
                                          "description": "Find a customer.", "parameters": schema}},
        {"type": "function", "function": {"name": "go_to_phase", "description": "Move on.",
                                          "parameters": {"type": "object"}}},
    ]
    assert body["tool_choice"] == "none"
    assert body["max_completion_tokens"] == 300 and body["temperature"] == 0.2
    assert recorded.headers["x-client-request-id"] == "turn-3-step-2"
    assert recorded.headers["authorization"] == "Bearer not-needed"


def test_colliding_names_stay_apart_on_the_wire_and_come_back(
    fake_openai: FakeOpenAIServer,
) -> None:
    reply = _reply(fake_openai, tool_calls_reply(("c1", "crm__lookup_2", "{}"),
                                                 ("c2", "crm__lookup", "{}")),
                   tools=["crm.lookup", "crm__lookup"])
    names = [t["function"]["name"] for t in fake_openai.requests[0].body["tools"]]
    assert names == ["crm__lookup_2", "crm__lookup"]
    assert [c[1] for c in reply.calls] == ["crm.lookup", "crm__lookup"]


def test_a_call_without_an_id_gets_one_and_arguments_before_the_name_are_kept(
    fake_openai: FakeOpenAIServer,
) -> None:
    chunks = [
        chunk({"tool_calls": [tool_call(0, '{"q":')]}),
        chunk({"tool_calls": [tool_call(0, ' 1}', name="lookup")]}),
        chunk({}, "tool_calls"),
    ]
    reply = _reply(fake_openai, chunks, request_id="r-9")
    assert reply.calls == (("call_r-9_0", "lookup", '{"q": 1}'),)


def test_the_scripted_form_helper_round_trips(fake_openai: FakeOpenAIServer) -> None:
    got = _reply(fake_openai, reply({"text": "Let me look.",
                                     "calls": [{"crm.lookup_customer": {"email": "a@b"}}]}),
                 tools=["crm.lookup_customer"])
    assert (got.text, got.calls) == (
        "Let me look.", (("call_1", "crm.lookup_customer", '{"email":"a@b"}'),))


def test_stop_after_tool_calls_still_means_tool_use(fake_openai: FakeOpenAIServer) -> None:
    chunks = [chunk({"tool_calls": [tool_call(0, "{}", id="c", name="t")]}), chunk({}, "stop")]
    assert _reply(fake_openai, chunks).stop == "tool_use"


def test_length_means_max_tokens(fake_openai: FakeOpenAIServer) -> None:
    assert _reply(fake_openai, text_reply("cut", finish="length")).stop == "max_tokens"


def test_reasoning_content_is_a_reasoning_delta(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push([chunk({"reasoning_content": "Think."}), chunk({"content": "Done."}),
                      chunk({}, "stop")])
    events = collect(_provider(fake_openai), request(UserMessage("Hi")))
    assert events[0] == ReasoningDelta("Think.")
    reply = assemble(events)
    assert isinstance(reply, ProviderReply)
    assert (reply.reasoning, reply.text) == ("Think.", "Done.")


def test_the_request_model_wins_and_extra_parameters_pass(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("a"), text_reply("b"))
    provider = _provider(fake_openai, seed=7, include_usage=False, max_tokens_field="max_tokens")
    collect(provider, request(UserMessage("Hi"), model="other-model", max_output_tokens=9))
    body = fake_openai.requests[0].body
    assert (body["model"], body["seed"], body["max_tokens"]) == ("other-model", 7, 9)
    assert "stream_options" not in body


def test_one_provider_serves_several_event_loops(fake_openai: FakeOpenAIServer) -> None:
    # a host's synchronous calls may each run a new loop: the provider keeps working
    fake_openai.push(text_reply("one"), text_reply("two"))
    provider = _provider(fake_openai)

    async def once() -> ProviderReply | ProviderFailure:
        return assemble([e async for e in provider.stream(request(UserMessage("Hi")))])

    first = asyncio.run(once())
    second = asyncio.run(once())
    assert isinstance(first, ProviderReply) and isinstance(second, ProviderReply)
    assert (first.text, second.text) == ("one", "two")
    asyncio.run(provider.aclose())


def test_closing_the_stream_early_is_quiet(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("a long reply in many pieces", parts=8))
    provider = _provider(fake_openai)

    async def first_event() -> object:
        events = provider.stream(request(UserMessage("Hi")))
        event = await anext(events)
        await events.aclose()  # type: ignore[attr-defined]
        await provider.aclose()
        return event

    assert isinstance(asyncio.run(first_event()), TextDelta)


def test_cancelling_a_waiting_stream_cancels_it_and_yields_no_failure(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.push(Stall([chunk({"content": "Let me"})]), text_reply("next"))
    provider = _provider(fake_openai)
    seen: list[object] = []

    async def consume() -> None:
        async for event in provider.stream(request(UserMessage("Hi"))):
            seen.append(event)

    async def run() -> ProviderReply | ProviderFailure:
        task = asyncio.create_task(consume())
        while not seen:  # the first delta arrived; the server now holds the stream open
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        again = assemble([e async for e in provider.stream(request(UserMessage("Hi")))])
        await provider.aclose()
        return again

    again = asyncio.run(run())
    assert seen == [TextDelta("Let me")]
    assert isinstance(again, ProviderReply) and again.text == "next"


def test_a_released_stall_completes(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(Stall([chunk({"content": "a"})], [chunk({"content": "b"}, "stop")]))
    fake_openai.release()
    assert _reply(fake_openai).text == "ab"


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenAIServer]:
    """One server for every example of a property (a fixture per test would be reset
    between examples only in name)."""
    with FakeOpenAIServer() as server:
        yield server


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=8)),
                       max_size=4),
       st.integers(1, 7), st.booleans())
def test_arguments_split_anywhere_arrive_whole(
    shared_server: FakeOpenAIServer, args: dict[str, object], split: int, second: bool
) -> None:
    text = json.dumps(args)
    calls = [("c1", "a__b", text)] + ([("c2", "c", text[::-1])] if second else [])
    reply = _reply(shared_server, tool_calls_reply(*calls, split=split), tools=["a.b", "c"])
    assert reply.calls == tuple((i, "a.b" if n == "a__b" else n, a) for i, n, a in calls)


# -- failures ----------------------------------------------------------------------------

def test_429_is_retryable_with_retry_after_and_the_sdk_does_not_retry(
    fake_openai: FakeOpenAIServer,
) -> None:
    failure = _failure(fake_openai, Fail(429, "Rate limit reached", {"Retry-After": "3"}),
                       text_reply("never asked for"))
    assert failure == ProviderFailure("the server answered 429: Rate limit reached",
                                      retryable=True, retry_after=3.0, status=429)
    assert len(fake_openai.requests) == 1 and fake_openai.pending == 1


def test_5xx_is_retryable_and_retry_after_ms_is_read(fake_openai: FakeOpenAIServer) -> None:
    assert _failure(fake_openai, Fail(500, "boom")) == ProviderFailure(
        "the server answered 500: boom", retryable=True, status=500)
    failure = _failure(fake_openai, Fail(503, "busy", {"retry-after-ms": "1500"}))
    assert (failure.retryable, failure.retry_after, failure.status) == (True, 1.5, 503)


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_status_errors_are_final_with_the_servers_message(
    fake_openai: FakeOpenAIServer, status: int
) -> None:
    failure = _failure(fake_openai, Fail(status, "Invalid 'messages[2]': tool_call_id missing",
                                         type="invalid_request_error"))
    assert failure == ProviderFailure(
        f"the server answered {status}: Invalid 'messages[2]': tool_call_id missing",
        retryable=False, status=status)


@pytest.mark.parametrize(("fail", "full"), [
    (Fail(400, "This model's maximum context length is 4096 tokens",
          type="invalid_request_error", code="context_length_exceeded"), True),
    # vLLM and llama.cpp send no code: their message says it
    (Fail(400, "This model's maximum context length is 512 tokens. However, you requested "
               "536 tokens", type="BadRequestError"), True),
    (Fail(400, "the request exceeds the available context size", type="invalid_request_error"),
     True),
    (Fail(400, "Invalid 'messages[2]': tool_call_id missing"), False),
    (Fail(500, "context length of the cache is wrong"), False),
])
def test_a_context_length_error_is_marked_for_the_session_to_recover(
    fake_openai: FakeOpenAIServer, fail: Fail, full: bool
) -> None:
    failure = _failure(fake_openai, fail)
    assert failure.code == ("context_length_exceeded" if full else None)
    assert not failure.retryable or fail.status >= 500
    assert fail.message in failure.message


def test_a_dropped_connection_mid_stream_is_retryable(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(Drop(text_reply("Hello there, partial", parts=3)[:2]))
    events = collect(_provider(fake_openai), request(UserMessage("Hi")))
    assert isinstance(events[0], TextDelta)
    failure = assemble(events)
    assert isinstance(failure, ProviderFailure) and failure.retryable
    assert "connection" in failure.message


def test_a_malformed_chunk_is_a_final_failure(fake_openai: FakeOpenAIServer) -> None:
    failure = _failure(fake_openai, Garbage(text_reply("Hi")[:2]))
    assert not failure.retryable and "malformed stream chunk" in failure.message


def test_a_stream_without_a_finish_reason_is_retryable(fake_openai: FakeOpenAIServer) -> None:
    failure = _failure(fake_openai, [chunk({"content": "half"}), usage_chunk(1, 1)])
    assert failure.retryable and "before the reply was complete" in failure.message


def test_an_error_event_in_the_stream_is_a_failure(fake_openai: FakeOpenAIServer) -> None:
    failure = _failure(fake_openai, [chunk({"content": "a"}),
                                     {"error": {"message": "model crashed", "type": "x"}}])
    assert failure == ProviderFailure("the server reported an error: model crashed")


def test_the_content_filter_is_a_failure(fake_openai: FakeOpenAIServer) -> None:
    failure = _failure(fake_openai, text_reply("a", finish="content_filter"))
    assert "content filter" in failure.message and not failure.retryable


def test_no_server_listening_is_a_retryable_connection_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = OpenAIProvider("m", base_url=f"http://127.0.0.1:{port}/v1")
    failure = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure) and failure.retryable
    assert failure.message.startswith(
        f"the connection to the model server at http://127.0.0.1:{port}/v1 failed")


def test_a_timeout_is_retryable() -> None:
    error = openai.APITimeoutError(request=httpx2.Request("POST", "http://127.0.0.1/v1"))
    assert failure_of(error) == ProviderFailure(
        "the request to the model server timed out", retryable=True)


def test_no_model_anywhere_is_a_failure(fake_openai: FakeOpenAIServer) -> None:
    provider = OpenAIProvider(base_url=fake_openai.base_url)
    failure = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure) and "no model" in failure.message
    assert fake_openai.requests == []


# -- configuration -----------------------------------------------------------------------

def test_the_sdks_environment_variables_are_read(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    fake_openai.push(text_reply("hi"))
    reply = assemble(collect(OpenAIProvider("m"), request(UserMessage("Hi"))))
    assert isinstance(reply, ProviderReply) and reply.text == "hi"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_an_explicit_key_is_sent_and_never_shown(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("hi"))
    provider = _provider(fake_openai, api_key="sk-given")
    collect(provider, request(UserMessage("Hi")))
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-given"
    assert "sk-given" not in repr(provider) and fake_openai.base_url in repr(provider)


def test_no_key_and_no_base_url_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="needs an API key"):
        OpenAIProvider("gpt-4.1-mini")


def test_a_given_client_is_used_as_it_is(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("via client"))
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0)
    provider = OpenAIProvider("m", client=client)

    async def run() -> ProviderReply | ProviderFailure:
        try:
            return assemble([e async for e in provider.stream(request(UserMessage("Hi")))])
        finally:
            await client.close()

    reply = asyncio.run(run())
    assert isinstance(reply, ProviderReply) and reply.text == "via client"


def test_parameters_the_adapter_sets_cannot_be_extras() -> None:
    with pytest.raises(ConfigError, match="'messages' is set by the adapter"):
        OpenAIProvider("m", base_url="http://127.0.0.1:1/v1", messages=[])


def test_without_the_sdk_installed_the_provider_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import phaseflow.providers.openai as adapter

    monkeypatch.setattr(adapter, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install '\.\[openai\]'"):
        OpenAIProvider("m", base_url="http://127.0.0.1:1/v1")


def test_both_adapters_are_providers(fake_openai: FakeOpenAIServer) -> None:
    assert isinstance(_provider(fake_openai), Provider)
    assert isinstance(ScriptedProvider([]), Provider)


# -- the prompt cache ----------------------------------------------------------------------

def test_the_tokens_read_from_the_cache_reach_the_turns_end(fake_openai: FakeOpenAIServer) -> None:
    import phaseflow
    from phaseflow.session import Agent
    from tests.support.hostile_desk import collect as collect_events

    workflow = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: hello\ninitial: greet\nphases:\n  greet:\n    goal: Greet.\n")
    # a server with a prompt cache reports what it reused (OpenAI's cached input,
    # llama.cpp's reused prefix); one without says nothing: 0
    fake_openai.push([*text_reply("Hi!", usage=None), usage_chunk(510, 3, cached=0)],
                     [*text_reply("Bye!", usage=None), usage_chunk(530, 3, cached=500)],
                     text_reply("Again.", usage=(540, 4)))
    session = Agent(workflow, _provider(fake_openai)).session_sync("s")
    ends = [next(e for e in collect_events(session.send(m)) if e.type == "turn_finished")
            for m in ("hello", "bye", "again")]
    assert [(e.input_tokens, e.cached_input_tokens) for e in ends] == [
        (510, 0), (530, 500), (540, 0)]


@pytest.mark.parametrize("details", [None, "x", {"cached_tokens": "500"},
                                     {"cached_tokens": -3}, {}])
def test_cached_tokens_the_server_garbles_count_as_none(
        fake_openai: FakeOpenAIServer, details: object) -> None:
    usage = usage_chunk(20, 9)
    usage["usage"]["prompt_tokens_details"] = details
    reply = _reply(fake_openai, [*text_reply("Hi", usage=None), usage])
    assert reply.usage == Usage(20, 9, cached_input_tokens=0)
