"""``phaseflow sessions list|show|events|delete``: what a user sees of a stored session.

The sessions are made by the Python API as a host makes them (the refund desk of
``examples/support_agent.py``: its tools, hooks and script, in an SQLite store); the
commands then run as real subprocesses on that store.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phaseflow.cli.main import main
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.stores import SQLiteStore
from tests.support.phaseflow_cli import run_phaseflow

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import support_agent as sa  # noqa: E402

FIRST = "Hi, I'd like a refund. I'm ada@example.com"
SECOND = "Order O-9. It arrived broken."


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_phaseflow("sessions", *args, cwd=cwd)


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli`` in this process (faster): for the cases that need no process of their own."""
    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = main(["sessions", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)
    return run


def agent(store: SQLiteStore) -> Agent:
    return Agent(sa.WORKFLOW, ScriptedProvider(sa.SCRIPT), hooks=sa.HOOKS, store=store,
                 tools=[sa.lookup_customer, sa.select_order, sa.issue_refund])


async def build(path: Path) -> None:
    """``idle-1``: one finished turn; ``wait-1``: two turns, a refund waiting for
    approval; ``done-1``: the refund approved, the conversation over."""
    store = SQLiteStore(path)
    session = await agent(store).session("idle-1")
    await session.reply(FIRST)
    for sid in ("wait-1", "done-1"):
        session = await agent(store).session(sid)
        await session.reply(FIRST)
        await session.reply(SECOND)
    pending = session.pending_approval
    assert pending is not None
    async for _ in session.resolve(pending.call_id, "approve"):
        pass
    store.close()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sessions") / "s.db"
    asyncio.run(build(path))
    return path


def test_list_shows_one_line_per_session(store_path: Path) -> None:
    out = cli("list", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ID", "WORKFLOW", "STATUS", "PHASE", "TURN", "UPDATED"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"idle-1", "wait-1", "done-1"}
    assert rows["idle-1"][1:5] == ["refund-desk", "idle", "locate_order", "1"]
    assert rows["wait-1"][1:5] == ["refund-desk", "awaiting_approval", "refund", "2"]
    assert rows["done-1"][2] == "finished"
    assert rows["idle-1"][5].endswith("Z")  # an ISO time in UTC


def test_list_json(store_path: Path) -> None:
    out = cli("list", "--json", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    listed = {s["id"]: s for s in json.loads(out.stdout)}
    assert listed["wait-1"]["status"] == "awaiting_approval"
    assert listed["wait-1"]["phase"] == "refund"
    assert listed["wait-1"]["turn"] == 2
    assert listed["wait-1"]["workflow"] == "refund-desk"
    assert isinstance(listed["wait-1"]["updated_at"], float)


def test_the_default_store_is_in_the_current_folder(tmp_path: Path, store_path: Path,
                                                    here: Any) -> None:
    missing = here("list", cwd=tmp_path)
    assert missing.returncode == 2
    assert "no session store at phaseflow-sessions.db" in missing.stderr
    assert not (tmp_path / "phaseflow-sessions.db").exists()  # reading creates nothing
    (tmp_path / "phaseflow-sessions.db").write_bytes(store_path.read_bytes())
    out = here("list", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == 3


def test_show_is_a_timeline_of_the_turns(store_path: Path) -> None:
    out = cli("show", "wait-1", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "status awaiting_approval, phase refund, turn 2" in text
    # in order: the turn, its calls and results, the state written, the phase change
    expected = [
        "turn 1", f"user       {FIRST}",
        'call       crm.lookup_customer {"email": "ada@example.com"}',
        "refused    payments.issue_refund: Tool 'payments.issue_refund' is not available",
        'ok         crm.lookup_customer: {"customer_id": "C-1042"',
        'state      customer_id = "C-1042"',
        "phase      greet -> locate_order (guard)",
        "reply      [completed", "Which order is it about",
        "turn 2", f"user       {SECOND}",
        'state      policy = {"name": "standard"', "(effects)",
        'approval?  payments.issue_refund {"amount": 120, "order_id": "O-9"}',
        'waiting for approval: payments.issue_refund {"amount": 120, "order_id": "O-9"}',
        "state", '  refund_reason = "arrived broken"',
    ]
    at = 0
    for piece in expected:
        found = text.find(piece, at)
        assert found >= 0, f"{piece!r} not after position {at} in:\n{text}"
        at = found + len(piece)


def test_show_an_approved_refund(store_path: Path, here: Any) -> None:
    out = here("show", "done-1", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    assert "decision   approve payments.issue_refund" in out.stdout
    assert 'ok         payments.issue_refund: {"refund_id": "R-77"}' in out.stdout
    assert "Refund R-77 is on its way" in out.stdout
    assert "waiting for approval" not in out.stdout


def test_show_json_is_the_record_with_the_exact_history(store_path: Path) -> None:
    out = cli("show", "wait-1", "--json", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert {k: shown[k] for k in ("id", "workflow", "status", "phase", "turn")} == {
        "id": "wait-1", "workflow": "refund-desk", "status": "awaiting_approval",
        "phase": "refund", "turn": 2}
    assert shown["state"]["refund_reason"] == "arrived broken"
    pending = shown["pending_approval"]
    assert pending["name"] == "payments.issue_refund"
    assert pending["arguments"] == {"order_id": "O-9", "amount": 120}
    assert len(pending["arguments_hash"]) == 64
    history = shown["history"]
    assert history[0] == {"role": "user", "content": FIRST}
    calls = history[1]["tool_calls"]
    assert history[1]["role"] == "assistant"
    assert [c["name"] for c in calls] == ["crm.lookup_customer", "payments.issue_refund"]
    assert calls[0]["arguments"] == {"email": "ada@example.com"}  # a JSON value, not text
    results = {m["tool_call_id"]: m for m in history if m["role"] == "tool"}
    assert results[calls[0]["id"]]["status"] == "ok"
    assert results[calls[1]["id"]]["status"] == "error"  # refused: not offered in greet
    assert "not available in this phase" in results[calls[1]["id"]]["content"]
    assert {m["role"] for m in history} == {"user", "assistant", "tool"}
    # the last message is the call waiting for approval, with no result yet
    assert history[-1]["tool_calls"][0]["id"] == pending["call_id"]


def test_show_json_of_the_same_session_agrees_with_the_api(store_path: Path, here: Any) -> None:
    """The history printed is the one the session holds, message for message."""
    from phaseflow.session.records import message_json

    async def held() -> list[dict[str, Any]]:
        store = SQLiteStore(store_path)
        session = await agent(store).session("done-1")
        store.close()
        return [message_json(m) for m in session.history]

    out = here("show", "done-1", "--json", "--store", str(store_path))
    shown = json.loads(out.stdout)
    assert shown["history"] == asyncio.run(held())
    assert shown["pending_approval"] is None
    assert shown["status"] == "finished"


def test_events_text_and_json(store_path: Path) -> None:
    out = cli("events", "idle-1", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[0] == "1" and "turn 1" in lines[0] and "user" in lines[0]
    assert "reply" in lines[-1] and "Which order" in lines[-1]
    seqs = [int(line.split()[0]) for line in lines]
    assert seqs == list(range(1, len(lines) + 1))

    out = cli("events", "idle-1", "--json", "--after", "5", "--store", str(store_path))
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(6, len(lines) + 1))
    assert events[-1]["type"] == "turn_finished"
    assert events[-1]["session_id"] == "idle-1"
    assert events[-1]["status"] == "completed"


def test_a_missing_session_is_exit_1(store_path: Path, here: Any) -> None:
    for action in ("show", "events", "delete"):
        out = here(action, "nobody", "--store", str(store_path))
        assert out.returncode == 1
        assert out.stderr == f"phaseflow sessions {action}: error: no session 'nobody' in the " \
                             "store\n"
        assert out.stdout == ""


def test_delete(tmp_path: Path, store_path: Path, here: Any) -> None:
    path = tmp_path / "copy.db"
    path.write_bytes(store_path.read_bytes())
    out = cli("delete", "wait-1", "--store", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "deleted session wait-1\n"
    listed = json.loads(here("list", "--json", "--store", str(path)).stdout)
    assert sorted(s["id"] for s in listed) == ["done-1", "idle-1"]
    again = here("delete", "wait-1", "--store", str(path))
    assert again.returncode == 1 and "no session 'wait-1'" in again.stderr
    assert here("events", "wait-1", "--store", str(path)).returncode == 1


def test_a_corrupted_row_names_the_session(tmp_path: Path, store_path: Path, here: Any) -> None:
    path = tmp_path / "broken.db"
    path.write_bytes(store_path.read_bytes())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET snapshot = '{\"schema\": 1, \"exec' WHERE id = ?",
                     ("wait-1",))
        conn.execute("UPDATE events SET data = '{\"type\": \"tool' WHERE session_id = ? "
                     "AND seq = 2", ("idle-1",))
    out = here("show", "wait-1", "--store", str(path))
    assert out.returncode == 1
    assert out.stderr.startswith("phaseflow sessions show: error: session 'wait-1': ")
    assert "corrupt" in out.stderr and "Traceback" not in out.stderr
    out = here("events", "idle-1", "--store", str(path))
    assert out.returncode == 1
    assert "session 'idle-1': event 2 is truncated or corrupt" in out.stderr
    # the other sessions are still listed and shown; the damaged one is listed as such,
    # and named in an error (exit 1)
    out = here("list", "--store", str(path))
    assert out.returncode == 1
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[1:]}
    assert rows["wait-1"] == ["-", "damaged", "-", "-", "-"]
    assert rows["idle-1"][:2] == ["refund-desk", "idle"] and rows["done-1"][1] == "finished"
    assert out.stderr.startswith("phaseflow sessions list: error: session 'wait-1': the "
                                 "stored snapshot is truncated or corrupt")
    assert len(out.stderr.splitlines()) == 1
    assert here("show", "done-1", "--store", str(path)).returncode == 0


# --- misuse: exit 2, one line, in process (no subprocess needed to read a message) -------

def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["sessions", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _psycopg() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


# With psycopg installed (the dev extra) the store is made and its server cannot be
# reached (there is no host 'db'); without it, the message names the extra.
_PG_PROBLEM = ("cannot open the session store: failed to resolve host 'db'" if _psycopg()
               else "PostgreSQL stores need psycopg 3")


@pytest.mark.parametrize(("store", "message"), [
    ("mysql://db/x", "--store mysql://db/x: unknown kind of store 'mysql'"),
    ("postgresql://ada:secret@db/x",
     ("" if _psycopg() else "--store ") + "postgresql://ada:***@db/x: " + _PG_PROBLEM),
    ("memory", "--store memory keeps no sessions after a process ends"),
    ("host=db dbname=app password=secret",
     ("" if _psycopg() else "--store ") + "host=db dbname=app password=***: " + _PG_PROBLEM),
    ("postgresql://ada@db/x?password=secret&sslmode=disable",
     ("" if _psycopg() else "--store ") + "postgresql://ada@db/x?password=***&sslmode=disable: "
     + _PG_PROBLEM),
    ("host=db dbname=app password='a secret'",
     ("" if _psycopg() else "--store ") + "host=db dbname=app password=***: " + _PG_PROBLEM),
])
def test_a_store_that_cannot_be_used_is_exit_2(capsys: pytest.CaptureFixture[str],
                                               store: str, message: str) -> None:
    code, out, err = run_main(capsys, "list", "--store", store)
    assert code == 2
    assert err.startswith(f"phaseflow sessions list: error: {message}")
    assert "secret" not in err
    assert len(err.splitlines()) == 1 and out == ""


def test_postgres_hint(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("psycopg is installed: the store opens")
    code, _, err = run_main(capsys, "list", "--store", "postgres://db/x")
    assert code == 2
    assert "pip install '.[postgres]'" in err


def test_a_file_that_is_not_a_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    code, _, err = run_main(capsys, "show", "x", "--store", str(path))
    assert code == 2
    assert err == (f"phaseflow sessions show: error: {path}: cannot open the session store: "
                   "file is not a database\n")


def test_no_action(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys)
    assert code == 2
    assert "name an action: list, show ID, events ID, delete ID or recover" in err


# --- the docs show real output -----------------------------------------------------------

DOC = ROOT / "docs" / "sessions-cli.md"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|\"at\": [0-9.]+")


def doc_examples() -> list[tuple[list[str], str]]:
    """Every ``$ phaseflow sessions ...`` of the doc's console blocks that only reads,
    with the output the doc shows."""
    examples = []
    for block in re.findall(r"```console\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        block = block.replace("\\\n", " ")  # a command continued on the next line
        for command in re.split(r"^\$ ", block, flags=re.M)[1:]:
            line, _, output = command.partition("\n")
            words = shlex.split(line)
            if words[:2] == ["phaseflow", "sessions"] and words[2] in ("list", "show",
                                                                        "events"):
                examples.append((words[2:], output))
    return examples


def test_the_doc_shows_what_the_commands_print(tmp_path: Path, store_path: Path, here: Any) -> None:
    examples = doc_examples()
    assert len(examples) >= 4
    (tmp_path / "phaseflow-sessions.db").write_bytes(store_path.read_bytes())
    for words, shown in examples:
        out = here(*words, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        printed, expected = TIME.sub("T", out.stdout), TIME.sub("T", shown)
        if expected.endswith("  ...\n"):  # the doc cuts it short
            expected = expected[: -len("  ...\n")]
            printed = printed[: len(expected)]
        assert printed == expected, words


def test_an_empty_store(tmp_path: Path, here: Any) -> None:
    store = SQLiteStore(tmp_path / "empty.db")
    assert asyncio.run(store.sessions()) == ()
    store.close()
    out = here("list", "--store", str(tmp_path / "empty.db"))
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "no sessions stored\n")
    out = here("list", "--json", "--store", str(tmp_path / "empty.db"))
    assert (out.returncode, json.loads(out.stdout)) == (0, [])
