"""The session under attack from its provider: what a host sees when a provider breaks
its protocol (yields the documented event classes with the wrong values, as a buggy
adapter would, raises, or stops short), a reply is cut at max_tokens, or the model sends
arguments that are not JSON or calls without ids; and what the provider is asked.

Each test is one promise of the session, tried with hostile input written to the
documented protocol. The session's other hostile tests: test_session_hostile_tools.py
(tools that overrun), test_session_hostile_store.py (an altered store),
test_session_hostile_concurrency.py (several callers, workers and loops) and
test_session_config.py (a wrong configuration)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from phaseflow.providers import ScriptedProvider
from phaseflow.providers.protocol import (
    ProviderFailure,
    ProviderRequest,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
)
from phaseflow.session import Agent, TurnFailed
from tests.support.hostile_desk import RAN, TOOLS, collect, workflow


class Broken:
    """A provider that yields ``events`` (then raises ``raises``, if given) on its first
    call, and answers "fine" after that."""

    def __init__(self, events: list[Any], raises: BaseException | None = None) -> None:
        self.events = events
        self.raises = raises
        self.calls = 0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        self.calls += 1
        if self.calls > 1:
            yield TextDelta("fine")
            yield StreamEnd()
            return
        for item in self.events:
            yield item
        if self.raises is not None:
            raise self.raises


class Boom(BaseException):
    """Not an Exception: what a careless library might raise."""


MALFORMED: dict[str, tuple[list[Any], BaseException | None]] = {
    "text is an int": ([TextDelta(123), StreamEnd()], None),  # type: ignore[arg-type]
    "text is None": ([TextDelta(None), StreamEnd()], None),  # type: ignore[arg-type]
    "text is a list": ([TextDelta(["a"]), StreamEnd()], None),  # type: ignore[arg-type]
    "reasoning is None": ([ReasoningDelta(None), StreamEnd()], None),  # type: ignore[arg-type]
    "indexes of two kinds": ([ToolCallStart(0, "c1", "lookup"),
                              ToolCallStart("1", "c2", "lookup"),  # type: ignore[arg-type]
                              StreamEnd("tool_use")], None),
    "call id not a string": ([ToolCallStart(0, 7, "lookup"),  # type: ignore[arg-type]
                              ToolCallDelta(0, '{"q": "x"}'), StreamEnd("tool_use")], None),
    "name not a string": ([ToolCallStart(0, "c1", None),  # type: ignore[arg-type]
                           StreamEnd("tool_use")], None),
    "arguments not a string": ([ToolCallStart(0, "c1", "lookup"),
                                ToolCallDelta(0, {"q": "x"}),  # type: ignore[arg-type]
                                StreamEnd("tool_use")], None),
    "usage of words": ([TextDelta("hi"), Usage("many", None),  # type: ignore[arg-type]
                        StreamEnd()], None),
    "failure without a message": ([ProviderFailure(None)], None),  # type: ignore[arg-type]
    "retry_after as text": ([ProviderFailure("slow", True, "5")], None),  # type: ignore[arg-type]
    "an unknown stop": ([TextDelta("hi"), StreamEnd("done")], None),  # type: ignore[arg-type]
    "not an event at all": ([TextDelta("hi"), {"kind": "text_delta"}], None),
    "a BaseException": ([TextDelta("hi")], Boom("out of band")),
    "its own CancelledError": ([TextDelta("hi")], asyncio.CancelledError()),
    "an exception": ([TextDelta("hi")], RuntimeError("socket gone")),
    "no StreamEnd": ([ToolCallStart(0, "c1", "lookup"), ToolCallDelta(0, '{"q": "x"}')],
                     None),
    "a delta before its start": ([ToolCallDelta(0, '{"q": "x"}'), StreamEnd("tool_use")],
                                 None),
    "two starts of one index": ([ToolCallStart(0, "c1", "lookup"),
                                 ToolCallStart(0, "c2", "lookup"), StreamEnd("tool_use")],
                                None),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_whatever_a_provider_yields_or_raises_the_turn_ends_and_the_session_goes_on(
        case: str) -> None:
    RAN.clear()
    events_, raises = MALFORMED[case]
    provider = Broken(events_, raises)
    agent = Agent(workflow(), provider, tools=TOOLS, max_retries=3)
    session = agent.session_sync("s")
    events = collect(session.send("hello"))
    finished = [e for e in events if e.type == "turn_finished"]
    assert [e.status for e in finished] == ["failed"]
    errors = [e for e in events if e.type == "error"]
    assert [e.code for e in errors] == ["provider_error"]
    assert provider.calls == 1  # the provider's own fault: never retried
    assert RAN == []  # nothing of a broken reply runs
    assert session.status == "failed"
    # usable at once: the next message is a normal turn
    again = collect(session.send("still there?"))
    assert [e.reply for e in again if e.type == "turn_finished"] == ["fine"]
    assert session.status == "idle"


def test_a_malformed_event_is_named_in_the_error() -> None:
    provider = Broken([TextDelta(123), StreamEnd()])  # type: ignore[arg-type]
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("hello"))
    error = next(e for e in events if e.type == "error")
    assert "TextDelta.text is int, not str" in error.message
    assert "protocol" in error.message


def test_reply_raises_turn_failed_naming_the_provider_error() -> None:
    provider = Broken([TextDelta("hi")], RuntimeError("socket gone"))
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    with pytest.raises(TurnFailed, match="socket gone") as caught:
        session.reply_sync("hello")
    assert caught.value.status == "failed"
    assert caught.value.error.startswith("provider_error: ")
    reply = session.reply_sync("again")
    assert reply == "fine" and reply.status == "completed"


def test_reply_says_when_the_turn_waits_for_a_human() -> None:
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 5}}]}, "paid"])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    reply = session.reply_sync("pay 5")
    assert reply.status == "awaiting_approval"
    assert reply.approval is not None and reply.approval.arguments == {"amount": 5}


def _cut_calls() -> Broken:
    return Broken([TextDelta("Looking"), ToolCallStart(0, "c1", "lookup"),
                   ToolCallDelta(0, '{"q": "a"}'), ToolCallStart(1, "c2", "lookup"),
                   ToolCallDelta(1, '{"q": "b'), StreamEnd("max_tokens")])


def test_a_reply_cut_at_max_tokens_runs_none_of_its_calls_and_is_continued() -> None:
    RAN.clear()
    provider = _cut_calls()
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("look"))
    assert RAN == []
    assert provider.calls == 2  # asked to go on, in this turn
    assert [e.continuation for e in events if e.type == "reply_continued"] == [1]
    results = [e for e in events if e.type == "tool_result"]
    assert [e.call_id for e in results] == ["c1", "c2"]
    assert all("Not run" in e.content for e in results)
    finished = [e for e in events if e.type == "turn_finished"]
    assert [(e.status, e.reply) for e in finished] == [("completed", "fine")]


def test_a_reply_cut_at_max_tokens_runs_none_of_its_calls_and_ends_the_turn() -> None:
    RAN.clear()
    provider = _cut_calls()
    session = Agent(workflow(), provider, tools=TOOLS, max_continuations=0).session_sync("s")
    events = collect(session.send("look"))
    assert RAN == []
    assert provider.calls == 1  # the model is not asked again in this turn
    assert [e.code for e in events if e.type == "error"] == ["max_tokens"]
    results = [e for e in events if e.type == "tool_result"]
    assert [e.call_id for e in results] == ["c1", "c2"]
    assert all("Not run" in e.content for e in results)
    finished = [e for e in events if e.type == "turn_finished"]
    assert [(e.status, e.reply) for e in finished] == [("cut", "Looking")]
    # the cut reply is kept as it was, every call answered: the next turn is a normal one
    history = session.history
    assert [c.id for c in history[1].tool_calls] == ["c1", "c2"]
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]
    assert [e.reply for e in collect(session.send("go on")) if e.type == "turn_finished"] \
        == ["fine"]


def test_arguments_that_are_not_json_are_shown_as_the_model_wrote_them() -> None:
    provider = Broken([ToolCallStart(0, "c1", "lookup"), ToolCallDelta(0, "{q: x"),
                       StreamEnd("tool_use")])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("look"))
    shown = next(e for e in events if e.type == "tool_call")
    assert shown.arguments == "{q: x"
    result = next(e for e in events if e.type == "tool_result")
    assert result.status == "refused" and "not JSON" in result.content


def test_the_final_phase_is_said_once_in_the_last_system_text() -> None:
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 1}}]}, "bye"])
    agent = Agent(workflow(), provider, tools=TOOLS, approve=None)
    session = agent.session_sync("s")
    collect(session.send("pay 1"))
    pending = session.pending_approval
    assert pending is not None
    collect(session.resolve(pending.call_id, "approve"))
    assert session.status == "finished"
    last = provider.told()
    assert last.count("This is the final phase.") == 1


def test_max_output_tokens_goes_with_every_request() -> None:
    provider = ScriptedProvider([{"calls": [{"lookup": {"q": "x"}}]}, "ok"])
    session = Agent(workflow(), provider, tools=TOOLS, max_output_tokens=64).session_sync("s")
    collect(session.send("look"))
    assert [r.max_output_tokens for r in provider.requests] == [64, 64]


def test_the_approval_policy_judges_a_call_under_the_id_the_session_gives_it() -> None:
    """A model that sends calls without ids: the host's policy is asked about the call
    under the id it then has in the history and in the pending approval (never a
    provisional one), so a policy that keys on the id means the call that waits."""
    seen: list[str] = []

    def policy(call: Any, ctx: Any) -> bool:
        seen.append(f"{call.id}={ctx.call_id}")
        return call.name == "lookup"

    class NoIds:
        def __init__(self) -> None:
            self.calls = 0

        async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
            self.calls += 1
            if self.calls == 1:
                yield ToolCallStart(0, "", "lookup")
                yield ToolCallDelta(0, '{"q": "a"}')
                yield StreamEnd(stop="tool_use")
            else:
                yield TextDelta("done")
                yield StreamEnd()

    agent = Agent(workflow(), NoIds(), tools=TOOLS, approve=policy)
    session = agent.session_sync("ids")
    collect(session.send("look it up"))
    pending = session.pending_approval
    assert pending is not None
    assert seen == [f"{pending.call_id}={pending.call_id}"]
    assert pending.call_id == "call_1_1_0"
    history_ids = [c.id for m in session.history for c in getattr(m, "tool_calls", ())]
    assert history_ids == [pending.call_id]
