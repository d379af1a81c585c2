"""A long tool output can be read back: by the model (the built-in ``read_output``,
offered once an output of its session was cut), by the host (``Session.read_output``),
by a user (``phaseflow sessions output``) and over HTTP; within the capture's bounds,
and gone with its session."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session import events as ev
from phaseflow.session.outputs import OutputNotFound, shown_range
from phaseflow.stores import MemoryStore, SQLiteStore
from phaseflow.stores.base import Store, capture_owner
from phaseflow.tools import tool
from tests.support.phaseflow_cli import cli_env, run_phaseflow

WORKFLOW = """\
phaseflow: 1
name: logs
initial: look
tools:
  logs.dump: {}
phases:
  look:
    goal: Read the logs.
    tools: [logs.dump]
  other:
    goal: Elsewhere.
"""

LOG = "".join(f"line {n:04d} " + "é" * 10 + "\n" for n in range(1, 301))


@tool(name="logs.dump")
def dump() -> str:
    """The whole log."""
    return LOG


def reference(session_id: str, data: str = LOG) -> str:
    return f"{capture_owner(session_id)}-{hashlib.sha256(data.encode()).hexdigest()}"


def agent(script: list[Any], store: Store | None = None, **options: Any) -> Agent:
    return Agent(phaseflow.load_workflow_text(WORKFLOW), ScriptedProvider(script),
                 tools=[dump], store=store, output_lines=20, **options)


def test_the_model_reads_a_cut_output_back_with_read_output() -> None:
    ref = reference("s")
    script = [{"calls": [{"logs.dump": {}}]},
              {"calls": [{"read_output": {"reference": ref, "offset": 2000, "limit": 100}}]},
              "Found it."]
    model_agent = agent(script)
    session = model_agent.session_sync("s")
    assert session.reply_sync("check the logs") == "Found it."
    requests = model_agent.provider.requests  # type: ignore[attr-defined]
    offered = [[t.name for t in r.tools] for r in requests]
    assert "read_output" not in offered[0]  # nothing of this session was cut yet
    assert "read_output" in offered[1] and "read_output" in offered[2]
    results = [e for e in session.events_sync() if isinstance(e, ev.ToolResultEvent)]
    assert results[0].status == "ok" and f"full output is reference {ref}" in results[0].content
    read = results[1]
    assert read.status == "ok"
    data = LOG.encode()
    text, start, end = shown_range(data[2000:2100], 2000, len(data))
    assert read.content.startswith(text)
    assert f"[bytes {start}-{end} of {len(data)} of output {ref}" in read.content
    assert f"offset={end})" in read.content  # where the rest begins
    assert session.outputs == ((ref, len(data)),)
    assert session.read_output_sync(ref, offset=2000, limit=100) == data[2000:2100]
    assert session.read_output_sync(ref, limit=10**9) == data


def test_read_output_reads_only_this_session_s_outputs() -> None:
    store = MemoryStore()
    first = agent([{"calls": [{"logs.dump": {}}]}, "ok"], store).session_sync("a")
    first.reply_sync("dump")
    theirs = reference("a")
    script = [{"calls": [{"logs.dump": {}}]},
              {"calls": [{"read_output": {"reference": theirs}},
                         {"read_output": {"reference": "../../etc/passwd"}}]}, "done"]
    second = agent(script, store).session_sync("b")
    second.reply_sync("dump")
    results = [e for e in second.events_sync() if isinstance(e, ev.ToolResultEvent)]
    assert [r.status for r in results] == ["ok", "error", "error"]
    assert "has no captured output" in results[1].content
    assert reference("b") in results[1].content  # the ones it has are named
    with pytest.raises(OutputNotFound):
        second.read_output_sync(theirs)


def test_an_output_past_the_capture_bound_is_an_error_naming_why() -> None:
    session = agent([{"calls": [{"logs.dump": {}}]}, "ok"],
                    capture_bytes=1000).session_sync("s")
    session.reply_sync("dump")
    result = next(e for e in session.events_sync() if isinstance(e, ev.ToolResultEvent))
    assert result.status == "error"
    assert "capture incomplete (capture_byte_limit)" in result.content
    (ref, size), = session.outputs
    assert size <= 1000
    kept = session.read_output_sync(ref, limit=10**6)
    assert LOG.encode().startswith(kept)


def test_a_session_past_its_capture_quota_keeps_no_more() -> None:
    script = [{"calls": [{"logs.dump": {}}]}, {"calls": [{"logs.dump": {}}]}, "ok"]
    size = len(LOG.encode())
    session = agent(script, session_capture_bytes=size + 100).session_sync("s")
    session.reply_sync("dump twice")
    results = [e for e in session.events_sync() if isinstance(e, ev.ToolResultEvent)]
    assert results[0].status == "ok"
    assert results[1].status == "error"
    assert "capture incomplete (session_disk_quota)" in results[1].content
    assert sum(n for _, n in session.outputs) <= size + 100


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_capture_bounds_must_be_positive(bad: Any) -> None:
    for name in ("capture_bytes", "session_capture_bytes"):
        with pytest.raises(ConfigError, match=name):
            agent([], **{name: bad})


def test_captures_go_with_their_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    keep = agent([{"calls": [{"logs.dump": {}}]}, "ok"], store).session_sync("keep")
    keep.reply_sync("dump")
    gone = agent([{"calls": [{"logs.dump": {}}]}, "ok"], store).session_sync("gone")
    gone.reply_sync("dump")

    async def after_delete() -> tuple[Any, Any]:
        await store.delete("gone")
        return (await store.read_capture(reference("gone"), 0, 10),
                await store.read_capture(reference("keep"), 0, 10))

    deleted, kept = asyncio.run(after_delete())
    assert deleted is None
    assert kept == (LOG.encode()[:10], len(LOG.encode()))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_capture_is_read_as_a_range(tmp_path: Path, kind: str) -> None:
    store: Store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "r.db")
    data = bytes(range(256)) * 40

    async def reads() -> list[Any]:
        ref = await store.put_capture(data, session_id="s")
        assert ref == f"{capture_owner('s')}-{hashlib.sha256(data).hexdigest()}"
        return [await store.read_capture(ref, 0, 5), await store.read_capture(ref, 10_000, 500),
                await store.read_capture(ref, 20_000, 5), await store.read_capture("nope", 0, 1)]

    assert asyncio.run(reads()) == [(data[:5], len(data)), (data[10_000:10_240], len(data)),
                                    (b"", len(data)), None]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_large_capture_is_kept_in_chunks_and_read_across_them(tmp_path: Path,
                                                                 kind: str) -> None:
    from phaseflow.stores.base import CAPTURE_CHUNK

    store: Store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    data = os.urandom(3 * CAPTURE_CHUNK + 1234)
    spots = [(0, 10), (CAPTURE_CHUNK - 5, 10), (CAPTURE_CHUNK, CAPTURE_CHUNK * 2 + 7),
             (len(data) - 3, 100), (len(data), 5), (5, 10**9)]

    async def reads() -> tuple[list[Any], Any, Any]:
        ref = await store.put_capture(data, session_id="big")
        got = [await store.read_capture(ref, o, n) for o, n in spots]
        whole = await store.get_capture(ref)
        await store.delete("big")
        return got, whole, await store.read_capture(ref, 0, 1)

    got, whole, after = asyncio.run(reads())
    assert got == [(data[o:o + n], len(data)) for o, n in spots]
    assert whole == data
    assert after is None


def test_a_read_is_cut_at_whole_characters() -> None:
    data = "aé€😀z".encode()
    for offset in range(len(data)):
        for end in range(offset, len(data) + 1):
            text, start, stop = shown_range(data[offset:end], offset, len(data))
            assert text == data[start:stop].decode()  # never half a character
            assert offset <= start <= offset + 3 and stop <= end


def test_sessions_output_prints_the_capture(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    agent([{"calls": [{"logs.dump": {}}]}, "ok"], SQLiteStore(path)).session_sync(
        "cli").reply_sync("dump")
    ref = reference("cli")
    env = cli_env()
    whole = run_phaseflow("sessions", "output", "cli", ref, "--store", str(path),
                          cwd=tmp_path, env=env, timeout=120)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == LOG
    part = run_phaseflow("sessions", "output", "cli", ref, "--store", str(path),
                         "--offset", "5", "--limit", "4", cwd=tmp_path, env=env, timeout=120)
    assert part.stdout == "0001"  # the bytes as they were: 5 to 9
    missing = run_phaseflow("sessions", "output", "cli", reference("other"), "--store",
                            str(path), cwd=tmp_path, env=env, timeout=120)
    assert missing.returncode == 1 and "has no captured output" in missing.stderr
    bad = run_phaseflow("sessions", "output", "cli", ref, "--store", str(path), "--offset",
                        "-1", cwd=tmp_path, env=env, timeout=120)
    assert bad.returncode == 2 and "--offset" in bad.stderr


TOOLS_MODULE = '''\
from phaseflow.tools import tool

LOG = "".join(f"line {n:04d} " + "\\u00e9" * 10 + "\\n" for n in range(1, 301))


@tool(name="logs.dump")
def dump() -> str:
    """The whole log."""
    return LOG


TOOLS = [dump]
'''


def test_an_output_is_read_over_http_and_goes_with_its_session(tmp_path: Path) -> None:
    import httpx

    from tests.support.serve_server import new_session, serving

    (tmp_path / "logs.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "logs_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    (tmp_path / "script.yaml").write_text("- calls: [{logs.dump: {}}]\n- Done.\n",
                                          encoding="utf-8")
    args = ["logs.yaml", "--tools", "logs_tools:TOOLS", "--provider", "scripted:script.yaml",
            "--store", str(tmp_path / "s.db")]
    with serving(args, tmp_path / "server.log", cwd=tmp_path) as server, \
            httpx.Client(base_url=server.base, timeout=30) as client:
        sid = new_session(client, ["dump the logs"], workflow="logs")["id"]
        ref = reference(sid)
        whole = client.get(f"/v1/sessions/{sid}/outputs/{ref}")
        assert whole.status_code == 200, whole.text
        assert whole.content == LOG.encode()
        assert whole.headers["x-output-size"] == str(len(LOG.encode()))
        part = client.get(f"/v1/sessions/{sid}/outputs/{ref}", params={"offset": 5,
                                                                        "limit": 4})
        assert part.content == b"0001"
        other = client.get(f"/v1/sessions/{sid}/outputs/{reference('someone-else')}")
        assert other.status_code == 404 and other.json()["type"].endswith("output_not_found")
        bad = client.get(f"/v1/sessions/{sid}/outputs/{ref}", params={"offset": -1})
        assert bad.status_code == 400
        assert client.delete(f"/v1/sessions/{sid}").status_code == 204
        assert client.get(f"/v1/sessions/{sid}/outputs/{ref}").status_code == 404

    async def left() -> Any:
        return await SQLiteStore(tmp_path / "s.db").read_capture(ref, 0, 1)

    assert asyncio.run(left()) is None  # the capture went with the session
