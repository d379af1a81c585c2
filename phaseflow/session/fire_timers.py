"""The shell that fires due timers (:meth:`Agent.fire_timers
<phaseflow.session.agent.Agent.fire_timers>`): it reads the store's due sessions a page at
a time and runs their timer turns, at most ``concurrency`` at once, as the pure planner
:mod:`phaseflow.session.firing` decides; what it ran and what could not fire, counted."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.session import firing
from phaseflow.session.workers import holder_is_gone
from phaseflow.stores.base import SessionRecord, Store


class TimersFired(int):
    """How many timer turns :meth:`Agent.fire_timers
    <phaseflow.session.agent.Agent.fire_timers>` ran (it *is* that number), with
    ``problems``: the sessions whose timer could not fire, as ``(session id, why)`` (a
    damaged session, one whose turn failed with a store or session error)."""

    problems: tuple[tuple[str, str], ...]

    def __new__(cls, fired: int, *, problems: tuple[tuple[str, str], ...] = ()
                ) -> TimersFired:
        value = super().__new__(cls, fired)
        value.problems = problems
        return value


def _count(name: str, value: object, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer of at least {low}, not {value!r}")
    return value


def _gone(owners: frozenset[str]) -> frozenset[str]:
    """The lease holders of ``owners`` that are stopped processes of this machine."""
    return frozenset(o for o in owners if holder_is_gone(o))


async def fire_due(store: Store, clock: Callable[[], float], workflow: str,
                   fire: Callable[[SessionRecord], Awaitable[bool]], *, limit: int,
                   concurrency: int) -> TimersFired:
    """Up to ``limit`` timer turns of ``workflow``'s due sessions in ``store``, soonest
    first, at most ``concurrency`` at once; ``fire(record)`` runs one (True: it ran).
    A session whose turn fails with a :class:`PhaseflowError` is one of the result's
    ``problems`` and stops no other."""
    limit = _count("limit", limit, low=0)
    concurrency = _count("concurrency", concurrency, low=1)
    running: dict[str, asyncio.Task[bool]] = {}
    problems: list[tuple[str, str]] = []
    fired = started = 0
    after: tuple[float, str] | None = None
    sweeping = True
    try:
        while True:
            wanted = min(firing.to_read(len(running), concurrency), limit - started)
            if sweeping and wanted > 0:
                now = clock()
                page = await store.due_sessions(now, wanted, after=after, workflows=(workflow,))
                plan = firing.plan_page(
                    page, asked=wanted, slots=wanted, now=now, in_flight=running,
                    gone=_gone(firing.holders(page, now)), workflows=(workflow,))
                problems.extend(plan.damaged)
                after, sweeping = plan.after, plan.more
                for due in plan.fire:
                    assert due.record is not None
                    running[due.session_id] = asyncio.ensure_future(fire(due.record))
                started += len(plan.fire)
                if plan.fire or plan.more:
                    continue
            if not running:
                return TimersFired(fired, problems=tuple(problems))
            done, _ = await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
            for sid, task in list(running.items()):
                if task not in done:
                    continue
                del running[sid]
                try:
                    fired += task.result()
                except PhaseflowError as exc:
                    problems.append((sid, str(exc)))
    finally:
        for task in running.values():
            task.cancel()
        if running:
            await asyncio.wait(running.values())
