"""What a request holds and in what order (docs/sessions.md, What a request holds): the
stable system text first, the tools, the history, and the phase's changing block last."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from phaseflow.api import load_workflow_text
from phaseflow.errors import ConfigError
from phaseflow.providers.chat_wire import names_of, request_messages
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores import MemoryStore
from phaseflow.turn.messages import (
    AssistantMessage,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import itertools

import bench_cache

HOST = "You are the desk."


def _agent(replies: list[object], **options: str) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider(replies)
    agent = Agent(load_workflow_text(bench_cache.WORKFLOW), provider, tools=bench_cache.TOOLS,
                  store=MemoryStore(), system=HOST, **options)  # type: ignore[arg-type]
    return agent, provider


def _log(n: int) -> dict[str, object]:
    return {"calls": [{"log_item": {"n": n, "text": f"item {n}"}}]}


def test_the_phase_block_goes_after_the_history_never_into_it() -> None:
    agent, provider = _agent([_log(1), "Noted."])
    session = agent.session_sync("s")
    assert session.reply_sync("The export failed") == "Noted."
    first, second = provider.requests
    assert first.system == second.system == HOST
    assert "Current phase: intake" in first.context
    assert "Items logged so far: 0" in first.context
    assert "Items logged so far: 1; the last: item 1" in second.context
    messages = request_messages(second, names_of(second))
    assert messages[0] == {"role": "system", "content": HOST}
    assert messages[-1] == {"role": "system", "content": second.context}
    assert [m["role"] for m in messages[1:-1]] == ["user", "assistant", "tool"]
    # the history the session keeps has no trace of either block
    assert all("Items logged" not in str(m.content) for m in session.history)


def test_context_position_system_keeps_one_system_message() -> None:
    agent, provider = _agent([_log(1), "Noted."], context_position="system")
    agent.session_sync("s").reply_sync("The export failed")
    request = provider.requests[-1]
    assert request.context == ""
    assert request.system.startswith(HOST + "\n\n")
    assert "Items logged so far: 1" in request.system
    messages = request_messages(request, names_of(request))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert provider.told() == request.system


def test_bad_layout_options_are_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="context_position must be 'end' or 'system'"):
        _agent([], context_position="first")
    with pytest.raises(ConfigError, match="offer_tools must be 'phase' or 'workflow'"):
        _agent([], offer_tools="all")


def _request(*history: object, context: str = "BLOCK") -> ProviderRequest:
    return ProviderRequest(model="m", system=HOST, history=tuple(history),  # type: ignore[arg-type]
                           tools=(), request_id="r", context=context)


def test_inline_context_joins_the_last_user_or_tool_message() -> None:
    call = ToolCall("c1", "log_item", "{}")
    cases = [
        (_request(UserMessage("hi")), {"role": "user", "content": "hi\n\nBLOCK"}),
        (_request(UserMessage((TextPart("hi"),))),
         {"role": "user", "content": [{"type": "text", "text": "hi"},
                                      {"type": "text", "text": "BLOCK"}]}),
        (_request(UserMessage("hi"), AssistantMessage("", (call,)),
                  ToolResultMessage("c1", "ok")),
         {"role": "tool", "tool_call_id": "c1", "content": "ok\n\nBLOCK"}),
        (_request(UserMessage("hi"), AssistantMessage("Sure")),
         {"role": "user", "content": "BLOCK"}),
    ]
    for request, last in cases:
        inline = request_messages(request, names_of(request), "inline")
        assert inline[-1] == last
        assert inline[0] == {"role": "system", "content": HOST}
        assert sum(m["role"] == "system" for m in inline) == 1
    empty = _request(UserMessage("hi"), context="")
    assert request_messages(empty, names_of(empty)) == request_messages(
        empty, names_of(empty), "inline")


def test_every_tool_offered_the_phase_still_decides_what_runs() -> None:
    agent, provider = _agent([{"calls": [{"apply_fix": {"fix": "restart"}}]}, "Sorry."],
                             offer_tools="workflow")
    session = agent.session_sync("s")
    session.reply_sync("Fix it")
    first = provider.requests[0]
    assert [t.name for t in first.tools] == ["log_item", "find_account", "run_check",
                                             "apply_fix", "send_summary"]
    assert ("only these may be called in this phase (any other is refused): "
            "log_item, find_account.") in first.context
    result = session.history[2]
    assert isinstance(result, ToolResultMessage)
    assert "not available in this phase" in str(result.content)
    assert session.state["count"] == 0


def _without_block(request: ProviderRequest) -> str:
    return bench_cache.prompt_text(replace(request, context=""))


def test_a_phase_change_that_keeps_the_tools_keeps_the_whole_prefix() -> None:
    recorded = asyncio.run(bench_cache.converse("end+workflow"))
    requests = [r for _, r in recorded.requests]
    assert all(r.tools == requests[0].tools for r in requests)
    phases = {line for r in requests for line in r.context.splitlines()
              if line.startswith("Current phase:")}
    assert len(phases) == 4  # the conversation crosses three phase changes
    for previous, current in itertools.pairwise(requests):
        # the cache covers the previous request up to its trailing block
        assert bench_cache.prompt_text(current).startswith(_without_block(previous))


def test_with_the_phases_tools_only_a_phase_change_loses_the_prefix() -> None:
    recorded = asyncio.run(bench_cache.converse("end"))
    requests = [r for _, r in recorded.requests]
    kept = [bench_cache.prompt_text(cur).startswith(_without_block(prev))
            for prev, cur in itertools.pairwise(requests)]
    changed = [prev.tools != cur.tools for prev, cur in itertools.pairwise(requests)]
    assert sum(changed) == 3
    assert kept == [not c for c in changed]


def test_every_tool_offered_includes_the_workflows_it_calls_and_hands_off_to() -> None:
    # triage hands off to the billing desk, which calls the identity check: their
    # tools are offered from the first request on, and stay the same inside the call
    from phaseflow.api import load_workflow

    root = Path(__file__).resolve().parents[2] / "workflows" / "desks"
    tools = {"crm.lookup_customer": lambda email: {"customer_id": "C-1"},
             "crm.verify_identity": lambda answer: {"verified": True},
             "billing.find_invoice": lambda: {"invoice_id": "I-1"}}
    provider = ScriptedProvider([
        {"calls": [{"record": {"email": "ada@example.com", "topic": "billing"}}]},
        {"calls": [{"crm.lookup_customer": {"email": "ada@example.com"}}]}, "Your pet?"])
    agent = Agent(load_workflow(str(root / "triage.yaml")), provider, tools=tools,
                  store=MemoryStore(), offer_tools="workflow")
    session = agent.session_sync("s")
    session.reply_sync("Hi, it's ada@example.com, about an invoice")
    assert list(session.path) == ["billing-desk", "verify", "identity-check", "question"]
    names = [t.name for t in provider.requests[0].tools]
    assert names == ["crm.lookup_customer", "crm.verify_identity", "billing.find_invoice",
                     "go_to_phase", "record"]
    assert all(r.tools == provider.requests[0].tools for r in provider.requests)
    # inside the call the phase's own tool is the one allowed
    assert "only these may be called in this phase (any other is refused): " \
           "crm.lookup_customer" in provider.requests[1].context
