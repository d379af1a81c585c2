"""One accepted message or decision: the server-owned task that runs it, and everything
it produced so far, for the requests that follow it.

The task belongs to the server, not to the request: a client that disconnects stops
reading, the turn goes on (only ``POST .../cancel`` cancels). Any number of readers
follow an :class:`Accepted` from its first event (the request that sent it, a retry
with the same ``Idempotency-Key``), each at its own pace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from phaseflow.serve.problems import Problem
from phaseflow.session import events as ev


class Accepted:
    """What one accepted request started. ``events``: the task's events in order
    (persisted ones with their ``seq``, text deltas with seq 0); ``problem``: why it
    was refused once it ran (another worker's turn with ``busy=reject``, a finished
    session); ``queued``: its place in a queue when it started no turn of its own."""

    def __init__(self, session_id: str, fingerprint: str, phase: str) -> None:
        self.session_id = session_id
        self.fingerprint = fingerprint
        self.phase = phase
        self.events: list[ev.Event] = []
        self.problem: Problem | None = None
        self.queued: int | None = None
        self.done = False
        self.started = time.monotonic()
        #: wall clock seconds at the start (a cancel asked by another worker is for this
        #: task when asked after it: ``rules.cancel_applies``)
        self.started_at = time.time()
        #: the ``Idempotency-Key`` it claimed in the store (let go when it stores nothing)
        self.key: str | None = None
        self._signal = asyncio.Event()

    def add(self, event: ev.Event) -> None:
        self.events.append(event)
        self._wake()

    def finish(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        signal, self._signal = self._signal, asyncio.Event()
        signal.set()

    async def wait(self, index: int) -> None:
        """Until there is an event at ``index`` or the task is over."""
        while len(self.events) <= index and not self.done:
            await self._signal.wait()

    def turn_over(self) -> bool:
        """The task's last event ends a turn or pauses it for a human: what remains of
        the task, unless another turn starts, is letting the session go."""
        return bool(self.events) and isinstance(self.events[-1],
                                                ev.TurnFinished | ev.ApprovalRequested)

    async def started_or_done(self) -> None:
        """Until the first event, or the end of a task that produced none."""
        await self.wait(0)

    async def follow(self, *, whole_task: bool = False) -> AsyncIterator[ev.Event]:
        """The events from the first, as they come, until the turn ends (its
        ``turn_finished``) or pauses (``approval_requested``), or with ``whole_task``
        until the task is over (the turns of messages queued meanwhile included)."""
        index = 0
        while True:
            await self.wait(index)
            if index >= len(self.events):
                return
            event = self.events[index]
            index += 1
            yield event
            if isinstance(event, ev.TurnFinished | ev.ApprovalRequested) and not whole_task:
                return  # the turn ended, or pauses until a human decides

    async def until_turn_end(self) -> None:
        async for _ in self.follow():
            pass

    def first_seq(self) -> int:
        return next((e.seq for e in self.events if e.seq), 0)

    def outcome(self) -> dict[str, Any]:
        """The turn's outcome as ``Accept: application/json`` answers it: its reply and
        status, the phase it ended in, the approval it waits for, its errors."""
        phase, turn, reply, status = self.phase, 0, "", "running"
        pending: dict[str, Any] | None = None
        errors: list[dict[str, str]] = []
        for event in self.events:
            turn = event.turn or turn
            if isinstance(event, ev.PhaseChanged):
                phase = event.to_phase
            elif isinstance(event, ev.ApprovalRequested):
                pending = {"call_id": event.call_id, "name": event.name,
                           "arguments": event.arguments,
                           "arguments_hash": event.arguments_hash, "reason": event.reason}
                status = "awaiting_approval"
                break
            elif isinstance(event, ev.ApprovalResolvedEvent):
                pending = None
            elif isinstance(event, ev.ErrorEvent):
                errors.append({"code": event.code, "message": event.message})
            elif isinstance(event, ev.TurnFinished):
                reply, status = event.reply, event.status
                break
        first = self.first_seq()
        return {"session_id": self.session_id, "turn": turn, "status": status,
                "reply": reply, "phase": phase, "pending_approval": pending,
                "errors": errors,
                "events": events_url(self.session_id, max(first - 1, 0))}


def events_url(session_id: str, after: int) -> str:
    from urllib.parse import quote

    return f"/v1/sessions/{quote(session_id, safe='')}/events?after={after}"
