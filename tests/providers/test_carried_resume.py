"""What a provider needs back survives a crash: a worker killed after Claude's thinking
reply was stored and before its tool result, recovered by another process's worker, sends
the thinking block and its signature back unchanged (from the SQLite store's codec, not
from memory); the same conversation continued on another wire drops them and keeps the
visible text and calls."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import phaseflow
from phaseflow.providers import AnthropicProvider, OpenAIResponsesProvider
from phaseflow.session import Agent
from phaseflow.stores import SQLiteStore
from phaseflow.tools import tool
from tests.support.phaseflow_cli import cli_env
from tests.support.wire_scripts import anthropic_reply, responses_reply
from tests.support.wire_servers import WireServer

pytest.importorskip("anthropic")

WORKFLOW = """\
phaseflow: 1
name: finder
initial: find
phases:
  find:
    goal: Find the customer.
    tools: [lookup]
"""

THINKING = {"type": "thinking", "thinking": "Look Ada up first.",
            "signature": "EqQBCkYIBRgCKkCN0+/sig=="}

WORKER = textwrap.dedent("""
    import asyncio, os, signal, sys
    import phaseflow
    from phaseflow.providers import AnthropicProvider
    from phaseflow.session import Agent
    from phaseflow.stores import SQLiteStore
    from phaseflow.tools import tool

    @tool
    def lookup(q: str) -> str:
        \"\"\"Look someone up.\"\"\"
        os.kill(os.getpid(), signal.SIGKILL)  # the crash: the result is never stored
        return "never"

    async def main() -> None:
        workflow_text, url, store = sys.argv[1:]
        agent = Agent(phaseflow.load_workflow_text(workflow_text),
                      AnthropicProvider("claude-test", base_url=url, api_key="k-loop"),
                      tools=[lookup], store=SQLiteStore(store))
        session = await agent.session("s")
        async for _ in session.send("Find Ada"):
            pass

    asyncio.run(main())
""")


@tool
def lookup(q: str) -> str:
    """Look someone up."""
    return f"{q}: customer C-1"


def _first_reply() -> list[object]:
    return anthropic_reply("Looking.", [("toolu_1", "lookup", '{"q": "ada"}')],
                           thinking=[(THINKING["thinking"], THINKING["signature"])])


def test_a_crash_before_the_tool_result_resumes_with_the_thinking_block_unchanged(
        tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    with WireServer("anthropic") as server:
        server.push(_first_reply(), anthropic_reply("Ada is customer C-1."))
        proc = subprocess.run([sys.executable, "-c", WORKER, WORKFLOW, server.base_url,
                               str(store)], env=cli_env(), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == -9, proc.stderr  # killed inside the tool
        assert len(server.requests) == 1
        agent = Agent(phaseflow.load_workflow_text(WORKFLOW),
                      AnthropicProvider("claude-test", base_url=server.base_url,
                                        api_key="k-loop"),
                      tools=[lookup], store=SQLiteStore(str(store)))
        session = agent.session_sync("s")
        events = session.recover_sync(force=True)
        assert [e.reply for e in events if e.type == "turn_finished"] == [
            "Ada is customer C-1."]
        assert len(server.requests) == 2
        messages = server.requests[1].body["messages"]
    assistant = messages[1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == THINKING  # text and signature, unchanged
    assert assistant["content"][1:] == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "ada"}}]
    result = messages[2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"


def test_another_wire_gets_the_visible_text_and_calls_without_the_thinking(
        tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "sessions.db"))
    workflow = phaseflow.load_workflow_text(WORKFLOW)
    with WireServer("anthropic") as claude, WireServer("responses") as gpt:
        claude.push(_first_reply(), anthropic_reply("Ada is customer C-1."))
        first = Agent(workflow, AnthropicProvider("claude-test", base_url=claude.base_url,
                                                  api_key="k"), tools=[lookup], store=store)
        first.session_sync("s").reply_sync("Find Ada")
        gpt.push(responses_reply("You're welcome."))
        second = Agent(workflow, OpenAIResponsesProvider("gpt-test", base_url=gpt.base_url,
                                                         api_key="k"),
                       tools=[lookup], store=store)
        assert second.session_sync("s").reply_sync("Thanks") == "You're welcome."
        sent = gpt.requests[0].body["input"]
    assert not [i for i in sent if i.get("type") == "reasoning"]
    assert "Look Ada up first." not in json.dumps(sent)
    assert {"role": "assistant", "content": "Looking."} in sent
    assert {"type": "function_call", "call_id": "toolu_1", "name": "lookup",
            "arguments": '{"q":"ada"}'} in sent
