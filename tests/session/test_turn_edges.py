"""A turn's edges, as a host and a user see them: a reply cut at the model's output
limit is continued and stitched (or ends its turn ``cut``), and a request refused as
larger than the model's context is recovered by a compaction and sent again, once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.session import Agent, TurnFailed
from phaseflow.session import events as ev
from phaseflow.session.compaction import SUMMARY_HEADING, history_chars
from phaseflow.stores import SQLiteStore
from phaseflow.turn.messages import AssistantMessage
from tests.support.phaseflow_cli import cli_env, run_phaseflow

WORKFLOW = """\
phaseflow: 1
name: talk
initial: talk
phases:
  talk:
    goal: Talk.
"""


def agent(provider: Any, **options: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), provider, **options)


# --- a reply cut at the output limit ---------------------------------------------------


def test_a_cut_reply_is_continued_and_its_parts_are_one_message() -> None:
    provider = ScriptedProvider([{"text": "One, two,", "stop": "max_tokens"},
                                 {"text": " three,", "stop": "max_tokens"},
                                 " four.", "Next."])
    session = agent(provider).session_sync("s")
    events = list(session.send_sync("count"))
    reply = session.reply_sync("and?")
    finished = [e for e in events if isinstance(e, ev.TurnFinished)]
    assert [(e.status, e.reply) for e in finished] == [("completed", "One, two, three, four.")]
    assert [(e.continuation, e.of) for e in events if isinstance(e, ev.ReplyContinued)] == [
        (1, 2), (2, 2)]
    assert not [e for e in events if isinstance(e, ev.ErrorEvent)]
    # the model was sent what it said so far each time, and asked to go on
    asked = provider.requests[2]
    assert [m.role.value for m in asked.history] == ["user", "assistant", "user"]
    assert asked.history[1].content == "One, two, three,"
    assert "Continue" in str(asked.history[2].content)
    # one message, marked: the next turn's reply is the script's next (the count holds)
    assistants = [m for m in session.transcript if isinstance(m, AssistantMessage)]
    assert [(m.content, m.continued) for m in assistants] == [
        ("One, two, three, four.", 2), ("Next.", 0)]
    assert reply == "Next." and reply.status == "completed"


def test_a_reply_still_cut_after_the_last_continuation_ends_the_turn_cut() -> None:
    provider = ScriptedProvider([{"text": "Part one", "stop": "max_tokens"},
                                 {"text": " and two", "stop": "max_tokens"}, "Fine."])
    session = agent(provider, max_continuations=1).session_sync("s")
    reply = session.reply_sync("go")
    assert reply == "Part one and two" and reply.status == "cut"  # never "completed"
    errors = [e for e in session.events_sync() if isinstance(e, ev.ErrorEvent)]
    assert [e.code for e in errors] == ["max_tokens"]
    assert "after 1 continuation" in errors[0].message
    assert session.status == "idle"
    assert session.reply_sync("again") == "Fine."


def test_max_continuations_zero_ends_a_cut_reply_at_once() -> None:
    provider = ScriptedProvider([{"text": "Cut", "stop": "max_tokens"}])
    session = agent(provider, max_continuations=0).session_sync("s")
    reply = session.reply_sync("go")
    assert (reply, reply.status) == ("Cut", "cut")
    assert len(provider.requests) == 1


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_max_continuations_must_be_a_count(bad: Any) -> None:
    with pytest.raises(ConfigError, match="max_continuations"):
        agent(ScriptedProvider([]), max_continuations=bad)


def test_a_continuation_interrupted_by_a_crash_goes_on_from_the_stored_part(
        tmp_path: Path) -> None:
    """The worker stops while the continuation is asked: reopened, the session asks the
    model to go on from the part that was committed, and stitches the rest."""
    path = tmp_path / "s.db"

    class Hangs:
        def __init__(self) -> None:
            self.inner = ScriptedProvider([{"text": "Alpha", "stop": "max_tokens"}])
            self.asked = asyncio.Event()

        async def stream(self, request: ProviderRequest) -> Any:
            if len(request.history) > 1:  # the continuation: the worker dies here
                self.asked.set()
                await asyncio.sleep(3600)
            async for item in self.inner.stream(request):
                yield item

    async def crash_while_continuing() -> None:
        hangs = Hangs()
        session = await agent(hangs, store=SQLiteStore(path)).session("s")
        run = asyncio.ensure_future(session.reply("go"))
        await hangs.asked.wait()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)

    asyncio.run(crash_while_continuing())
    provider = ScriptedProvider([{"text": "Alpha", "stop": "max_tokens"}, " beta."])
    again = agent(provider, store=SQLiteStore(path)).session_sync("s")
    assert again.status == "running"
    again.recover_sync()
    assert [m.content for m in again.transcript if isinstance(m, AssistantMessage)] == [
        "Alpha beta."]
    assert len(provider.requests) == 1  # only the continuation was asked again
    assert again.status == "idle"


def test_a_conversation_test_scripts_a_cut_reply(tmp_path: Path) -> None:
    """``model: {text: ..., stop: max_tokens}`` in a conversation test, run by
    ``phaseflow test`` as a user runs it: the parts are one reply."""
    (tmp_path / "talk.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "talk.test.yaml").write_text("""\
phaseflow-test: 1
workflow: talk.yaml
scenarios:
  - name: "conversation: a long answer"
    conversation:
      - user: "tell me everything"
      - model: {text: "The policy is", stop: max_tokens}
      - model: " thirty days."
      - expect: {reply: "The policy is thirty days.", status: idle}
""", encoding="utf-8")
    done = run_phaseflow("test", "talk.test.yaml", cwd=tmp_path, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "bad.test.yaml").write_text("""\
phaseflow-test: 1
workflow: talk.yaml
scenarios:
  - name: "conversation: a wrong stop"
    conversation:
      - user: "hi"
      - model: {text: "x", stop: length}
""", encoding="utf-8")
    bad = run_phaseflow("test", "bad.test.yaml", cwd=tmp_path, env=cli_env(), timeout=120)
    assert bad.returncode != 0
    assert "stop is one of end_turn, tool_use, max_tokens" in bad.stdout + bad.stderr


def test_run_continues_a_cut_reply_and_says_when_the_turn_ends_cut(tmp_path: Path) -> None:
    (tmp_path / "talk.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text("""\
- {text: "First part", stop: max_tokens}
- {text: " and more", stop: max_tokens}
""", encoding="utf-8")
    done = run_phaseflow("run", "talk.yaml", "--provider", "scripted:script.yaml",
                         "--store", "memory", "--max-continuations", "1", "-m", "go",
                         cwd=tmp_path, env=cli_env(), timeout=120)
    assert "[reply cut at the output limit: continuing (1 of 1)]" in done.stdout
    assert "[turn cut]" in done.stdout
    assert "error max_tokens" in done.stdout
    assert done.returncode == 1, done.stdout + done.stderr
    bad = run_phaseflow("run", "talk.yaml", "--provider", "scripted:script.yaml",
                        "--store", "memory", "--max-continuations", "-3", "-m", "go",
                        cwd=tmp_path, env=cli_env(), timeout=120)
    assert bad.returncode == 2 and "--max-continuations" in bad.stderr


# --- a full context --------------------------------------------------------------------

FULL = {"error": "This model's maximum context length is 512 tokens",
        "status": 400, "code": "context_length_exceeded"}


def chat(turns: int) -> list[Any]:
    return [f"reply {n} " + "y" * 60 for n in range(1, turns + 1)]


def test_a_full_context_is_compacted_and_the_request_sent_again() -> None:
    """No compaction is configured: the session compacts with the agent's own provider,
    says so, and the same request, sent again with the summary, is answered."""
    provider = ScriptedProvider([*chat(4), FULL, "reply 5"])
    session = agent(provider).session_sync("s")
    for n in range(1, 5):
        session.reply_sync(f"turn {n} " + "x" * 60)
    reply = session.reply_sync("turn 5")
    assert reply == "reply 5" and reply.status == "completed"
    events = [e for e in session.events_sync() if e.turn == 5]
    notice = next(e for e in events if isinstance(e, ev.ErrorEvent))
    assert notice.code == "context_full"
    assert "by the agent's own provider (no compaction is configured" in notice.message
    assert "maximum context length is 512 tokens" in notice.message
    assert any(isinstance(e, ev.HistoryCompacted) for e in events)
    refused, resent = [r for r in provider.requests if r.purpose == "turn"][-2:]
    assert str(resent.history[0].content).startswith(SUMMARY_HEADING)
    assert history_chars(resent.history) < history_chars(refused.history)
    assert resent.history[-1] == refused.history[-1]  # the same request
    assert len(session.transcript) == 10  # nothing lost


def test_a_context_still_full_after_the_compaction_fails_the_turn_naming_size_and_budget(
        ) -> None:
    provider = ScriptedProvider([*chat(4), FULL, FULL, "reply 5"])
    session = agent(provider, max_history_tokens=10_000).session_sync("s")
    for n in range(1, 5):
        session.reply_sync(f"turn {n} " + "x" * 60)
    with pytest.raises(TurnFailed) as failed:
        session.reply_sync("turn 5")
    assert "context_length_exceeded" in failed.value.error
    message = failed.value.error
    assert "still larger than the model's context" in message
    assert "tokens of history, for a budget of" in message
    notice = next(e for e in session.events_sync()
                  if isinstance(e, ev.ErrorEvent) and e.code == "context_full")
    assert "own provider" not in notice.message  # the budget's compaction, configured
    assert session.status == "failed"
    assert [r.purpose for r in provider.requests].count("compaction") == 1  # once


def test_a_full_context_with_nothing_to_fold_fails_at_once() -> None:
    provider = ScriptedProvider([FULL, "never"])
    session = agent(provider).session_sync("s")
    with pytest.raises(TurnFailed, match="cannot be compacted further"):
        session.reply_sync("x" * 4000)
    assert [r.purpose for r in provider.requests] == ["turn"]
