"""How the MCP tests start the test server (tests/support/mcp_server.py) and check that
none is left behind: the servers file of a stdio server, a Streamable HTTP server as a
real process on a loopback port, the workflow they implement, and the processes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

SERVER = str(Path(__file__).resolve().with_name("mcp_server.py"))

#: a workflow whose catalogue names the test server's tools as demo.TOOL
WORKFLOW = """\
phaseflow: 1
name: mcp-desk
initial: work
state:
  customer_id: {type: string}
tools:
  demo.lookup:
    writes: [customer_id]
  demo.fail: {}
  demo.slow: {timeout: 60}
  demo.pid: {}
  demo.header: {}
  demo.grow: {}
  demo.retitle: {}
  demo.shrink: {}
phases:
  work:
    goal: Help the customer.
    tools: ["demo.*"]
    transitions:
      - to: done
        when: state.customer_id == "C-never"
  done:
    goal: Say goodbye.
    terminal: true
"""


def stdio_servers(pids: Path, mode: str = "stdio", *, timeout: float = 20,
                  name: str = "demo") -> dict[str, Any]:
    """The servers mapping of one test server started as a subprocess, recording its
    process id in ``pids`` (a stdio server gets a minimal environment plus ``env``)."""
    return {"mcpServers": {name: {"command": sys.executable, "args": [SERVER, mode],
                                  "env": {"MCP_TEST_PIDS": str(pids)}, "timeout": timeout}}}


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(*args: str, port: int | None = None
                ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server on Streamable HTTP (``http`` or ``legacy-http``), running
    until the block ends; its URL and process."""
    port = port or free_port()
    mode, *rest = args or ("http",)
    process = subprocess.Popen([sys.executable, SERVER, mode, str(port), *rest],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "MCP_TEST_PIDS": ""})
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test MCP server did not listen on {port}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(20)


def descendants(pid: int | None = None) -> set[int]:
    """The process ids of every living descendant of ``pid`` (this process), from /proc."""
    root = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":  # a zombie has ended: only its exit status is left
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path("/proc", str(pid), "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def wait_gone(pids: set[int], seconds: float = 20) -> set[int]:
    """The processes of ``pids`` still alive after waiting up to ``seconds``."""
    deadline = time.monotonic() + seconds
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p for p in left if alive(p)}
    return left


def server_pids(folder: Path) -> set[int]:
    """The test servers that ever started with ``MCP_TEST_PIDS`` set to ``folder``."""
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def wait_for(path: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.02)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def asynchronous(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """A coroutine test run with ``asyncio.run`` (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run
