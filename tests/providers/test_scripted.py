"""ScriptedProvider: replies chosen by the request, recorded, checked to be used up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.providers import ScriptedProvider, ScriptIncomplete
from phaseflow.providers.protocol import (
    ProviderFailure,
    ProviderReply,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
)
from phaseflow.turn.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from tests.support.provider_streams import assemble, collect, request

SCRIPT = [
    {"calls": [{"crm.lookup_customer": {"email": "ada@example.com"}}]},
    "Thanks, Ada. Which order is it about?",
]


def _after_first_reply() -> tuple[UserMessage, AssistantMessage, ToolResultMessage]:
    call = ToolCall("call_1_1", "crm.lookup_customer", '{"email":"ada@example.com"}')
    return (UserMessage("Hi"), AssistantMessage("", (call,)),
            ToolResultMessage("call_1_1", '{"customer_id":"C-1"}'))


def test_the_first_request_gets_the_first_reply_as_tool_calls() -> None:
    provider = ScriptedProvider(SCRIPT)
    reply = assemble(collect(provider, request(UserMessage("Hi"), tools=["crm.lookup_customer"])))
    assert isinstance(reply, ProviderReply)
    assert (reply.text, reply.stop) == ("", "tool_use")
    assert reply.calls == (("call_1_1", "crm.lookup_customer", '{"email":"ada@example.com"}'),)


def test_the_reply_is_chosen_by_the_assistant_messages_in_the_history() -> None:
    # a fresh provider (a new process) given the stored history continues the script
    provider = ScriptedProvider(SCRIPT)
    reply = assemble(collect(provider, request(*_after_first_reply())))
    assert isinstance(reply, ProviderReply)
    assert reply.text == "Thanks, Ada. Which order is it about?"
    assert reply.stop == "end_turn" and reply.calls == ()
    provider.assert_complete()  # the history proves the first reply was given


def test_a_retried_request_gets_the_same_reply() -> None:
    provider = ScriptedProvider(SCRIPT)
    first = collect(provider, request(UserMessage("Hi")))
    assert collect(provider, request(UserMessage("Hi"))) == first
    assert len(provider.requests) == 2


def test_text_streams_in_several_deltas_and_arguments_in_fragments() -> None:
    provider = ScriptedProvider([{"text": "Looking that up for you.",
                                  "calls": [{"a.b": {"x": 1}}, {"c": None}]}])
    events = collect(provider, request(UserMessage("Hi")))
    assert len([e for e in events if isinstance(e, TextDelta)]) > 1
    assert [e.call_id for e in events if isinstance(e, ToolCallStart)] == ["call_1_1", "call_1_2"]
    assert len([e for e in events if isinstance(e, ToolCallDelta) and e.index == 0]) == 2
    reply = assemble(events)
    assert isinstance(reply, ProviderReply)
    assert reply.text == "Looking that up for you."
    assert [(n, json.loads(a)) for _, n, a in reply.calls] == [("a.b", {"x": 1}), ("c", {})]
    assert reply.usage.output_tokens > 0 and reply.usage.input_tokens > 0


def test_every_request_is_recorded() -> None:
    provider = ScriptedProvider(SCRIPT)
    req = request(UserMessage("Hi"), tools=["crm.lookup_customer", "go_to_phase"],
                  system="You are the agent.\n## Navigation\n- verify")
    collect(provider, req)
    assert provider.requests == [req]
    assert [t.name for t in provider.requests[0].tools] == ["crm.lookup_customer", "go_to_phase"]
    assert "Navigation" in provider.requests[0].system


def test_assert_complete_names_what_is_left() -> None:
    provider = ScriptedProvider(SCRIPT)
    collect(provider, request(UserMessage("Hi")))
    with pytest.raises(ScriptIncomplete, match=r"2 replies but only 1 .*1 left unused.*Thanks"):
        provider.assert_complete()
    assert issubclass(ScriptIncomplete, PhaseflowError)
    assert issubclass(ScriptIncomplete, AssertionError)


def test_a_request_beyond_the_script_fails_without_retry() -> None:
    provider = ScriptedProvider(["only one"])
    history = (UserMessage("Hi"), AssistantMessage("only one"), UserMessage("And?"))
    events = collect(provider, request(*history))
    assert events == [ProviderFailure("the script has 1 replies; request asks for reply 2")]
    provider.assert_complete()


def test_a_scripted_failure_comes_once_then_the_reply() -> None:
    provider = ScriptedProvider([
        {"error": "rate limited", "retryable": True, "retry_after": 0, "status": 429},
        "Hello",
    ])
    req = request(UserMessage("Hi"))
    assert collect(provider, req) == [
        ProviderFailure("rate limited", retryable=True, retry_after=0.0, status=429)]
    reply = assemble(collect(provider, req))
    assert isinstance(reply, ProviderReply) and reply.text == "Hello"
    provider.assert_complete()


def test_ready_objects_are_accepted() -> None:
    provider = ScriptedProvider([
        ProviderFailure("boom"),
        ProviderReply(calls=(("my-id", "t", "{}"),), stop="tool_use"),
    ])
    assert collect(provider, request(UserMessage("Hi"))) == [ProviderFailure("boom")]
    reply = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(reply, ProviderReply) and reply.calls == (("my-id", "t", "{}"),)


@pytest.mark.parametrize(("script", "message"), [
    ([42], "script entry 1: a reply must be a string"),
    (["ok", {"txt": "x"}], "script entry 2.txt: unknown key 'txt'"),
    ([{"calls": [{"a": 1, "b": 2}]}], r"script entry 1.calls\[0\]: each call must be a mapping"),
    ([{"calls": [{"a": [1]}]}], "the arguments of 'a' must be a mapping"),
    ([{"calls": "a"}], "calls must be a list"),
    ([{}], "a reply needs text or calls"),
    ([{"error": "x", "retryable": "yes"}], "retryable must be true or false"),
    ("hello", "a script must be a list of replies"),
])
def test_a_bad_script_is_a_config_error(script: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ScriptedProvider(script)  # type: ignore[arg-type]


def test_from_file_reads_the_conversation_test_form(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(
        "- calls: [{crm.lookup_customer: {email: ada@example.com}}]\n"
        "- error: overloaded\n"
        "  retryable: true\n"
        "- Thanks, Ada.\n", encoding="utf-8")
    provider = ScriptedProvider.from_file(path)
    assert [r.text for r in provider.replies] == ["", "Thanks, Ada."]
    assert provider.replies[1].failures == (ProviderFailure("overloaded", retryable=True),)


@pytest.mark.parametrize(("text", "where"), [
    ("- hello\n- calls:\n    - {a: 1}\n", r":3: script entry 2\.calls\[0\]\.a: the arguments"),
    ("- hello\n- hi\n- {text: x, color: red}\n", r":3: script entry 3\.color: unknown key"),
    ("- hello\n-   - nested\n", r":2: script entry 2: a reply must be"),
    ("- hello\n- [unclosed\n", r":3: invalid YAML"),
    ("reply: hello\n", r":1: script: a script must be a list"),
])
def test_from_file_errors_name_the_line(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=where) as caught:
        ScriptedProvider.from_file(path)
    assert str(caught.value).startswith(str(path))


def test_from_file_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the script"):
        ScriptedProvider.from_file(tmp_path / "nope.yaml")


def test_an_empty_file_is_an_empty_script(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    provider = ScriptedProvider.from_file(path)
    assert provider.replies == ()
    provider.assert_complete()


_replies = st.lists(st.one_of(
    st.text(min_size=1, max_size=20),
    st.builds(lambda n: {"calls": [{f"tool.{k}": {"k": k}} for k in range(n)]},
              st.integers(1, 3)),
), min_size=1, max_size=6)


@given(_replies, st.data())
def test_reply_n_answers_the_history_with_n_minus_1_assistant_messages(
    script: list[object], data: st.DataObject
) -> None:
    provider = ScriptedProvider(script)
    n = data.draw(st.integers(0, len(script) - 1))
    history = [UserMessage("hi")] + [AssistantMessage(f"reply {k}") for k in range(n)]
    reply = assemble(collect(provider, request(*history)))
    assert isinstance(reply, ProviderReply)
    expected = script[n]
    if isinstance(expected, str):
        assert (reply.text, reply.calls) == (expected, ())
    else:
        assert isinstance(expected, dict)
        written = [next(iter(c)) for c in expected["calls"]]
        assert [(c[0], c[1]) for c in reply.calls] == [
            (f"call_{n + 1}_{k + 1}", name) for k, name in enumerate(written)]
        assert reply.stop == "tool_use"


def test_calls_of_unknown_tools_are_named_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("- Hello.\n- {error: busy, retryable: true}\n- calls:\n"
                    "    - crm.lookup_custmer: {email: a}\n    - go_to_phase: {phase: x}\n"
                    "- calls: [{record: {}}, {zzz: {}}]\n", encoding="utf-8")
    known = ["crm.lookup_customer", "go_to_phase", "record"]
    assert ScriptedProvider.from_file(path).unknown_tools(known) == (
        (f"{path}:4: reply 2", "crm.lookup_custmer"), (f"{path}:6: reply 3", "zzz"))
    assert ScriptedProvider(SCRIPT).unknown_tools(["go_to_phase"]) == (
        ("reply 1", "crm.lookup_customer"),)
    assert ScriptedProvider(SCRIPT).unknown_tools(known) == ()
