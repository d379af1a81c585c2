"""The MCP servers of one agent, connected on an event loop of their own (:class:`McpHub`).

An agent is made without an event loop (``Agent(...)`` is a plain constructor) and its
sessions may run on any loop - the host's, ``phaseflow run``'s, or the private loop of
each synchronous twin (``send_sync``) - while a server's connection must stay on the
loop that opened it for its whole life. So the hub runs one daemon thread with one loop,
where every server's connection task (:class:`~phaseflow.mcp.link.Link`) lives, and a
call from any loop is handed to it (``run_coroutine_threadsafe``) and awaited there:
cancelling the caller's await cancels the call on the hub's loop too.

Made, the hub has connected every server and listed its tools, or raised
:class:`~phaseflow.mcp.link.McpServerError` naming the first server that did not start
(after stopping those that did). :meth:`close` stops every server (stdio servers'
processes end) and the thread; it also runs at interpreter exit, for a host that forgot.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

import mcp_types

from phaseflow.mcp.config import ServerConfig
from phaseflow.mcp.link import Link, McpCallError, McpServerError

__all__ = ["McpHub"]

T = TypeVar("T")


class McpHub:
    """Connected MCP servers, by name. Thread-safe to call; :meth:`close` once done."""

    def __init__(self, servers: Mapping[str, ServerConfig]) -> None:
        #: called with a server's name, on the hub's thread, when its tool list changed
        #: (the agent's tools follow it: :func:`phaseflow.mcp.attach.attach`)
        self.listeners: list[Callable[[str], None]] = []
        self.links = {name: Link(server, timeout=server.timeout, listeners=self.listeners)
                      for name, server in servers.items()}
        #: the longest a server may take to start or stop
        self.timeout = max((s.timeout for s in servers.values()), default=30.0)
        self._closed = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="phaseflow-mcp",
                                        daemon=True)
        self._thread.start()
        atexit.register(self.close)
        try:
            self._wait(self._open_all())
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    def tools(self, server: str) -> dict[str, mcp_types.Tool]:
        """Server ``server``'s tools as last listed (refreshed when it says they changed)."""
        return dict(self.links[server].tools)

    async def call(self, server: str, tool: str, arguments: Mapping[str, Any], *,
                   meta: Mapping[str, Any] | None = None) -> mcp_types.CallToolResult:
        """Call ``tool`` of ``server`` from any event loop (see the module docstring);
        ``meta``: the request's ``_meta``."""
        if self._closed:
            raise McpCallError(f"MCP server {server!r} is closed (the agent was closed)")
        future = asyncio.run_coroutine_threadsafe(
            self.links[server].call(tool, arguments, meta=meta), self._loop)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop every server and the hub's thread (waits for them). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(
                    self.timeout + 20)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not threading.current_thread():
            self._thread.join(self.timeout + 20)
        if not self._thread.is_alive():
            self._loop.close()

    async def aclose(self) -> None:
        """:meth:`close`, awaited without blocking the caller's loop."""
        await asyncio.to_thread(self.close)

    # --- on the hub's loop ----------------------------------------------------------------

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro,
                                                                                 self._loop)
        return future.result()

    async def _open_all(self) -> None:
        """Open every link at once; the first failure (in the file's order) is raised."""
        results = await asyncio.gather(*(link.open() for link in self.links.values()),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, McpServerError):
                    raise McpServerError(str(result))
                raise result

    async def _close_all(self) -> None:
        await asyncio.gather(*(link.close() for link in self.links.values()),
                             return_exceptions=True)
        # a call still waiting here would never be answered once the loop stops: its
        # caller gets the cancellation instead of waiting for ever
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
