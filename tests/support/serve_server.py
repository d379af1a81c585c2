"""``phaseflow serve`` as the serve tests run it: a real process on 127.0.0.1 with an
ephemeral port (``--port 0``; the address is read from the line it prints), stopped with
a signal; plus a small project of its own (a slow tool, a tool that needs approval, a
tool whose every run leaves a line in a file) for what the refund desk cannot show."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.desk_project import PAY_TOOL, desk_workflow
from tests.support.phaseflow_cli import PHASEFLOW, ROOT, cli_env

#: the bundled refund desk, as the README's Quick start runs it
REFUND_DESK = [
    str(ROOT / "workflows" / "refund-desk.yaml"),
    "--provider", f"scripted:{ROOT / 'examples' / 'demo' / 'refund-desk.script.yaml'}",
    "--tools", "examples.demo.refund_desk:TOOLS",
    "--hooks", "examples.demo.refund_desk:HOOKS",
]

#: the refund desk's four customer messages (the demo conversation)
DEMO = ["Hi, I'm ada@example.com", "Rex", "Order O-9; the kettle arrived broken",
        "Yes, please"]

DESK = desk_workflow("""\
  slow.wait:
    description: Wait DESK_DELAY seconds (async, so a cancellation stops it)
  effect:
    description: Do something once, leaving a line in DESK_EFFECTS
""", '[pay, "slow.*", effect]')

DESK_TOOLS = '''\
import asyncio
import os

from phaseflow.tools import ToolContext, tool


''' + PAY_TOOL + '''

@tool(name="slow.wait")
async def wait() -> str:
    """Wait."""
    await asyncio.sleep(float(os.environ.get("DESK_DELAY", "0")))
    return "waited"


@tool
def effect(ctx: ToolContext) -> str:
    """Leave a line."""
    path = os.environ.get("DESK_EFFECTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{ctx.session_id} {ctx.call_id}\\n")
    return "done"


TOOLS = [pay, wait, effect]
'''


def desk_script(turns: int = 60) -> str:
    """Every turn: the slow tool, the effect tool, then a reply naming the turn."""
    lines = []
    for n in range(1, turns + 1):
        lines.append("- calls:\n    - slow.wait: {}\n    - effect: {}")
        lines.append(f"- \"reply {n}\"")
    return "\n".join(lines) + "\n"


def write_desk(folder: Path, turns: int = 60) -> list[str]:
    """The desk project in ``folder``; the serve arguments that run it (cwd: folder)."""
    (folder / "desk.yaml").write_text(DESK, encoding="utf-8")
    (folder / "desk_tools.py").write_text(DESK_TOOLS, encoding="utf-8")
    (folder / "desk.script.yaml").write_text(desk_script(turns), encoding="utf-8")
    return [str(folder / "desk.yaml"), "--provider",
            f"scripted:{folder / 'desk.script.yaml'}", "--tools", "desk_tools:TOOLS"]


@dataclass
class Server:
    """A running ``phaseflow serve``: its address, its process and its log."""

    process: subprocess.Popen[str]
    base: str
    log_path: Path
    banner: list[str] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError("the server did not stop within "
                                 f"{timeout} s; its log:\n{self.log()}") from None


def start(args: list[str], log_path: Path, *, cwd: Path = ROOT,
          env: dict[str, str] | None = None, timeout: float = 60, port: int = 0) -> Server:
    """Start ``phaseflow serve ARGS --port PORT`` (0: a free one) and wait for its
    address."""
    log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - the process writes it
    process = subprocess.Popen(
        [*PHASEFLOW, "serve", *args, "--port", str(port)],
        cwd=cwd, env=env or cli_env(), stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    assert process.stdout is not None
    banner: list[str] = []
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            banner.append(line)
            if "listening on " in line and not found:
                found.append(line.split("listening on ", 1)[1].split()[0])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not found and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    if not found:
        process.kill()
        process.wait(10)
        raise AssertionError("the server did not start:\n" + "".join(banner)
                             + log_path.read_text(encoding="utf-8"))
    return Server(process, found[0], log_path, banner)


@contextlib.contextmanager
def serving(args: list[str], log_path: Path, *, cwd: Path = ROOT,
            env: dict[str, str] | None = None) -> Iterator[Server]:
    """:func:`start` the server, and stop it when the block ends, however it ends."""
    server = start(args, log_path, cwd=cwd, env=env)
    try:
        yield server
    finally:
        server.stop()


def refund_desk(folder: Path, *options: str,
                env: dict[str, str] | None = None) -> contextlib.AbstractContextManager[Server]:
    """The bundled refund desk served with its SQLite store and its log in ``folder``."""
    return serving([*REFUND_DESK, "--store", str(folder / "sessions.db"), *options],
                   folder / "server.log", env=env)


def new_session(client: httpx.Client, messages: list[str],
                workflow: str | None = "refund-desk") -> dict[str, Any]:
    """A session created over HTTP (``workflow=None``: the server's default) and sent
    ``messages`` one reply at a time: its ``id`` and the last reply's JSON."""
    created = client.post("/v1/sessions", json={"workflow": workflow} if workflow else {})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    outcome: dict[str, Any] = {}
    for text in messages:
        answer = client.post(f"/v1/sessions/{sid}/messages", json={"text": text},
                             headers={"Accept": "application/json"})
        assert answer.status_code == 200, answer.text
        outcome = answer.json()
    return {"id": sid, **outcome}


def stored_events(client: httpx.Client, sid: str) -> list[dict[str, Any]]:
    """Every event the server has stored for session ``sid``, read page after page
    (``follow=false``: the stored ones only, never a stream)."""
    events: list[dict[str, Any]] = []
    while True:
        answer = client.get(f"/v1/sessions/{sid}/events",
                            params={"after": len(events), "follow": "false"})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        if not page:
            return events
        events += page


def wait_for_events(client: httpx.Client, sid: str,
                    predicate: Callable[[list[dict[str, Any]]], bool], *,
                    timeout: float = 60, poll: float = 0.1) -> list[dict[str, Any]]:
    """Session ``sid``'s stored events once ``predicate`` holds for them (asked every
    ``poll`` seconds); after ``timeout`` seconds, a failure naming the events seen."""
    deadline = time.monotonic() + timeout
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        events = stored_events(client, sid)
        if predicate(events):
            return events
        time.sleep(poll)
    raise AssertionError(f"timed out; the events: {[(e['seq'], e['type']) for e in events]}")


@dataclass
class Frame:
    """One SSE frame as it came over the wire: its own ``id:`` line (``None`` when it
    has none; the spec's "last event id" carrying over is the client's business), its
    ``data`` parsed as JSON, and comment lines (heartbeats)."""

    id: str | None
    data: object
    comments: list[str]


def frames(lines: Iterator[str]) -> Iterator[Frame]:
    """The frames of an SSE stream's lines (``response.iter_lines()``), raw."""
    import json

    ident: str | None = None
    data: list[str] = []
    comments: list[str] = []
    for line in lines:
        if line == "":
            if data or comments:
                yield Frame(ident, json.loads("\n".join(data)) if data else None, comments)
            ident, data, comments = None, [], []
        elif line.startswith(":"):
            comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                ident = value
            elif name == "data":
                data.append(value)
