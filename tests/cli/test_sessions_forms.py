"""The printed forms of ``phaseflow sessions``, as properties: every model message has the
documented JSON shape, a timeline line is one line, a store's password is never shown;
and a session of another workflow is named, not recovered."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import phaseflow
from phaseflow.cli.main import main
from phaseflow.cli.sessions import LINE_CHARS, describe, one_line
from phaseflow.cli.stores import is_postgres, store_name
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session.records import message_json
from phaseflow.stores import SQLiteStore
from phaseflow.turn.messages import (
    AssistantMessage,
    MediaPart,
    Message,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

ROOT = Path(__file__).resolve().parents[2]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)
contents = st.text() | st.lists(
    st.builds(TextPart, st.text()) | st.builds(MediaPart, st.just("image/png"),
                                               st.text(min_size=1)), max_size=3).map(tuple)
calls = st.builds(ToolCall.of, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8),
                  st.dictionaries(st.text(max_size=5), json_values, max_size=3))
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(UserMessage, contents),
    st.builds(AssistantMessage, contents, st.lists(calls, max_size=3).map(tuple)),
    st.builds(ToolResultMessage, st.text(min_size=1, max_size=8), contents, st.booleans()),
)


@given(messages)
def test_every_message_has_the_documented_shape(message: Message) -> None:
    out = message_json(message)
    json.dumps(out)  # plain JSON
    assert out["role"] in ("user", "assistant", "tool")
    assert "content" in out
    if isinstance(message, AssistantMessage):
        assert [(c["id"], c["name"]) for c in out["tool_calls"]] == [
            (c.id, c.name) for c in message.tool_calls]
        assert [c["arguments"] for c in out["tool_calls"]] == [
            json.loads(c.arguments) for c in message.tool_calls]
    elif isinstance(message, ToolResultMessage):
        assert out["tool_call_id"] == message.call_id
        assert out["status"] == ("error" if message.is_error else "ok")
    else:
        assert set(out) == {"role", "content"}


@given(json_values, st.integers(min_value=4, max_value=300))
def test_one_line_is_one_line_within_its_limit(value: object, limit: int) -> None:
    text = one_line(value, limit)
    assert "\n" not in text and "\r" not in text
    assert len(text) <= limit


@given(st.dictionaries(st.sampled_from(["type", "name", "content", "message", "reply",
                                         "arguments", "keys", "new", "status"]),
                       json_values, max_size=6),
       st.sampled_from(["turn_started", "tool_call", "tool_result", "approval_requested",
                        "approval_resolved", "state_changed", "phase_changed", "retrying",
                        "turn_finished", "error", "something_new"]))
def test_any_stored_event_is_described_on_one_line(data: dict[str, object], kind: str) -> None:
    """Even an event a newer phaseflow wrote, or one with odd fields, is shown."""
    label, text = describe({**data, "type": kind})
    assert label and "\n" not in text
    assert len(text) <= 12 * LINE_CHARS


@given(st.text(min_size=1, max_size=12).filter(lambda p: "\x00" not in p))  # C strings
def test_a_store_s_password_is_never_shown(password: str) -> None:
    """Whatever the password, and wherever a DSN holds it (a URL's user info, raw or
    percent-encoded, its ``password`` parameter, a libpq ``password=`` value), it is
    shown as ``***`` and the rest as written."""
    from urllib.parse import quote

    encoded = quote(password, safe="")
    for scheme in ("postgresql", "postgres"):
        for written in (password, encoded):
            shown = store_name(f"{scheme}://ada:{written}@db.example:5432/app")
            assert shown == f"{scheme}://ada:***@db.example:5432/app"
        shown = store_name(f"{scheme}://ada@db/app?sslmode=disable&password={encoded}")
        assert shown == f"{scheme}://ada@db/app?sslmode=disable&password=***"
    quoted = "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
    dsn = f"host=db user=ada password={quoted} dbname=app"
    assert store_name(dsn) == "host=db user=ada password=*** dbname=app"
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return
    assert conninfo_to_dict(dsn)["password"] == password  # what libpq reads


@pytest.mark.parametrize(("dsn", "shown"), [
    ("host=db password=s3cret dbname=app", "host=db password=*** dbname=app"),
    ("host=db password = s3cret", "host=db password = ***"),
    ("host=db sslpassword=s3cret", "host=db sslpassword=***"),
    ("host=db password=s3c'ret dbname=app", "host=db password=*** dbname=app"),
    ("host=db password='s3cret dbname=app", "host=db password=***"),  # never closed
    ("host=db password=s3 cret", "host=db password=*** ***"),  # libpq would refuse it
    ("mysql://ada:s3cret@db/x", "mysql://ada:***@db/x"),
    ("postgresql://ada:s3@cret@db/x?password=s3cret", "postgresql://ada:***@db/x?password=***"),
])
def test_a_dsn_libpq_would_misread_never_shows_its_password(dsn: str, shown: str) -> None:
    assert store_name(dsn) == shown


@pytest.mark.parametrize(("value", "postgres"), [
    ("postgresql://db/app", True), ("POSTGRES://db/app", True), ("host=db dbname=app", True),
    ("dbname=app", True), ("sessions.db", False), ("a=b.db", False), ("my file.db", False),
    ("", False), ("host=db password='a b' sslrootcert=ca.pem", True),
    ("host = db  dbname=app", True), ("host=db extra", False),
])
def test_what_names_a_postgres_database(value: str, postgres: bool) -> None:
    assert is_postgres(value) is postgres


WORKFLOW = """
phaseflow: 1
name: other
initial: a
phases:
  a: {goal: talk}
"""


def test_a_session_of_another_workflow_is_named(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # the refund desk's hooks

    async def build() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        agent = Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider(["hello"]),
                      store=store)
        await (await agent.session("other-1")).reply("hi")
        store.close()

    asyncio.run(build())
    script = tmp_path / "script.yaml"
    script.write_text("[]\n")
    code = main(["sessions", "recover", "other-1", "--store", str(tmp_path / "s.db"),
                 "--workflow", str(ROOT / "workflows" / "refund-desk.yaml"),
                 "--hooks", "support_agent:HOOKS", "--provider", f"scripted:{script}"])
    out = capsys.readouterr()
    assert code == 1
    assert out.out == ("other-1: cannot be recovered: session 'other-1' belongs to workflow "
                       "'other', not 'refund-desk'\n")
    # the scan leaves it alone: it is idle, and of another workflow
    code = main(["sessions", "recover", "--store", str(tmp_path / "s.db"),
                 "--workflow", str(ROOT / "workflows" / "refund-desk.yaml"),
                 "--hooks", "support_agent:HOOKS", "--provider", f"scripted:{script}"])
    assert code == 0
    assert capsys.readouterr().out == ("nothing to recover: no session of refund-desk is "
                                       "running\n")


def test_stored_text_reaches_the_terminal_with_its_controls_escaped() -> None:
    from phaseflow.cli.sessions import one_line

    shown = one_line("\x1b]0;pwned\x07 and \x1b[2J")
    assert "\x1b" not in shown and "\x07" not in shown
