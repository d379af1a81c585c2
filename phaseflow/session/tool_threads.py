"""Sync tools with a timeout, each in a daemon thread of its own: the deadline ends the
runner's wait even while the function runs, and the thread is kept while it runs, so
that a cancelled turn can wait for it (see :meth:`Runner._stopping
<phaseflow.session.runner.Runner._stopping>`); a call past its deadline as the model is
told it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from dataclasses import dataclass
from typing import Any

from phaseflow.session.values import Done
from phaseflow.tools.function import FunctionTool, ToolContext
from phaseflow.turn.messages import ToolCall, ToolOutcome


@dataclass(slots=True)
class ToolThread:
    """A sync tool's thread: its call, when it started and its deadline
    (``time.perf_counter``), and, once ``ended``, what it returned or raised."""

    call: ToolCall
    started: float
    deadline: float
    ended: asyncio.Event
    value: Any = None
    error: BaseException | None = None


async def in_thread(fn: FunctionTool, call: ToolCall, ctx: ToolContext, deadline: float,
                    threads: dict[str, ToolThread]) -> Any:
    """``fn`` called in a daemon thread of its own, awaited without blocking the loop;
    the thread is kept (in ``threads``, by call id) until it ends, so that a cancelled
    turn can wait for it. A wait that is cancelled leaves the thread to finish on its
    own."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    t = ToolThread(call, time.perf_counter(), deadline, asyncio.Event())
    arguments = call.argument_value()
    context = contextvars.copy_context()

    def ended(value: Any, error: BaseException | None) -> None:
        t.value, t.error = value, error
        t.ended.set()
        if threads.get(call.id) is t:
            del threads[call.id]
        if future.done():
            return  # the wait was cancelled (a timeout, a cancel): read from ``t``
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value, error = context.run(asyncio.run, fn.invoke(arguments, ctx)), None
        except BaseException as exc:  # handed to the awaiting coroutine, not lost here
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # (a loop closed meanwhile)
            loop.call_soon_threadsafe(ended, value, error)

    threads[call.id] = t
    threading.Thread(target=work, name="phaseflow-tool", daemon=True).start()
    return await future


def timed_out(call: ToolCall, timeout: float, threaded: bool) -> Done:
    """A call past its deadline. An async tool was cancelled at its ``await``: an error.
    A sync tool's thread runs on (nothing can stop it), so what it does is not known:
    ``unknown``, and the model is told not to take it as a failure."""
    if not threaded:
        return Done(ToolOutcome.error(f"{call.name} timed out after {timeout:g} s"), "error")
    return Done(ToolOutcome.error(
        f"{call.name} timed out after {timeout:g} s; it may still complete, so its "
        f"outcome is unknown: do not assume it failed, and do not call it again to "
        f"retry"), "unknown")
