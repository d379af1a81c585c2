"""A worker's timer loop: the sessions whose next timer is due, read a page at a time
from the store's index of deadlines with their records
(:meth:`~phaseflow.stores.base.Store.due_sessions`: one read a page, never a read per
session), each get a server-owned turn that fires it
(:meth:`~phaseflow.session.agent.Session.firing_timer`), at most ``concurrency`` at
once; the next page is read as soon as half of those slots are free
(:mod:`phaseflow.session.firing` decides). Several workers may run the loop on one
store: each timer's turn runs under its session's lease, a session whose lease another
worker holds is passed over, and a timer spent by another worker's turn is seen as
spent, so each fires once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable

from phaseflow.errors import PhaseflowError
from phaseflow.serve.hub import Action, Hub
from phaseflow.serve.problems import Problem
from phaseflow.serve.turns import Accepted
from phaseflow.session import events as ev
from phaseflow.session import firing
from phaseflow.session.agent import Session
from phaseflow.session.workers import holder_is_gone
from phaseflow.stores.base import StoreError


def _firing(freed: Callable[[], None]) -> Action:
    """The task's action: the session's timer turn; ``freed`` told when it is over."""
    async def fire(session: Session) -> AsyncIterator[ev.Event]:
        try:
            async for event in session.firing_timer():
                yield event
        finally:
            freed()
    return fire


class TimerLoop:
    """One worker's timer turns in flight, and the sweeps that start them."""

    def __init__(self, hub: Hub, concurrency: int = firing.CONCURRENCY) -> None:
        self.hub = hub
        self.concurrency = concurrency
        #: the sessions whose timer turn this loop started and which have not ended
        self.in_flight: dict[str, Accepted] = {}
        self._room = asyncio.Event()
        #: damaged sessions already logged (each is named once, not at every sweep)
        self._damaged: set[str] = set()

    def _freed(self, session_id: str) -> None:
        """The timer turn of ``session_id`` is over: its slot is free (its task may
        still be letting the session go; the hub knows it runs there until then)."""
        self.in_flight.pop(session_id, None)
        self._room.set()

    def _prune(self) -> None:
        """Slots of tasks that ended without running their turn (refused, cancelled)."""
        for sid in [s for s, a in self.in_flight.items() if a.done]:
            del self.in_flight[sid]

    async def _room_for_more(self, every: float) -> None:
        """Until a timer turn ends (or ``every`` seconds passed)."""
        self._room.clear()
        self._prune()
        if firing.to_read(len(self.in_flight), self.concurrency):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), every)

    async def sweep(self, every: float) -> int:
        """Start a timer turn for every due session this server serves (reading the
        index from its soonest deadline to its end, or to the first deadline not yet
        due); how many started."""
        hub = self.hub
        if not hub.served:
            return 0
        clock = next(iter(hub.served.values())).agent.config.clock
        workflows = tuple(hub.served)
        after: tuple[float, str] | None = None
        started = 0
        while not hub.draining:
            self._prune()
            wanted = firing.to_read(len(self.in_flight), self.concurrency)
            if not wanted:
                await self._room_for_more(every)
                continue
            now = clock()
            page = await hub.store.due_sessions(now, wanted, after=after,
                                                workflows=workflows)
            gone = frozenset(o for o in firing.holders(page, now) if holder_is_gone(o))
            plan = firing.plan_page(
                page, asked=wanted, slots=wanted, now=now,
                in_flight=self.in_flight.keys() | hub.live_sessions(), gone=gone,
                workflows=workflows)
            for sid, problem in plan.damaged:
                if sid not in self._damaged:
                    self._damaged.add(sid)
                    hub.log.line("error", "a session's timer cannot fire: the session "
                                 "cannot be read", session=sid, error=problem)
            for due in plan.fire:
                if hub.draining or due.record is None:
                    break
                try:
                    accepted, _ = await hub.submit(
                        hub.served[due.record.workflow], due.session_id,
                        _firing(functools.partial(self._freed, due.session_id)),
                        record=due.record)
                except Problem:
                    continue
                if not accepted.done:  # (a turn over already has freed its slot)
                    self.in_flight[due.session_id] = accepted
                started += 1
            after = plan.after
            if not plan.more:
                break
        return started


async def timers_forever(hub: Hub, every: float,
                         concurrency: int = firing.CONCURRENCY) -> None:
    """Sweep the index of timers every ``every`` seconds (a sweep reads it to its end,
    starting the turns of the due sessions as slots free up)."""
    loop = TimerLoop(hub, concurrency)
    while True:
        try:
            started = await loop.sweep(every)
            if started:
                hub.log.line("timers", "firing due timers", count=started)
        except (StoreError, PhaseflowError) as exc:
            hub.log.line("error", "the timer loop failed; it runs again",
                         error=type(exc).__name__)
        await asyncio.sleep(every)
