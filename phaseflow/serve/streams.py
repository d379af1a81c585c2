"""Server-sent events: a turn's events, and a session's events stream that resumes.

Every persisted event goes out with ``id: SEQ`` (the store's sequence), so a client's
position is the standard ``Last-Event-ID``; text deltas go out without an id (they are
live only, and never move the position). sse-starlette's ``ServerSentEvent`` encodes
every frame and heartbeat comment; nothing here formats SSE by hand. Lines end with
``\n`` (:data:`SEP`), never sse-starlette's default ``\r\n``: both are legal SSE, but
the clients people use split on ``\n\n`` (the official AG-UI client among them).

A session's stream sends what the store has after the client's position, then what
happens: the turns of this process announce their events at once; the store is read
again every ``poll`` seconds for the turns of other processes (and whenever an announced
event is not the next one), so the stream is the store's log, in order, with no event
twice and none lost, whichever worker runs the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from phaseflow.serve.hub import Hub
from phaseflow.serve.logs import Log
from phaseflow.serve.turns import Accepted
from phaseflow.serve.views import event_json
from phaseflow.session import events as ev
from phaseflow.stores.base import StoreError

#: a stream's items: frames, or frames already encoded together (bytes)
T = TypeVar("T")

#: the reconnection delay a browser's EventSource is told to use, in milliseconds
RETRY_MS = 1000

#: the line ending of every SSE line this server sends (a frame ends with two)
SEP = "\n"


def frame(data: dict[str, Any], seq: int = 0) -> ServerSentEvent:
    """One event: ``id`` for a persisted one, none for a live-only one."""
    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False, separators=(",", ":")),
                           id=str(seq) if seq else None, sep=SEP)


def ping() -> ServerSentEvent:
    """A heartbeat comment (also what :class:`EventSourceResponse` sends: ``pinged``)."""
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=SEP)


def pinged(content: AsyncIterator[Any], heartbeat: float) -> EventSourceResponse:
    """An SSE response of ``content`` with a heartbeat comment after ``heartbeat`` quiet
    seconds, every line ended by :data:`SEP`."""
    return EventSourceResponse(content, ping=heartbeat, sep=SEP, ping_message_factory=ping)


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


def unfinished(accepted: Accepted) -> dict[str, Any]:
    """The last frame of a turn's stream whose task ended before the turn did (the store
    failed, another message interrupted it): a live-only ``error`` event with the
    problem the JSON answer carries, so a client never sees a stream just stop."""
    problem = accepted.problem
    data: dict[str, Any] = {
        "type": "error", "session_id": accepted.session_id, "seq": 0,
        "code": problem.code if problem else "turn_incomplete",
        "message": problem.detail if problem else
        "the turn ended without turn_finished; follow the session's events"}
    if problem is not None:
        data["problem"] = problem.to_json()
    return data


class TurnStream(Response):
    """A turn's events as the answer to its message (``Accept: text/event-stream``):
    the frames of the events that came together written in one send, a heartbeat
    comment after ``heartbeat`` quiet seconds, the end with the turn's end or pause.

    Written directly, not by sse-starlette's response: that one runs four tasks per
    response (the stream, the heartbeat, the client's disconnect, the server's exit)
    under an anyio task group, and a timeout scope around every send - most of what an
    SSE turn cost beyond a JSON one. None of it is needed here: the turn belongs to the
    server (a client that leaves only stops being written to: the server drops what is
    sent to a closed connection) and the stream ends with the turn, also when the
    server stops (running turns get their grace period). The frames are still
    sse-starlette's (:class:`ServerSentEvent`)."""

    media_type = "text/event-stream"

    def __init__(self, accepted: Accepted, heartbeat: float, log: Log,
                 headers: Mapping[str, str] | None = None) -> None:
        self.accepted = accepted
        self.heartbeat = heartbeat
        self.log = log
        self.status_code = 200
        self.background = None
        # sse-starlette's headers: no cache may keep it, no proxy may buffer it
        self.init_headers({**(headers or {}), "Cache-Control": "no-store",
                           "Connection": "keep-alive", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        try:
            async for chunk in self._chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except OSError:
            return  # the client has gone: the turn goes on without it
        except Exception as exc:  # as guarded(): one log line, never a traceback
            self.log.line("error", "a stream failed inside the server",
                          session=self.accepted.session_id, error=type(exc).__name__)
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _chunks(self) -> AsyncIterator[bytes]:
        accepted, index = self.accepted, 0
        while True:
            try:
                async with asyncio.timeout(self.heartbeat):
                    await accepted.wait(index)
            except TimeoutError:
                yield ping().encode()
                continue
            events = accepted.events[index:]
            if not events:  # the task is over, and its turn did not end
                yield frame(unfinished(accepted)).encode()
                return
            batch = []
            for event in events:
                batch.append(event_frame(event).encode())
                if isinstance(event, ev.TurnFinished | ev.ApprovalRequested):
                    yield b"".join(batch)
                    return  # the turn ended, or pauses until a human decides
            index += len(batch)
            yield b"".join(batch)


async def session_stream(hub: Hub, session_id: str, after: int, poll: float
                         ) -> AsyncIterator[ServerSentEvent]:
    """The session's events after ``after``, then live ones, until the client leaves or
    the server stops."""
    follower = hub.follow(session_id)  # before the store is read: nothing falls between
    position = after
    closing = asyncio.ensure_future(hub.closing.wait())
    try:
        yield ServerSentEvent(retry=RETRY_MS, comment="phaseflow events", sep=SEP)
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
