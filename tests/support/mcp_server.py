"""A real MCP server for the tests, written with the official ``mcp`` package.

Run as a script: ``python mcp_server.py stdio`` (a subprocess speaking MCP on its standard
input and output), ``python mcp_server.py http PORT`` (Streamable HTTP on 127.0.0.1), or
``python mcp_server.py legacy-http PORT`` (Streamable HTTP that only speaks the
``initialize`` handshake of 2025 servers, whose sessions expire on ``POST /expire``).
``crash`` writes a line to standard error and exits 3; ``hang`` never answers.

When ``MCP_TEST_PIDS`` names a folder, the server writes a file named by its process id
there, so a test can check that no server outlives the agent that started it.

Its tools: ``lookup(email)`` (a customer, as text and structured content), ``fail(why)``
(an ``isError`` result), ``slow(seconds)`` (sleeps; writes ``MCP_TEST_PIDS/slow-started``
when it starts, ``slow-cancelled`` when the client cancels it), ``pid()``, ``meta()``
(its request's ``_meta``), ``header(name)`` (an HTTP request header's value), ``grow()``
(adds a tool ``fresh`` and says the list changed), ``retitle()`` (a new description for
``lookup``, and says so) and ``shrink()`` (removes ``lookup``, and says so).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("phaseflow-test", log_level="WARNING")
PIDS = os.environ.get("MCP_TEST_PIDS")


def _mark(name: str) -> None:
    if PIDS:
        Path(PIDS, name).write_text(str(os.getpid()), encoding="utf-8")


def _lookup(email: str) -> dict[str, Any]:
    """Find a customer by email."""
    if "@" not in email:
        raise ToolError(f"not an email address: {email}")
    return {"customer_id": "C-" + email.split("@")[0], "name": email.split("@")[0].title()}


server.add_tool(_lookup, name="lookup", description="Find a customer by email.")


@server.tool()
def fail(why: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(f"refused: {why}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    import anyio

    _mark("slow-started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _mark("slow-cancelled")  # the client cancelled the request
        raise
    return f"slept {seconds}"


@server.tool()
def meta(ctx: Context) -> dict[str, Any]:
    """The ``_meta`` of this call's request."""
    return dict(ctx.request_context.meta or {})


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of the HTTP request's header ``name`` ("" without one, or over stdio)."""
    request = getattr(ctx.request_context, "request", None)
    headers = getattr(request, "headers", None)
    return "" if headers is None else str(headers.get(name, ""))


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


async def _changed(ctx: Context) -> None:
    await ctx.notify_tools_changed()  # 2026 connections: subscriptions/listen
    with contextlib.suppress(Exception):  # 2025 connections: on the session
        await ctx.request_context.session.send_tool_list_changed()


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool 'fresh'."""
    server.add_tool(lambda: "fresh!", name="fresh", description="A new tool.")
    await _changed(ctx)
    return "grown"


@server.tool()
async def retitle(ctx: Context) -> str:
    """Give the tool 'lookup' a new description."""
    server.remove_tool("lookup")
    server.add_tool(_lookup, name="lookup", description="Look a customer up (v2).")
    await _changed(ctx)
    return "retitled"


@server.tool()
async def shrink(ctx: Context) -> str:
    """Remove the tool 'lookup'."""
    server.remove_tool("lookup")
    await _changed(ctx)
    return "shrunk"


def _legacy_only(app: Any) -> Any:
    """An ASGI wrapper that refuses the 2026 protocol (a request with a version header the
    2025 handshake does not know), as a server from before it would, and whose sessions
    expire on demand: after ``POST /expire`` every session it gave out so far answers 404,
    as a server answers a session it has forgotten (idle too long, restarted)."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    given: set[bytes] = set()
    expired: set[bytes] = set()

    async def answer(send: Any, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if scope["path"] == "/expire":
            expired.update(given)
            await answer(send, 200, b"expired")
            return
        headers = dict(scope["headers"])
        version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
        if version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await answer(send, 400, b"unsupported protocol version")
            return
        if headers.get(b"mcp-session-id") in expired:
            await answer(send, 404, b"session not found")
            return

        async def recording(message: Any) -> None:
            if message["type"] == "http.response.start":
                given.update(v for k, v in message.get("headers", []) if k == b"mcp-session-id")
            await send(message)

        await app(scope, receive, recording)

    return wrapped


def main(argv: list[str]) -> None:
    mode = argv[0] if argv else "stdio"
    if mode == "crash":
        print("the test server refuses to start (crash mode)", file=sys.stderr, flush=True)
        sys.exit(3)
    _mark(str(os.getpid()))
    if mode == "hang":
        time.sleep(3600)
        return
    if mode == "stdio":
        server.run()
        return
    import uvicorn

    port = int(argv[1])
    if mode == "legacy-http":
        app = _legacy_only(server.streamable_http_app())
    else:
        app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning",
                timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main(sys.argv[1:])
