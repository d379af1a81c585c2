"""The two drivers of a move: one calls host callables, the other awaits them.

Every move of the machine is written once (:mod:`phaseflow.machine.plan`) as a *plan*:
the move's answer when nothing has to be called, else its *steps*, a generator that
yields a :class:`Call` wherever a host callable must run (a ``call`` effect, a
preparation) and receives what it returned, or has what it raised thrown in at that
``yield``, and yields the move's answer last. The steps never call a host callable of an
effect themselves; a driver does:

- :func:`run_sync` calls it; an awaitable it returns (an ``async def`` callable) is run
  to completion without an event loop when it never suspends, and when it does suspend it
  is closed and :class:`Suspended` is thrown in instead (the steps report it);
- :func:`run_async` calls it and awaits an awaitable it returns.

Nothing else differs between a ``*_sync`` method and its coroutine. A ``BaseException``
that is not an ``Exception`` (``KeyboardInterrupt``, task cancellation,
``GeneratorExit``) is thrown in as well: the steps do not catch it, so their ``finally``
clauses run (the machine stops being busy; a transition past its switch keeps its
history) before it propagates out of the driver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from inspect import isawaitable
from types import GeneratorType
from typing import Any, NamedTuple, TypeAlias, TypeVar, overload

__all__ = ["Call", "Calls", "Plan", "Steps", "Suspended", "run_async", "run_sync"]

T = TypeVar("T")


class Call(NamedTuple):
    """What steps ask of a driver: run ``fn(context, **args)`` and send back its result."""

    fn: Callable[..., Any]
    context: object
    args: Mapping[str, Any]


#: A part of a move that may call (a list of effects, a target's preparations): it yields
#: the calls to make and returns its value to the move, which runs it with ``yield from``.
Calls: TypeAlias = Generator[Call, Any, T]
#: A move's steps: they yield the calls to make and then, once and last, the move's
#: answer (anything but a :class:`Call`), so that a driver takes the answer without the
#: ``StopIteration`` a returned value costs (a boundary's tenth of a microsecond).
Steps: TypeAlias = Generator[Call | T, Any, None]
#: A move: its answer when nothing has to run, else its steps.
Plan: TypeAlias = T | Steps[T]


class Suspended(Exception):
    """Thrown into the steps by :func:`run_sync`: the awaitable a call returned suspended,
    and there is no event loop to resume it."""


def _wait(awaitable: Awaitable[Any]) -> Any:
    """Run an awaitable that does not really suspend (e.g. an ``async def`` that awaits
    nothing) without an event loop; raise :class:`Suspended` if it does suspend."""
    it: Generator[Any, None, Any] = awaitable.__await__()
    try:
        it.send(None)
    except StopIteration as stop:
        return stop.value
    it.close()
    raise Suspended


@overload
def run_sync(plan: Calls[T]) -> T: ...


@overload
def run_sync(plan: Plan[T]) -> T: ...


def run_sync(plan: Plan[T] | Calls[T]) -> T:
    """Carry out ``plan`` without an event loop, calling each host callable it asks for;
    its answer (also the value a part returns, when given one)."""
    if type(plan) is not GeneratorType:
        return plan  # type: ignore[return-value]  # nothing to run: the answer
    steps: Generator[Any, Any, Any] = plan
    try:
        item = steps.send(None)
        while type(item) is Call:
            try:
                result = item.fn(item.context, **item.args)
                if isawaitable(result):
                    result = _wait(result)
            except BaseException as exc:
                item = steps.throw(exc)
            else:
                item = steps.send(result)
    except StopIteration as done:  # a part's value
        value: T = done.value
        return value
    next(steps, None)  # the steps end right after their answer
    answer: T = item
    return answer


@overload
async def run_async(plan: Calls[T]) -> T: ...


@overload
async def run_async(plan: Plan[T]) -> T: ...


async def run_async(plan: Plan[T] | Calls[T]) -> T:
    """Carry out ``plan``, calling each host callable it asks for and awaiting what an
    ``async def`` one returns; its answer. Runs without suspending unless such an
    awaitable does."""
    if type(plan) is not GeneratorType:
        return plan  # type: ignore[return-value]  # nothing to run: the answer
    steps: Generator[Any, Any, Any] = plan
    try:
        item = steps.send(None)
        while type(item) is Call:
            try:
                result = item.fn(item.context, **item.args)
                if isawaitable(result):
                    result = await result
            except BaseException as exc:
                item = steps.throw(exc)
            else:
                item = steps.send(result)
    except StopIteration as done:  # a part's value
        value: T = done.value
        return value
    next(steps, None)  # the steps end right after their answer
    answer: T = item
    return answer
