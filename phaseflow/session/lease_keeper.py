"""The lease keeper: it renews a running turn's lease while the turn waits between its
commits (see :meth:`~phaseflow.session.runner.Runner.hold`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from phaseflow.stores.base import StoreError


class LeaseKeeper:
    """Renews a running turn's lease every third of its length, whatever the turn waits
    for. A turn renews it at its commits too, but between two commits it may wait longer
    than the lease lasts (a model streaming for seconds on a loaded worker, a slow tool):
    unrenewed, the lease would expire under a live turn, and another worker's sweep would
    take the turn over and fence this one's next commit. A renewal that fails (the store
    unreachable) is tried again at the next tick; one refused (another worker took the
    session) ends the keeping: the turn's next commit is refused."""

    def __init__(self, lease: float, renew: Callable[[], Awaitable[bool]]) -> None:
        #: one renewal (the runner's ``keep_lease``): False when there is nothing more
        #: to keep
        self._renew_once = renew
        self._loop = asyncio.get_running_loop()
        self._every = max(lease / 3, 0.01)
        self._stopped = False
        #: the next renewal's timer (a turn shorter than a third of the lease costs only
        #: this); a renewal runs as a task of its own while it is due
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, lease: float, renew: Callable[[], Awaitable[bool]]) -> LeaseKeeper:
        """A keeper renewing a lease of ``lease`` seconds by ``renew``, from now on."""
        keeper = cls(lease, renew)
        keeper._handle = keeper._loop.call_later(keeper._every, keeper._due)
        return keeper

    def _due(self) -> None:
        self._handle = None
        if not self._stopped:
            self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            kept = await self._renew_once()
        except (StoreError, OSError):
            kept = True  # the store is unreachable now: the next tick tries again
        if kept and not self._stopped:
            self._handle = self._loop.call_later(self._every, self._due)

    async def stop(self) -> None:
        """Stop renewing (a renewal under way finishes first: never cut mid-query)."""
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        error = None if task.cancelled() else task.exception()
        if error is not None:  # not the store's (those are retried): shown where it lets go
            raise error
