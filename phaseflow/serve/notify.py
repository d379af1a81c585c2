"""PostgreSQL ``LISTEN``/``NOTIFY`` between the workers of one database: a worker that
commits a session's events says so on the channel :data:`CHANNEL` (the payload is the
session id); every worker listens, and wakes the event streams it has open on that
session, which read the store at once instead of at their next poll.

Only ``phaseflow serve`` workers notify (the store itself does not), so a commit by
another writer (``phaseflow sessions recover``, a host's own process) reaches the
streams at the next poll (``--poll``), as with SQLite. A lost connection is opened again;
meanwhile the polling carries the streams.

A cancel asked of a worker that does not run the turn goes out on :data:`CANCELS`
(the payload is the session id): the worker that runs it cancels it as ``POST
.../cancel`` does there (its tools stopped, a sync tool's thread included).

A steering message stored for a turn another worker runs is announced on :data:`STEERS`
(the payload is the session id): the worker that runs the turn reads the session's
queue before the turn's next model request and delivers the message there (without
the announcement, a PostgreSQL queue is read only when the turn ends).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from phaseflow.serve.hub import Hub

CHANNEL = "phaseflow_events"
#: the channel of cancel requests (the payload: the session id)
CANCELS = "phaseflow_cancels"
#: the channel of steering messages stored for a running turn (the payload: the session id)
STEERS = "phaseflow_steers"


class Notifier:
    def __init__(self, hub: Hub, dsn: str) -> None:
        self.hub = hub
        self.dsn = dsn
        #: (channel, session id) to notify
        self._pending: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.hub.on_commit = lambda sid: self._pending.put_nowait((CHANNEL, sid))
        self.hub.on_cancel = lambda sid: self._pending.put_nowait((CANCELS, sid))
        self.hub.on_steer = lambda sid: self._pending.put_nowait((STEERS, sid))
        self._tasks = [loop.create_task(self._listen()), loop.create_task(self._notify())]

    async def stop(self) -> None:
        self.hub.on_commit = None
        self.hub.on_cancel = None
        self.hub.on_steer = None
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
                    await conn.execute(f"LISTEN {CANCELS}")
                    await conn.execute(f"LISTEN {STEERS}")
                    async for note in conn.notifies():
                        if note.channel == CANCELS:
                            self.hub.cancel_asked(note.payload)
                        elif note.channel == STEERS:
                            self.hub.steering_stored(note.payload)
                        else:
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
                        first = await self._pending.get()
                        notes = {first}
                        while not self._pending.empty():  # a burst: once per session
                            notes.add(self._pending.get_nowait())
                        for channel, one in notes:
                            await conn.execute("SELECT pg_notify(%s, %s)", (channel, one))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.hub.log.line("notify", "notifying failed; trying again",
                                  error=type(exc).__name__)
                await asyncio.sleep(1)
