"""A worker's periodic sweep for turns whose worker died: a session stored as
``running`` whose lease has expired (or whose holder is a process of this machine that
no longer exists) is finished here, as ``phaseflow sessions recover`` does (completed
calls keep their results, an admitted call without one is reported unknown unless its
tool is idempotent, the turn goes on, then what was queued).

The next request for such a session finishes it too (the Session API takes an expired
lease over by itself); the sweep is for the sessions nobody writes to.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from phaseflow.errors import PhaseflowError
from phaseflow.serve.hub import Hub
from phaseflow.serve.problems import Problem
from phaseflow.session import events as ev
from phaseflow.session.agent import Session
from phaseflow.session.workers import holder_is_gone
from phaseflow.stores.base import SessionsPage, SessionSummary, StoreError


async def _recover(session: Session) -> AsyncIterator[ev.Event]:
    for event in await session.recover():
        yield event


#: sessions read from the store's index at a time, looking for running ones
SWEEP_PAGE = 500


async def _running(hub: Hub) -> list[SessionSummary]:
    """The stored sessions whose status is ``running``, read page by page from the
    store's index of statuses (never every session stored)."""
    found: list[SessionSummary] = []
    page = SessionsPage(SWEEP_PAGE, status="running")
    while True:
        rows = await hub.store.sessions_page(page)
        found += rows
        if len(rows) < page.limit:
            return found
        page = dataclasses.replace(page, before=(rows[-1].updated_at, rows[-1].session_id))


async def sweep_once(hub: Hub) -> int:
    """Start recovering every abandoned turn this server can serve; how many."""
    started = 0
    for summary in await _running(hub):
        served = hub.served.get(summary.workflow)
        sid = summary.session_id
        if (summary.status != "running" or served is None or hub.running_here(sid)
                or hub.draining):
            continue
        lease = await hub.store.lease(sid)
        if lease is not None and lease.expires > served.agent.config.clock() and not (
                holder_is_gone(lease.owner)):
            continue
        try:
            await hub.submit(served, sid, _recover)
        except Problem:
            continue
        hub.log.line("recover", "finishing a turn its worker left", session=sid,
                     turn=summary.turn)
        started += 1
    return started


async def sweep_forever(hub: Hub, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await sweep_once(hub)
        except (StoreError, PhaseflowError) as exc:
            hub.log.line("error", "the sweep failed; it runs again", error=type(exc).__name__)
