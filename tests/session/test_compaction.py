"""History compaction, as a host sees it: over ``max_history_tokens`` the oldest turns
are folded into a summary the model sees in their place; nothing is lost (the transcript
keeps every message), a tool call is never separated from its result, a failed or
interrupted compaction leaves the history as it was, and a scripted model keeps choosing
its replies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.session import Agent
from phaseflow.session import events as ev
from phaseflow.session.compaction import SUMMARY_HEADING, history_chars
from phaseflow.stores import SQLiteStore
from phaseflow.tools import tool
from phaseflow.turn.messages import AssistantMessage, ToolResultMessage, UserMessage
from tests.support.phaseflow_cli import cli_env, run_phaseflow

WORKFLOW = """\
phaseflow: 1
name: notes
initial: talk
tools:
  note: {}
phases:
  talk:
    goal: Take notes.
    tools: [note]
"""

RAN: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note."""
    RAN.append(text)
    return f"noted: {text}"


def script(turns: int) -> list[Any]:
    """Each turn: a note call, then a reply naming the turn."""
    out: list[Any] = []
    for n in range(1, turns + 1):
        out += [{"calls": [{"note": {"text": f"note {n} " + "x" * 40}}]}, f"reply {n}"]
    return out


def agent(provider: Any, **options: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), provider, tools=[note], **options)


def scripted_tokens(request: ProviderRequest) -> int:
    """The history's tokens as ScriptedProvider counts them in its usage reports."""
    return sum(-(-len(str(m.content)) // 4) for m in request.history)


def check_request(request: ProviderRequest) -> None:
    """No tool result without its call in the request, and no call without its result
    (but in the last message, whose results are not in yet)."""
    calls: set[str] = set()
    answered: set[str] = set()
    for m in request.history:
        if isinstance(m, AssistantMessage):
            calls.update(c.id for c in m.tool_calls)
        if isinstance(m, ToolResultMessage):
            assert m.call_id in calls, "a tool result was separated from its call"
            answered.add(m.call_id)
    assert calls == answered, "a call was separated from its result"


def test_a_long_conversation_is_compacted_and_nothing_is_lost() -> None:
    RAN.clear()
    provider = ScriptedProvider(script(40))
    session = agent(provider, max_history_tokens=400).session_sync("s")
    compactions: list[ev.HistoryCompacted] = []
    for n in range(1, 41):
        reply = session.reply_sync(f"turn {n}")
        assert reply == f"reply {n}"  # the scripted model keeps its place
        compactions += [e for e in session.events_sync() if isinstance(e, ev.HistoryCompacted)
                        and e not in compactions]
    assert len(compactions) >= 3
    turn_requests = [r for r in provider.requests if r.purpose == "turn"]
    for request in turn_requests:
        check_request(request)
    late = turn_requests[-10:]
    assert all(isinstance(r.history[0], UserMessage) and str(r.history[0].content)
               .startswith(SUMMARY_HEADING) for r in late)
    # the budget holds, in tokens as the model counts them (the scripted model: four
    # characters of text a token, rounded up per message) - within the estimate the
    # session makes from its usage reports
    assert max(scripted_tokens(r) for r in late) <= 400 * 1.05
    assert max(history_chars(r.history) for r in turn_requests[:4]) < max(
        history_chars(r.history) for r in late)  # (it did grow before compacting)
    expected = [f"note {n} " + "x" * 40 for n in range(1, 41)]
    assert expected == RAN  # each tool ran once
    transcript = session.transcript
    assert [m.content for m in transcript if isinstance(m, UserMessage)] == [
        f"turn {n}" for n in range(1, 41)]
    assert len(session.history) < len(transcript)
    assert str(session.history[0].content).startswith(SUMMARY_HEADING)
    summary = compactions[-1].summary
    assert "Folded" in summary and "turn" in summary  # it names what it folds


class Measured:
    """A provider that measures every request it receives, as it receives it (the
    scripted model's token count of the history), then answers as ``inner``."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self.inner = inner
        self.sizes: list[int] = []

    async def stream(self, request: ProviderRequest) -> Any:
        if request.purpose == "turn":
            self.sizes.append(scripted_tokens(request))
        async for item in self.inner.stream(request):
            yield item


def test_every_request_the_provider_receives_stays_within_the_budget() -> None:
    """The request that makes the history cross the budget is sent compacted: the
    summary is installed before that request is built (it was sent with the history as
    it was, and a server whose context is the budget refused it)."""
    provider = Measured(ScriptedProvider(script(30)))
    session = agent(provider, max_history_tokens=400).session_sync("s")
    for n in range(1, 31):
        assert session.reply_sync(f"turn {n}") == f"reply {n}"
    assert any(isinstance(e, ev.HistoryCompacted) for e in session.events_sync())
    assert len(provider.sizes) == 60
    assert max(provider.sizes) <= 400, provider.sizes


def test_a_summary_that_fails_leaves_the_history_and_the_turn_goes_on() -> None:
    class Broken:
        async def stream(self, request: ProviderRequest) -> Any:
            raise RuntimeError("summarizer down")
            yield  # pragma: no cover

    provider = ScriptedProvider(script(12))
    session = agent(provider, max_history_tokens=200,
                    compaction_provider=Broken()).session_sync("s")
    for n in range(1, 13):
        assert session.reply_sync(f"turn {n}") == f"reply {n}"
    errors = [e for e in session.events_sync() if isinstance(e, ev.ErrorEvent)]
    assert errors and all(e.code == "compaction_failed" for e in errors)
    assert "summarizer down" in errors[0].message
    assert session.history == session.transcript  # nothing folded


def test_a_compaction_interrupted_by_a_crash_leaves_the_previous_history(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    class Hangs:
        def __init__(self) -> None:
            self.asked = asyncio.Event()

        async def stream(self, request: ProviderRequest) -> Any:
            self.asked.set()
            await asyncio.sleep(3600)
            yield  # pragma: no cover

    async def crash_while_compacting() -> int:
        hangs = Hangs()
        session = await agent(ScriptedProvider(script(30)), store=SQLiteStore(path),
                              max_history_tokens=150, compaction_provider=hangs
                              ).session("s")
        turn = 0
        while True:
            turn += 1
            run = asyncio.ensure_future(session.reply(f"turn {turn}"))
            await asyncio.wait({run, asyncio.ensure_future(hangs.asked.wait())},
                               return_when=asyncio.FIRST_COMPLETED)
            if hangs.asked.is_set():
                run.cancel()  # the worker dies while the summary is being made
                await asyncio.gather(run, return_exceptions=True)
                return turn
            await run

    crashed_in = asyncio.run(crash_while_compacting())
    reopened = agent(ScriptedProvider(script(30)), store=SQLiteStore(path),
                     max_history_tokens=150).session_sync("s")
    assert reopened.history == reopened.transcript  # the fold never landed
    assert not [e for e in reopened.events_sync() if isinstance(e, ev.HistoryCompacted)]
    reopened.recover_sync()  # the turn is finished: compacted now, by the agent's model
    assert reopened.turn == crashed_in and reopened.status == "idle"
    assert [e for e in reopened.events_sync() if isinstance(e, ev.HistoryCompacted)]
    assert reopened.reply_sync(f"turn {crashed_in + 1}") == f"reply {crashed_in + 1}"


def test_the_fold_is_stored_with_the_session(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = agent(ScriptedProvider(script(20)), store=SQLiteStore(path),
                  max_history_tokens=150).session_sync("s")
    for n in range(1, 21):
        first.reply_sync(f"turn {n}")
    again = agent(ScriptedProvider(script(20)), store=SQLiteStore(path),
                  max_history_tokens=150).session_sync("s")
    assert again.history == first.history and again.transcript == first.transcript
    assert again.history != again.transcript


def test_max_history_tokens_must_be_a_positive_integer() -> None:
    for bad in (0, -5, 1.5, "100"):
        with pytest.raises(ConfigError, match="max_history_tokens"):
            agent(ScriptedProvider([]), max_history_tokens=bad)
    with pytest.raises(ConfigError, match="compaction_provider"):
        agent(ScriptedProvider([]), max_history_tokens=10, compaction_provider=object())
    with pytest.raises(ConfigError, match="compaction_prompt"):
        agent(ScriptedProvider([]), compaction_prompt=" ")


def test_run_compacts_and_sessions_show_gives_the_history_and_the_transcript(
        tmp_path: Path) -> None:
    import subprocess

    import yaml


    (tmp_path / "notes.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "notes_tools.py").write_text(
        "from phaseflow.tools import tool\n\n@tool\ndef note(text: str) -> str:\n"
        "    \"\"\"Write a note.\"\"\"\n    return 'noted: ' + text\n\nTOOLS = [note]\n",
        encoding="utf-8")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script(12)), encoding="utf-8")
    messages = [arg for n in range(1, 13) for arg in ("-m", f"turn {n}")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_phaseflow(*args, cwd=tmp_path, timeout=120, env=cli_env())

    proc = cli("run", "notes.yaml", "--provider", "scripted:script.yaml", "--tools",
               "notes_tools:TOOLS", "--store", "s.db", "--session", "s",
               "--max-history-tokens", "150", *messages)
    assert proc.returncode == 0, proc.stderr
    assert "[history compacted:" in proc.stdout
    shown = json.loads(cli("sessions", "show", "s", "--store", "s.db", "--json").stdout)
    assert len(shown["transcript"]) > len(shown["history"])
    assert shown["history"][0]["content"].startswith(SUMMARY_HEADING)
    assert [m["content"] for m in shown["transcript"] if m["role"] == "user"] == [
        f"turn {n}" for n in range(1, 13)]
    bad = cli("run", "notes.yaml", "--provider", "scripted:script.yaml", "--tools",
              "notes_tools:TOOLS", "--max-history-tokens", "0", "-m", "hi")
    assert bad.returncode == 2 and "--max-history-tokens" in bad.stderr


def test_a_host_compacts_between_turns_and_the_conversation_goes_on() -> None:
    provider = ScriptedProvider(script(4))
    session = agent(provider).session_sync("s")
    assert session.compact_sync() == ()  # nothing to fold yet
    for n in range(1, 4):
        session.reply_sync(f"turn {n}")
    events = session.compact_sync()
    assert [e.type for e in events] == ["history_compacted"]
    assert str(session.history[0].content).startswith(SUMMARY_HEADING)
    assert session.history[1] == UserMessage("turn 3")  # the last turn is kept
    assert session.reply_sync("turn 4") == "reply 4"
    assert provider.requests[-1].folded_replies == 4
    assert len(session.transcript) == 16


def test_a_host_compaction_waits_for_the_turn() -> None:
    from phaseflow.session import CompactionRefused

    session = Agent(phaseflow.load_workflow_text(WORKFLOW.replace(
        "  note: {}", "  note: {approval: always}")), ScriptedProvider(script(2)),
        tools=[note]).session_sync("s")
    session.send_sync("turn 1")
    assert session.status == "awaiting_approval"
    with pytest.raises(CompactionRefused, match="waits for the turn"):
        session.compact_sync()
