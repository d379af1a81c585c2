"""The "poll patched" variant of ``langgraph dev``'s in-memory run queue.

As shipped, the queue's loop (``langgraph_runtime_inmem.queue.queue``) asks
``Runs.next(wait=True)`` for work whenever its previous pass found none, and that call
starts with an unconditional ``asyncio.sleep(0.5)``. ``Runs.next`` also reads the clock
*before* that sleep and takes only runs created before that instant, so a run created
during a sleep is skipped by the pass that sleep belongs to and started by the next one,
after another full 0.5 s: a lone client's turn takes about 1 s whatever the graph costs.

The patch keeps the queue's logic and its 0.5 s ceiling and only ends the sleep early:
``Runs.put`` (which appends the new run to the store) sets an event, and the waiting
``Runs.next`` waits for that event for at most 0.5 s instead of sleeping, then runs the
shipped ``Runs.next`` without its sleep (``wait=False``), so the run is picked, checked
and started by the server's own code. Nothing else changes: the same scan of the store,
the same worker, the same checkpointer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

POLL = 0.5  # the shipped poll period, kept as the ceiling of the wait

_wakeup: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None


def _event() -> asyncio.Event:
    """The event of the loop the queue runs on, made on first use there."""
    global _wakeup
    loop = asyncio.get_running_loop()
    if _wakeup is None or _wakeup[0] is not loop:
        _wakeup = (loop, asyncio.Event())
    return _wakeup[1]


def _wake() -> None:
    if _wakeup is None:
        return
    loop, event = _wakeup
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        event.set()
    else:
        loop.call_soon_threadsafe(event.set)


def apply() -> None:
    """Patch ``Runs.next`` and ``Runs.put`` of the in-memory runtime (once)."""
    from langgraph_runtime_inmem import ops  # type: ignore[import-not-found]

    runs: Any = ops.Runs
    if getattr(runs, "_bench_woken", False):
        return
    shipped_next = runs.next
    shipped_put = runs.put

    async def woken_next(wait: bool, limit: int = 1) -> AsyncIterator[Any]:
        if wait:
            event = _event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), POLL)
            # cleared before the scan: a run appended before this line is seen by the
            # scan; one appended after sets the event again for the next wait
            event.clear()
        async for item in shipped_next(wait=False, limit=limit):
            yield item

    async def woken_put(*args: Any, **kwargs: Any) -> Any:
        result = await shipped_put(*args, **kwargs)
        _wake()
        return result

    runs.next = staticmethod(woken_next)
    runs.put = staticmethod(woken_put)
    runs._bench_woken = True
