"""Server-sent events: a turn's events, and a session's events stream that resumes.

Every persisted event goes out with ``id: SEQ`` (the store's sequence), so a client's
position is the standard ``Last-Event-ID``; text deltas go out without an id (they are
live only, and never move the position). sse-starlette writes the frames and the
heartbeat comments; nothing here formats SSE by hand.

A session's stream sends what the store has after the client's position, then what
happens: the turns of this process announce their events at once; the store is read
again every ``poll`` seconds for the turns of other processes (and whenever an announced
event is not the next one), so the stream is the store's log, in order, with no event
twice and none lost, whichever worker runs the turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from sse_starlette import ServerSentEvent

from phaseflow.serve.hub import Hub
from phaseflow.serve.logs import Log
from phaseflow.serve.views import event_json
from phaseflow.session import events as ev
from phaseflow.stores.base import StoreError

#: a stream's items: frames, or frames already encoded together (bytes)
T = TypeVar("T")

#: the reconnection delay a browser's EventSource is told to use, in milliseconds
RETRY_MS = 1000


def frame(data: dict[str, Any], seq: int = 0) -> ServerSentEvent:
    """One event: ``id`` for a persisted one, none for a live-only one."""
    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False, separators=(",", ":")),
                           id=str(seq) if seq else None)


def event_frame(event: ev.Event) -> ServerSentEvent:
    return frame(event.to_json(), event.seq)


async def guarded(frames: AsyncIterator[T], log: Log, session_id: str) -> AsyncIterator[T]:
    """``frames``, ending the stream with one log line (never a traceback) should the
    server fail while it streams; the client reconnects and resumes."""
    try:
        async for item in frames:
            yield item
    except Exception as exc:
        log.line("error", "a stream failed inside the server", session=session_id,
                 error=type(exc).__name__)


async def session_stream(hub: Hub, session_id: str, after: int, poll: float
                         ) -> AsyncIterator[ServerSentEvent]:
    """The session's events after ``after``, then live ones, until the client leaves or
    the server stops."""
    follower = hub.follow(session_id)  # before the store is read: nothing falls between
    position = after
    closing = asyncio.ensure_future(hub.closing.wait())
    try:
        yield ServerSentEvent(retry=RETRY_MS, comment="phaseflow events")
        while not hub.closing.is_set():
            try:
                stored = await hub.store.events(session_id, position)
            except StoreError:
                stored = ()  # the next poll tries again; the client keeps its position
            for item in stored:
                if item.seq > position:
                    position = item.seq
                    yield frame(event_json(item), item.seq)
            follower.lagging = False
            deadline = asyncio.get_running_loop().time() + poll
            while not follower.lagging and not hub.closing.is_set():
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                getter = asyncio.ensure_future(follower.queue.get())
                poked = asyncio.ensure_future(follower.poked.wait())
                await asyncio.wait({getter, closing, poked}, timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)
                poked.cancel()
                if follower.poked.is_set():
                    follower.poked.clear()
                    if not getter.done():
                        getter.cancel()
                        break  # another worker committed: read the store now
                if not getter.done():
                    getter.cancel()
                    break
                event = getter.result()
                if not event.seq:
                    yield event_frame(event)  # a text delta: live only, no id
                elif event.seq == position + 1:
                    position = event.seq
                    yield event_frame(event)
                elif event.seq > position:
                    break  # something came between: read the store from the position
    finally:
        closing.cancel()
        hub.unfollow(session_id, follower)
