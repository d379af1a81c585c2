"""A worker's timer loop: the sessions whose next timer is due (read from the store's
index of deadlines, never every session) each get a server-owned turn that fires it
(:meth:`~phaseflow.session.agent.Session.fire_timer`). Several workers may run the loop
on one store: each timer's turn runs under its session's lease, and a timer spent by
another worker's turn is seen as spent, so each fires once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from phaseflow.errors import PhaseflowError
from phaseflow.serve.hub import Hub
from phaseflow.serve.problems import Problem
from phaseflow.session import events as ev
from phaseflow.session.agent import Session
from phaseflow.stores.base import StoreError

#: due sessions read from the index at a time
TIMERS_PAGE = 1000


async def _fire(session: Session) -> AsyncIterator[ev.Event]:
    async for event in session.firing_timer():
        yield event


async def fire_due(hub: Hub) -> int:
    """Start a timer turn for every due session this server serves; how many started."""
    if not hub.served:
        return 0
    started = 0
    clock = next(iter(hub.served.values())).agent.config.clock
    for session_id, _due in await hub.store.due_timers(clock(), TIMERS_PAGE):
        if hub.draining or hub.running_here(session_id):
            continue
        record = await hub.store.load(session_id)
        served = None if record is None else hub.served.get(record.workflow)
        if served is None:
            continue
        try:
            await hub.submit(served, session_id, _fire)
        except Problem:
            continue
        started += 1
    return started


async def timers_forever(hub: Hub, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            started = await fire_due(hub)
            if started:
                hub.log.line("timers", "firing due timers", count=started)
        except (StoreError, PhaseflowError) as exc:
            hub.log.line("error", "the timer loop failed; it runs again",
                         error=type(exc).__name__)
