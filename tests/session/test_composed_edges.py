"""A turn's edges inside a called workflow, as at the top: a cut reply continued, a full
context recovered (with the call's ``history: since_call`` and ``summary``), trust
granted, approved and revoked, a long output read back (in the callee, and in the
caller after the call returned), a cancel that waits for its tool, a hook's transcript
and an image in a message. Through the public API, ``phaseflow run``, ``phaseflow
sessions`` and a real ``phaseflow serve``; the tree is :mod:`tests.support.composed_desk`
(a caller with a catalogue of its own, so that what reads only the top workflow's
catalogue misses the callee's tools)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from phaseflow import Agent, ScriptedProvider, SQLiteStore
from phaseflow.errors import ConfigError
from phaseflow.session import events as ev
from phaseflow.session.compaction import SUMMARY_HEADING
from phaseflow.stores.base import capture_owner
from phaseflow.turn.messages import AssistantMessage, MediaPart, TextPart, UserMessage
from tests.support.composed_desk import (
    AFTER,
    AGAIN,
    CLOSE,
    ENTER,
    INSIDE,
    LOG,
    PNG,
    Desk,
    project,
    tree,
)
from tests.support.phaseflow_cli import cli_env, run_phaseflow


def agent(
    folder: Path, script: list[Any], host: Desk | None = None, history: str = "full", **options: Any
) -> tuple[Agent, ScriptedProvider, Desk]:
    host = host or Desk()
    model = ScriptedProvider(script)
    return (
        Agent(tree(folder, history), model, tools=host.tools(), hooks=host.hooks(), **options),
        model,
        host,
    )


def reference(session_id: str, data: str = LOG) -> str:
    return f"{capture_owner(session_id)}-{hashlib.sha256(data.encode()).hexdigest()}"


# --- the tree's tools are the agent's, wherever they are declared ----------------------


def test_the_callee_s_tools_are_checked_offered_and_run_with_their_catalogue_entries(
    tmp_path: Path,
) -> None:
    desk, model, host = agent(tmp_path, [ENTER, "In.", "Fine."], offer_tools="workflow")
    assert desk.missing_tools() == ()
    partial = Agent(
        tree(tmp_path), ScriptedProvider([]), tools=host.tools()[:2], hooks=host.hooks()
    )
    assert partial.missing_tools() == ("orders.refund", "slow.block")
    session = desk.session_sync("w")
    session.reply_sync("Hi")
    session.reply_sync("Inside now")
    assert session.path == INSIDE
    # offer_tools="workflow": every tool of the tree, in every request
    offered = [[t.name for t in r.tools] for r in model.requests]
    for names in offered:
        assert {"desk.hello", "logs.dump", "orders.refund", "slow.block"} <= set(names), names
    record = next(t for t in model.requests[-1].tools if t.name == "record")
    assert set(record.parameters["properties"]) == {"go", "again", "closed"}  # the callee's too
    # a hook a callee calls is checked when the agent is made, as the caller's are
    with pytest.raises(ConfigError, match="summarise"):
        Agent(tree(tmp_path), ScriptedProvider([]), tools=host.tools())
    # and so is a callee's tool against the ``parameters`` its own catalogue declares
    work = tmp_path / "work.yaml"
    work.write_text(work.read_text(encoding="utf-8").replace(
        "  orders.refund: {description: Refund an order., approval: always}",
        "  orders.refund:\n    approval: always\n    parameters:\n      type: object\n"
        "      properties: {order: {type: string}}"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"orders\.refund.*'order'"):
        Agent(tmp_path / "desk.yaml", ScriptedProvider([]), tools=host.tools(),
              hooks=host.hooks())
    # a host tool that no workflow of the tree declares is refused, naming the tree's
    with pytest.raises(ConfigError, match="not in the workflow's catalogue: stray"):
        Agent(tree(tmp_path), ScriptedProvider([]), tools={**desk.tools, "stray": len},
              hooks=host.hooks())


# --- a cut reply --------------------------------------------------------------------


def test_a_cut_reply_inside_a_callee_is_continued_and_ends_cut_after_the_last(
    tmp_path: Path,
) -> None:
    script = [
        ENTER,
        "In.",
        {"text": "One, two,", "stop": "max_tokens"},
        " three.",
        {"text": "Part one", "stop": "max_tokens"},
        {"text": " and two", "stop": "max_tokens"},
    ]
    desk, _, _ = agent(tmp_path, script, max_continuations=1)
    session = desk.session_sync("c")
    session.reply_sync("Hi")
    assert session.path == INSIDE
    events = list(session.send_sync("count"))
    assert [(e.status, e.reply) for e in events if isinstance(e, ev.TurnFinished)] == [
        ("completed", "One, two, three.")
    ]
    assert [(e.continuation, e.of) for e in events if isinstance(e, ev.ReplyContinued)] == [(1, 1)]
    cut = session.reply_sync("more")
    assert (cut, cut.status) == ("Part one and two", "cut")
    assert session.path == INSIDE and session.status == "idle"
    parts = [
        (m.content, m.continued)
        for m in session.transcript
        if isinstance(m, AssistantMessage) and m.content
    ]
    assert parts[-2:] == [("One, two, three.", 1), ("Part one and two", 1)]


# --- a full context -------------------------------------------------------------------

FULL = {
    "error": "This model's maximum context length is 512 tokens",
    "status": 400,
    "code": "context_length_exceeded",
}


def chat(turns: int) -> list[Any]:
    return [f"reply {n} " + "y" * 60 for n in range(1, turns + 1)]


@pytest.mark.parametrize("history", ["full", "since_call", "summary"])
def test_a_full_context_inside_a_callee_is_compacted_and_sent_again(
    tmp_path: Path, history: str
) -> None:
    desk, model, _ = agent(
        tmp_path, [ENTER, "In.", *chat(4), FULL, "reply 5", "reply 6"], history=history
    )
    session = desk.session_sync("f")
    session.reply_sync("Top secret before the call " + "z" * 40)
    for n in range(1, 5):
        session.reply_sync(f"turn {n} " + "x" * 60)
    assert session.path == INSIDE
    reply = session.reply_sync("turn 5")
    assert (reply, reply.status) == ("reply 5", "completed")
    notice = next(
        e
        for e in session.events_sync()
        if isinstance(e, ev.ErrorEvent) and e.code == "context_full"
    )
    assert "own provider" in notice.message
    turns = [r for r in model.requests if r.purpose == "turn"]
    refused, resent = turns[-2:]
    assert resent.history[-1] == refused.history[-1] == UserMessage("turn 5")
    told = [str(m.content) for m in resent.history]
    assert any(SUMMARY_HEADING in t for t in told), told
    # what the call's history mode lets through is what it let through before
    assert len(resent.history) < len(refused.history)
    # the next request, inside the callee, still carries what was said since the fold
    assert session.reply_sync("turn 6") == "reply 6"
    last = [str(m.content) for m in model.requests[-1].history]
    assert last[-1] == "turn 6" and "reply 5" in last and "turn 5" in last, last
    assert any(SUMMARY_HEADING in t for t in last), last
    assert session.path == INSIDE


@pytest.mark.parametrize("history", ["since_call", "summary"])
def test_a_call_s_history_after_a_compaction_keeps_what_was_said_in_the_call(
    tmp_path: Path, history: str
) -> None:
    """A fold that ends before the call began: the requests carry the messages since the
    call (found after the summary, not at the uncompacted history's index); a later fold
    that reaches into the call keeps its summary first (which may mention what was said
    before the call: a summary is not cut at the call's start)."""
    script = ["Before.", ENTER, "In.", "Inside one.", "Inside two.", "Inside three."]
    desk, model, _ = agent(tmp_path, script, history=history)
    session = desk.session_sync("m")
    session.reply_sync("Top secret before the call")
    session.reply_sync("Now the work desk")
    assert session.path == INSIDE
    assert [e.type for e in session.compact_sync()] == ["history_compacted"]
    assert session.reply_sync("first inside") == "Inside one."
    told = [str(m.content) for m in model.requests[-1].history]
    assert told[-2:] == ["In.", "first inside"], told
    assert not any("Top secret" in t or SUMMARY_HEADING in t for t in told), told
    if history == "summary":  # what came before the call, in short
        assert "Now the work desk" in told[0], told
    assert session.reply_sync("second inside") == "Inside two."
    session.compact_sync()  # folds the call's first turns, too
    assert session.reply_sync("third inside") == "Inside three."
    told = [str(m.content) for m in model.requests[-1].history]
    assert told[0].startswith(SUMMARY_HEADING), told
    assert told[1:] == ["second inside", "Inside two.", "third inside"], told
    assert session.path == INSIDE


# --- trust ----------------------------------------------------------------------------


def _refund(order_id: str) -> dict[str, Any]:
    return {"calls": [{"orders.refund": {"order_id": order_id}}]}


def test_trust_inside_a_callee_is_the_session_s_and_holds_after_the_call_returned(
        tmp_path: Path) -> None:
    """Trust is keyed by tool name across the whole tree: a session-wide approval given
    inside the callee covers the same call later, a host grant covers any arguments, and
    both stay with the session after the callee returned: the callee called again runs
    the same call without asking, until the trust is revoked."""
    script = [ENTER, "In.", _refund("O-1"), "one", _refund("O-1"), "again",
              _refund("O-2"), "two", CLOSE, "Closed.", AGAIN, "Back in.",
              _refund("O-1"), "three", _refund("O-1"), "asked"]
    desk, _, host = agent(tmp_path, script)
    session = desk.session_sync("t")
    session.reply_sync("Hi")
    waiting = session.reply_sync("Refund O-1")
    assert waiting.status == "awaiting_approval" and session.path == INSIDE
    session.approve_sync(waiting.approval.call_id, scope="session")  # type: ignore[union-attr]
    (entry,) = session.trust()
    assert (entry.tool, entry.covers, entry.scope) == ("orders.refund", "same_arguments",
                                                       "session")
    assert session.reply_sync("Refund O-1 again").status == "completed"
    session.grant_trust_sync("orders.refund")
    assert session.reply_sync("Refund O-2").status == "completed"
    assert host.refunded == ["O-1", "O-1", "O-2"]
    session.reply_sync("Close it")
    assert session.path == AFTER
    assert {(t.tool, t.covers) for t in session.trust()} == {
        ("orders.refund", "same_arguments"), ("orders.refund", "any_arguments")}
    assert session.reply_sync("One more refund, please") == "Back in."
    assert session.path == INSIDE  # the same callee, called again
    assert session.reply_sync("Refund O-1").status == "completed"  # without asking
    session.revoke_trust_sync("orders.refund")
    assert session.trust() == ()
    assert session.reply_sync("Refund O-1 once more").status == "awaiting_approval"
    assert host.refunded == ["O-1", "O-1", "O-2", "O-1"]
    changes = [(e.change, e.tool) for e in session.events_sync()  # type: ignore[union-attr]
               if e.type == "trust_changed"]
    assert changes == [("granted", "orders.refund"), ("revoked", "orders.refund")]


def test_a_host_grants_a_callee_tool_before_the_first_call(tmp_path: Path) -> None:
    host = Desk()
    desk, _, _ = agent(
        tmp_path, [ENTER, "In.", _refund("O-7"), "done"], host, trusted_tools=["orders.refund"]
    )
    session = desk.session_sync("g")
    assert [t.tool for t in session.trust()] == ["orders.refund"]
    session.reply_sync("Hi")
    assert session.reply_sync("Refund O-7").status == "completed"
    assert host.refunded == ["O-7"] and session.path == INSIDE


def test_sessions_trust_revokes_a_callee_tool_s_trust(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    desk, _, _ = agent(tmp_path, [ENTER, "In.", _refund("O-1"), "one"], store=SQLiteStore(path))
    session = desk.session_sync("cli")
    session.reply_sync("Hi")
    waiting = session.reply_sync("Refund O-1")
    session.approve_sync(waiting.approval.call_id, scope="session")  # type: ignore[union-attr]
    env = cli_env()

    def cli(*args: str) -> Any:
        return run_phaseflow(
            "sessions", *args, "--store", str(path), cwd=tmp_path, env=env, timeout=120
        )

    listed = cli("trust", "cli", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["tool"] for t in json.loads(listed.stdout)] == ["orders.refund"]
    revoked = cli("trust", "cli", "--revoke", "orders.refund")
    assert revoked.returncode == 0 and "revoked every trust of 'orders.refund'" in revoked.stderr
    again, _, _ = agent(
        tmp_path,
        [ENTER, "In.", _refund("O-1"), "one", _refund("O-1"), "asked"],
        store=SQLiteStore(path),
    )
    reopened = again.session_sync("cli")
    assert reopened.path == INSIDE
    assert reopened.reply_sync("Refund O-1 again").status == "awaiting_approval"


# --- a long output read back ------------------------------------------------------------


def test_an_output_captured_in_a_callee_is_read_there_and_in_the_caller_after_return(
    tmp_path: Path,
) -> None:
    ref = reference("o")
    script = [
        ENTER,
        "In.",
        {"calls": [{"logs.dump": {}}]},
        {"calls": [{"read_output": {"reference": ref, "offset": 100, "limit": 50}}]},
        "Read inside.",
        CLOSE,
        "Closed.",
        {"calls": [{"read_output": {"reference": ref, "offset": 0, "limit": 40}}]},
        "Read after.",
    ]
    desk, model, _ = agent(tmp_path, script, output_lines=20)
    session = desk.session_sync("o")
    session.reply_sync("Hi")
    assert session.reply_sync("dump the logs") == "Read inside."
    assert session.reply_sync("close") == "Closed."
    assert session.path == AFTER
    assert session.reply_sync("what did the log start with?") == "Read after."
    results = [
        e
        for e in session.events_sync()
        if isinstance(e, ev.ToolResultEvent) and e.name == "read_output"
    ]
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[0].content.startswith(LOG[100:150])
    assert results[1].content.startswith(LOG[:40])
    assert "read_output" in [t.name for t in model.requests[-1].tools]
    assert session.outputs == ((ref, len(LOG)),)
    assert session.read_output_sync(ref, limit=10**6) == LOG.encode()


# --- a cancel that waits ----------------------------------------------------------------


async def _until(check: Any, patience: float = 20.0) -> None:
    deadline = time.monotonic() + patience
    while not check():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.005)


def test_a_cancel_inside_a_callee_waits_for_its_tool_s_thread(tmp_path: Path) -> None:
    """``slow.block``'s timeout is declared in the callee's catalogue only: it runs in a
    thread of its own, and the cancelled turn is ``cancelling`` until that thread ended."""
    host = Desk()
    desk, _, _ = agent(
        tmp_path, [ENTER, "In.", {"calls": [{"slow.block": {}}]}, "after the cancel"], host
    )

    async def run() -> None:
        session = await desk.session("k")
        await session.reply("Hi")
        assert session.path == INSIDE
        turn = asyncio.ensure_future(session.reply("block"))
        await _until(host.started.is_set)
        session.cancel()
        await _until(lambda: session.status == "cancelling")
        queued = await session.reply("and now?")
        assert queued.status == "queued"
        await asyncio.sleep(0.1)
        assert session.status == "cancelling" and host.log == []
        host.release.set()
        await asyncio.gather(turn, return_exceptions=True)
        events = await session.events()
        result = next(
            e for e in events if isinstance(e, ev.ToolResultEvent) and e.name == "slow.block"
        )
        assert result.status == "ok"
        assert [e.tools for e in events if isinstance(e, ev.TurnCancelling)] == [("slow.block",)]
        assert await session.reply("go on") == "after the cancel"
        assert session.path == INSIDE

    asyncio.run(run())
    assert host.log == ["effect"]


# --- hooks' transcript --------------------------------------------------------------------


def test_a_callee_s_hook_receives_the_transcript(tmp_path: Path) -> None:
    host = Desk()
    desk, _, _ = agent(tmp_path, [ENTER, "In.", "Noted.", CLOSE, "Closed."], host)
    session = desk.session_sync("h")
    session.reply_sync("Hi")
    session.reply_sync("My order is O-3")
    session.reply_sync("Close it please")
    assert session.path == AFTER
    (seen,) = host.transcripts
    assert [m["role"] for m in seen] == ["user", "assistant", "tool"]
    assert seen[0]["content"] == "Close it please"
    # the callee's hook wrote ``outcome``, which ``returns`` copied to the caller
    assert session.state["outcome"] == "Close it please"


# --- images -------------------------------------------------------------------------------


def test_an_image_in_a_message_inside_a_callee_reaches_the_provider(tmp_path: Path) -> None:
    desk, model, _ = agent(tmp_path, [ENTER, "In.", "A photo."])
    session = desk.session_sync("i")
    session.reply_sync("Hi")
    part = session.attach_sync(PNG)
    assert isinstance(part, MediaPart)
    assert session.reply_sync((TextPart("What is this?"), part)) == "A photo."
    assert session.path == INSIDE
    assert model.requests[-1].attachments == {part.token: PNG}


# --- as a user: phaseflow run, phaseflow sessions, phaseflow test, phaseflow serve ----------


def test_sessions_output_reads_a_callee_s_capture_after_the_call_returned(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    script = [ENTER, "In.", {"calls": [{"logs.dump": {}}]}, "Dumped.", CLOSE, "Closed."]
    desk, _, _ = agent(tmp_path, script, output_lines=20, store=SQLiteStore(path))
    session = desk.session_sync("cli")
    for text in ("Hi", "dump the logs", "close"):
        session.reply_sync(text)
    assert session.path == AFTER
    done = run_phaseflow("sessions", "output", "cli", reference("cli"), "--store", str(path),
                         "--offset", "5", "--limit", "4", cwd=tmp_path, env=cli_env(),
                         timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == LOG[5:9]


def test_run_attaches_an_image_and_continues_a_cut_reply_inside_a_callee(
        tmp_path: Path, fake_openai: Any) -> None:
    """``phaseflow run`` with the tools and the hook from ``--tools``/``--hooks``: the
    conversation enters the callee, ``@photo.png`` reaches the model as an image part, a
    reply cut at the output limit is continued there."""
    import base64

    from tests.support.fake_openai_server import reply, text_reply
    from tests.support.run_cli import run

    project(tmp_path)
    fake_openai.push(reply(ENTER), text_reply("In."), text_reply("A PNG."),
                     text_reply("One, two,", finish="length"), text_reply(" three."))
    done = run(tmp_path, "desk.yaml", "--tools", "desk_tools:TOOLS", "--hooks",
               "desk_tools:HOOKS", "--base-url", fake_openai.base_url, "--model", "vision",
               "--store", "memory", "-m", "Hi", "-m", "@photo.png What is this?",
               "-m", "count", env=cli_env(OPENAI_API_KEY="sk-loopback"))
    assert done.returncode == 0, done.stdout + done.stderr
    sent = [m for m in fake_openai.requests[2].body["messages"] if m["role"] == "user"]
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert sent[-1]["content"] == [{"type": "text", "text": "What is this?"},
                                   {"type": "image_url", "image_url": {"url": url}}]
    assert ("agent: One, two,\n[reply cut at the output limit: continuing (1 of 2)]\n"
            "agent:  three.\n") in done.stdout
    assert len(fake_openai.requests) == 5


@pytest.mark.parametrize("history", ["full", "since_call", "summary"])
def test_a_conversation_test_mocks_a_hook_only_the_callee_calls(tmp_path: Path,
                                                                history: str) -> None:
    """``phaseflow test``: a mock of a hook called only inside the callee is no unused
    mock, ``expect called`` names it, and the hook's result comes back through
    ``returns``; the script's replies are counted as the conversation's, whatever the
    call's ``history`` leaves out of the requests."""
    tree(tmp_path, history)
    (tmp_path / "desk.test.yaml").write_text("""\
phaseflow-test: 1
workflow: desk.yaml
mocks:
  summarise: {returns: {outcome: all done}}
scenarios:
  - name: "conversation: the callee's hook"
    conversation:
      - user: "Hi"
      - model: {calls: [{record: {go: true}}]}
      - model: "In."
      - expect: {phase: work}
      - user: "One more thing"
      - model: "Yes?"
      - expect: {reply: "Yes?"}
      - user: "Close it"
      - model: {calls: [{record: {closed: true}}]}
      - expect: {phase: after, called: [summarise], state: {outcome: all done}}
      - model: "Closed."
""", encoding="utf-8")
    done = run_phaseflow("test", "desk.test.yaml", cwd=tmp_path, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "1 passed, 0 failed" in done.stdout


def test_a_callee_s_edges_over_http_against_a_real_serve(tmp_path: Path,
                                                         fake_openai: Any) -> None:
    """``phaseflow serve --tools`` with a caller that has a catalogue of its own serves
    the callee's tools too: a long output captured in the callee is read over HTTP
    there and after the call returned, a session-wide approval given there is listed
    and holds after the return, and an image in a message reaches the model."""
    import base64

    import httpx

    from tests.support.fake_openai_server import reply, text_reply
    from tests.support.serve_server import serving

    project(tmp_path)
    args = ["desk.yaml", "--tools", "desk_tools:TOOLS", "--hooks", "desk_tools:HOOKS",
            "--provider", "openai", "--base-url", fake_openai.base_url, "--model", "m",
            "--store", str(tmp_path / "s.db")]
    as_json = {"Accept": "application/json"}
    with serving(args, tmp_path / "server.log", cwd=tmp_path,
                 env=cli_env(OPENAI_API_KEY="sk-loopback")) as server, \
            httpx.Client(base_url=server.base, timeout=60) as client:
        (listed,) = client.get("/v1/workflows").json()["workflows"]
        assert [(t["name"], t["implemented"]) for t in listed["tools"]] == [
            ("desk.hello", True), ("logs.dump", True), ("orders.refund", True),
            ("slow.block", True)]
        created = client.post("/v1/sessions", json={"workflow": "desk"})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]

        def say(text: str, *replies: Any, **extra: Any) -> dict[str, Any]:
            fake_openai.push(*replies)
            answer = client.post(f"/v1/sessions/{sid}/messages",
                                 json={"text": text, **extra}, headers=as_json)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        say("Hi", reply(ENTER), text_reply("In."))
        assert client.get(f"/v1/sessions/{sid}").json()["path"] == list(INSIDE)
        dumped = say("dump the logs", reply({"calls": [{"logs.dump": {}}]}),
                     text_reply("Dumped."))
        assert dumped["reply"] == "Dumped.", dumped
        ref = reference(sid)
        whole = client.get(f"/v1/sessions/{sid}/outputs/{ref}")
        assert whole.status_code == 200, whole.text
        assert whole.content == LOG.encode()
        waiting = say("refund O-1", reply(_refund("O-1")))
        assert waiting["status"] == "awaiting_approval", waiting
        fake_openai.push(text_reply("Refunded."))
        decided = client.post(f"/v1/sessions/{sid}/approvals/"
                              f"{waiting['pending_approval']['call_id']}",
                              json={"decision": "approve_session"}, headers=as_json)
        assert decided.status_code == 200, decided.text
        url = "data:image/png;base64," + base64.b64encode(PNG).decode()
        say("What is this?", text_reply("A PNG."), attachments=[url])
        sent = [m for m in fake_openai.requests[-1].body["messages"] if m["role"] == "user"]
        assert sent[-1]["content"][1] == {"type": "image_url", "image_url": {"url": url}}
        say("close", reply(CLOSE), text_reply("Closed."))
        assert client.get(f"/v1/sessions/{sid}").json()["path"] == list(AFTER)
        part = client.get(f"/v1/sessions/{sid}/outputs/{ref}",
                          params={"offset": 5, "limit": 4})
        assert part.status_code == 200 and part.content == LOG[5:9].encode()
        trust = client.get(f"/v1/sessions/{sid}/trust").json()["trust"]
        assert [(t["tool"], t["covers"]) for t in trust] == [
            ("orders.refund", "same_arguments")]


def test_validate_reads_an_eval_file_s_stand_ins_and_mocks_of_a_callee(tmp_path: Path) -> None:
    """``phaseflow validate``: an eval file's stand-in for a callee's tool, its mock of a
    callee's hook and ``entered`` of a callee's phase are no EV002 (the tree's catalogue,
    calls and phases); a stray tool still is."""
    tree(tmp_path)
    (tmp_path / "desk.eval.yaml").write_text(
        "phaseflow-eval: 1\nworkflow: desk.yaml\n"
        "tools:\n  logs.dump: {returns: {}}\n  logs.nope: {returns: {}}\n"
        "mocks:\n  summarise: {returns: {outcome: done}}\n"
        "scenarios:\n  - name: one\n    user: {goal: close the work}\n"
        "    expect: [\"entered('work')\", \"entered('after')\"]\n", encoding="utf-8")
    done = run_phaseflow("validate", str(tmp_path), cwd=tmp_path, env=cli_env(), timeout=120)
    warnings = [line for line in done.stdout.splitlines() if "EV002" in line]
    assert len(warnings) == 1 and "tool 'logs.nope' is not in the workflow's catalogue" in \
        warnings[0], done.stdout + done.stderr
    assert "EV001" not in done.stdout, done.stdout
