"""PostgreSQL ``LISTEN``/``NOTIFY`` between the workers of one database: a worker that
commits a session's events says so on the channel :data:`CHANNEL` (the payload is the
session id); every worker listens, and wakes the event streams it has open on that
session, which read the store at once instead of at their next poll.

Only ``phaseflow serve`` workers notify (the store itself does not), so a commit by
another writer (``phaseflow sessions recover``, a host's own process) reaches the
streams at the next poll (``--poll``), as with SQLite. A lost connection is opened again;
meanwhile the polling carries the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from phaseflow.serve.hub import Hub

CHANNEL = "phaseflow_events"


class Notifier:
    def __init__(self, hub: Hub, dsn: str) -> None:
        self.hub = hub
        self.dsn = dsn
        self._pending: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.hub.on_commit = self._pending.put_nowait
        self._tasks = [loop.create_task(self._listen()), loop.create_task(self._notify())]

    async def stop(self) -> None:
        self.hub.on_commit = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _connect(self) -> Any:
        import psycopg

        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def _listen(self) -> None:
        while True:
            try:
                conn = await self._connect()
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    async for note in conn.notifies():
                        self.hub.poke(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the polling carries the streams meanwhile
                self.hub.log.line("notify", "listening failed; trying again",
                                  error=type(exc).__name__)
                await asyncio.sleep(1)

    async def _notify(self) -> None:
        while True:
            try:
                conn = await self._connect()
                async with conn:
                    while True:
                        sid = await self._pending.get()
                        sessions = {sid}
                        while not self._pending.empty():  # a burst: once per session
                            sessions.add(self._pending.get_nowait())
                        for one in sessions:
                            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, one))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.hub.log.line("notify", "notifying failed; trying again",
                                  error=type(exc).__name__)
                await asyncio.sleep(1)
