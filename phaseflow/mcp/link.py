"""One MCP server's connection, owned by one long-lived task (:class:`Link`).

The ``mcp`` client's transports are anyio task groups and cancel scopes, which must be
entered and left by the same task: so one task (:meth:`Link._run`) opens the client,
lists the tools, keeps the connection while it is good, and closes it - and nothing
else ever enters or leaves it. Calls come from other tasks of the same loop and only
send requests on the open client.

What the task does over the connection's life:

* **connect**: start the subprocess (stdio; its standard error goes to a file, whose end
  a "did not start" message quotes) or reach the URL (Streamable HTTP), negotiate the
  protocol (``mode="auto"``: the 2026 protocol, or the ``initialize`` handshake of
  earlier servers), and list the tools, all within ``timeout`` seconds;
* **keep the tool list**: refreshed when the server says it changed
  (``notifications/tools/list_changed``; on a 2026 connection it must be asked for
  with ``subscriptions/listen``, which also tells at once when the connection drops);
* **notice a drop**: a call that finds the connection closed, or the listen stream
  lost, ends the session; the next call connects again (a killed stdio server is
  started again; an expired Streamable HTTP session is initialised again and the call,
  which the server refused unseen, is sent once more). A call the drop interrupted is
  an error: it may have run, and it is never sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TextIO, cast

from phaseflow.errors import ConfigError, PhaseflowError, install_hint

try:
    import mcp_types
    from mcp import Client
except ImportError:  # the extra is not installed: said once, as a configuration error
    raise ConfigError("MCP servers need the 'mcp' package: " + install_hint("mcp")) from None
import httpx2  # (the mcp extra's HTTP library: its client carries the headers)
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from phaseflow.expr.describe import describe_exception
from phaseflow.mcp.config import HttpServer, ServerConfig, StdioServer

__all__ = ["Link", "McpCallError", "McpServerError"]

logger = logging.getLogger(__name__)

#: how many bytes of a server's standard error a "did not start" message quotes
_STDERR_TAIL = 600


class McpServerError(ConfigError):
    """An MCP server did not start or did not answer (when the agent starts, or when a
    dropped connection cannot be made again); the message names the server."""


class McpCallError(PhaseflowError):
    """A call could not be made or was interrupted; the model sees the message."""


def _closed(client: Client) -> bool:
    """Whether the client's connection has ended (its server exited, the stream closed).

    The SDK keeps this on the session's dispatcher, privately: read defensively, so a
    later SDK without the attribute only loses the early notice (the call then fails
    and the next one reconnects)."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


class Link:
    """One server: its connection task, its cached tool list, its calls."""

    def __init__(self, server: ServerConfig, *, timeout: float,
                 listeners: list[Callable[[str], None]] | None = None) -> None:
        self.server = server
        self.name = server.name
        self.timeout = timeout
        #: called with the server's name, on the hub's loop, when a new listing differs
        #: from the one before (a change notice, a reconnection to a changed server)
        self.listeners = listeners if listeners is not None else []
        #: the server's tools by name, as last listed
        self.tools: dict[str, mcp_types.Tool] = {}
        #: how many times the tool list was read (a change notice reads it again)
        self.listings = 0
        #: connections made (the first, and every reconnection)
        self.connections = 0
        #: listings that differed from the one before, their listeners all called
        self.changes = 0
        self._client: Client | None = None
        self._state = "down"  # down | connecting | ready | closed
        self._error = ""
        self._changed: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        self._wanted = False
        self._stale = False
        self._broken = False
        self._why = ""  # why the connection was found broken
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._connecting: Any = None  # the connection being made: an anyio CancelScope
        self._stderr: TextIO | None = None

    # --- the caller's side --------------------------------------------------------------

    async def open(self) -> None:
        """Start the connection task and wait until the server is connected and its tools
        are listed; :class:`McpServerError` naming the server when it is not."""
        self._changed = asyncio.Condition()
        self._wake = asyncio.Event()
        self._wanted = True
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.name}")
        try:
            await self._connected(first=True)
        except McpCallError as exc:
            raise McpServerError(str(exc)) from None

    async def call(self, tool: str, arguments: Mapping[str, Any], *,
                   meta: Mapping[str, Any] | None = None) -> mcp_types.CallToolResult:
        """Call ``tool`` with ``arguments`` (``meta``: the request's ``_meta``); the
        server's result (``is_error`` included).
        :class:`McpCallError` when the server cannot be reached or the connection drops
        during the call."""
        for attempt in (1, 2):
            client = await self._connected()
            if tool not in self.tools:
                offered = ", ".join(sorted(self.tools)) or "none"
                raise McpCallError(f"MCP server {self.name!r} does not offer tool {tool!r} "
                                   f"now (its tools: {offered})")
            try:
                return await client.call_tool(
                    tool, dict(arguments),
                    meta=cast(mcp_types.RequestParamsMeta, dict(meta)) if meta else None)
            except MCPError as exc:
                if exc.code == mcp_types.INVALID_REQUEST and "session terminated" in (
                        exc.message or "").lower() and attempt == 1:
                    # an expired Streamable HTTP session: the server refused the call
                    # without running it; initialise a new session and send it again
                    self._break(client, f"the HTTP session expired: {exc.message}")
                    continue
                if exc.code == mcp_types.CONNECTION_CLOSED:
                    self._break(client, "the connection closed during a call")
                    again = ("the server is started again" if isinstance(self.server,
                                                                         StdioServer)
                             else "the connection is made again")
                    raise McpCallError(
                        f"MCP server {self.name!r} stopped during the call, so its outcome "
                        f"is unknown (it may have run): do not assume it failed; {again} "
                        "for the next call") from None
                raise McpCallError(f"MCP server {self.name!r} refused the call: "
                                   f"{exc.message}") from None
            except (OSError, EOFError) as exc:
                self._break(client, describe_exception(exc))
                raise McpCallError(f"MCP server {self.name!r}: the connection failed during "
                                   f"the call ({describe_exception(exc, 200)}), so its outcome "
                                   "is unknown") from None
        raise McpCallError(f"MCP server {self.name!r}: the session expired twice in a row")

    async def close(self) -> None:
        """End the connection (a stdio server is stopped: its input closed, then
        terminated if it does not exit) and the task. Idempotent."""
        self._closing = True
        task = self._task
        if task is None:
            return
        if self._connecting is not None:
            self._connecting.cancel()
        self._poke()
        try:
            # the SDK's own shutdown of a stdio server waits a few seconds at most
            await asyncio.wait_for(asyncio.shield(task), self.timeout + 10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # --- waiting for a connection ---------------------------------------------------------

    async def _connected(self, *, first: bool = False) -> Client:
        """The open client, connecting (again) when there is none: the caller waits for
        one attempt at most, and gets :class:`McpCallError` with the reason if it fails."""
        changed = self._changed
        assert changed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout + 5
        asked = first
        async with changed:
            while True:
                client = self._client
                if self._state == "ready" and client is not None:
                    if not _closed(client):
                        return client
                    self._break(client, "the connection closed")
                if self._state == "closed" or self._closing:
                    raise McpCallError(f"MCP server {self.name!r} is closed (the agent was "
                                       "closed)")
                if self._state == "down":
                    if asked and self._error:
                        raise McpCallError(self._error)
                    asked = True
                    self._wanted = True
                    self._poke()
                left = deadline - loop.time()
                if left <= 0:
                    raise McpCallError(f"MCP server {self.name!r} did not answer within "
                                       f"{self.timeout:g} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), left)

    async def _set(self, state: str, error: str = "") -> None:
        changed = self._changed
        assert changed is not None
        async with changed:
            self._state = state
            if state != "connecting":
                self._error = error
            changed.notify_all()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _break(self, client: Client, why: str) -> None:
        """The connection of ``client`` is no good: no call uses it from now on (they wait
        for the next one), and the task closes it."""
        if self._client is client:
            self._client = None
            self._broken = True
            self._why = why
            self._poke()

    # --- the connection task ----------------------------------------------------------------

    async def _run(self) -> None:
        """Connect when wanted, serve until the connection breaks or the link closes."""
        wake = self._wake
        assert wake is not None
        while not self._closing:
            if not self._wanted:
                wake.clear()
                await wake.wait()
                continue
            self._wanted = False
            await self._set("connecting")
            error = await self._session()
            await self._set("down", error)
        await self._set("closed")

    async def _session(self) -> str:
        """One connection, from start to end; why it ended (empty when asked to)."""
        import anyio

        loop = asyncio.get_running_loop()
        ready = False
        reason = ""
        with anyio.CancelScope() as scope:
            self._connecting = scope  # close() cancels a connection still being made
            timer = loop.call_later(self.timeout, scope.cancel)
            try:
                async with Client(self._transport(), mode="auto",
                                  message_handler=self._on_message, cache=None) as client:
                    await self._list(client)
                    timer.cancel()
                    self._connecting = None
                    ready = True
                    self.connections += 1
                    self._client = client
                    self._broken = self._stale = False
                    self._why = ""
                    await self._set("ready")
                    reason = await self._serve(client)
            except Exception as exc:
                reason = self._failure(exc, ready)
            finally:
                timer.cancel()
                self._connecting = None
                self._client = None
        if self._closing:
            return ""
        if scope.cancelled_caught and not ready:
            reason = (f"MCP server {self.name!r} ({self.server.where}) did not answer within "
                      f"{self.timeout:g} s{self._stderr_tail()}")
        return reason

    def _failure(self, exc: Exception, ready: bool) -> str:
        if ready:
            return f"MCP server {self.name!r}: the connection failed: {_reason(exc)}"
        what = "did not start" if isinstance(self.server, StdioServer) else "could not be reached"
        return (f"MCP server {self.name!r} ({self.server.where}) {what}: "
                f"{_reason(exc)}{self._stderr_tail()}")

    async def _serve(self, client: Client) -> str:
        """Keep the connection: refresh the tool list when it changed, until it breaks or
        the link closes."""
        wake = self._wake
        assert wake is not None
        listener = None
        capabilities = client.server_capabilities.tools
        if (client.protocol_version in MODERN_PROTOCOL_VERSIONS and capabilities is not None
                and capabilities.list_changed):
            listener = asyncio.create_task(self._listen(client))
        try:
            while True:
                if self._closing:
                    return ""
                if self._broken or _closed(client):
                    return f"MCP server {self.name!r}: {self._why or 'the connection closed'}"
                if self._stale:
                    self._stale = False
                    try:
                        await self._list(client)
                    except Exception as exc:
                        return f"MCP server {self.name!r}: listing its tools failed: " \
                               f"{_reason(exc)}"
                    continue
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    # (a drop with no call in flight is noticed here within a second)
                    await asyncio.wait_for(wake.wait(), 1.0)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener

    async def _listen(self, client: Client) -> None:
        """A 2026 connection's change notices: asked for once; a lost stream is a drop."""
        from mcp.client.subscriptions import SubscriptionLost

        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._stale = True
                    self._poke()
        except SubscriptionLost:
            self._why = "the connection was lost"
            self._broken = True
            self._poke()
        except Exception:
            return  # no notices from this server: the list stays as it was read

    async def _on_message(self, message: Any) -> None:
        """The client's message handler: a list-changed notice marks the list stale (read
        again by the connection task, never here: the handler runs in the reader)."""
        inner = getattr(message, "root", message)
        if isinstance(inner, mcp_types.ToolListChangedNotification):
            self._stale = True
            self._poke()

    async def _list(self, client: Client) -> None:
        tools: dict[str, mcp_types.Tool] = {}
        cursor: str | None = None
        for _page in range(100):
            listed = await client.list_tools(cursor=cursor)
            tools.update((t.name, t) for t in listed.tools)
            cursor = listed.next_cursor
            if cursor is None:
                break
        before, self.tools = self.tools, tools
        self.listings += 1
        if self.listings > 1 and tools != before:
            for listener in list(self.listeners):
                try:
                    listener(self.name)
                except Exception:  # a listener's failure must not end the connection
                    logger.exception("MCP server %r: a tool-list listener failed", self.name)
            self.changes += 1

    # --- transports ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        server = self.server
        if isinstance(server, StdioServer):
            if self._stderr is None:
                self._stderr = cast(TextIO, tempfile.TemporaryFile(  # noqa: SIM115 (kept)
                    mode="w+", encoding="utf-8", errors="replace"))
            else:
                self._stderr.seek(0)
                self._stderr.truncate()
            parameters = StdioServerParameters(command=server.command, args=list(server.args),
                                               env=dict(server.env) or None, cwd=server.cwd)
            async with stdio_client(parameters, errlog=self._stderr) as streams:
                yield streams
            return
        assert isinstance(server, HttpServer)
        # The SDK's way to give headers: a client of its HTTP library, made here with
        # the timeouts its own default client has (30 s; 300 s to read a held stream).
        http = httpx2.AsyncClient(headers=dict(server.headers) or None,
                                  timeout=httpx2.Timeout(30.0, read=300.0))
        async with http, streamable_http_client(server.url, http_client=http) as streams:
            yield streams

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        text = text.strip()
        if not text:
            return ""
        tail = text[-_STDERR_TAIL:]
        return f"; its standard error ends: {tail}"


def _reason(exc: BaseException) -> str:
    """The cause of a failed connection in one line: an exception group (anyio's task
    groups wrap what failed) is unwrapped to its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message or f"error {exc.code}"
    if isinstance(exc, FileNotFoundError):
        return f"no such command ({exc.filename or exc})"
    return describe_exception(exc, 300)
