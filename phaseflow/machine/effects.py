"""Effects (``set``, ``unset``, ``call``) compiled once and run through a writer.

Effects are compiled per workflow into flat tuples so that running one at a turn boundary
does no lookups beyond what it must: the registry is resolved at compile time, literal
values that need copying are known in advance, and whether a host callable is async is
known before the effect runs. That lets the machine run a phase's effects synchronously
(no coroutine, no event loop) unless one of them really is async.

Failures never propagate: each becomes an :class:`~phaseflow.machine.results.Event` and
the remaining effects still run.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from phaseflow.machine.results import Event, EventKind
from phaseflow.machine.state import Writer, readonly
from phaseflow.spec.model import CallEffect, Effect, Position, SetEffect, UnsetEffect

__all__ = [
    "EffectContext",
    "Op",
    "compile_effect",
    "compile_effects",
    "is_async_callable",
    "run_async",
    "run_sync",
]


@dataclass(frozen=True, slots=True)
class EffectContext:
    """What a host callable receives as its first argument.

    ``state`` is a read-only view (write by returning a mapping: it is merged into the
    state through the session's writer, so the change is recorded). ``phase`` is the phase
    the effect belongs to (the phase being left for ``on_exit``, the phase being entered
    for ``on_enter``, the phase being prepared for a preparation). ``transcript`` is
    whatever the host passed to ``transition`` (``None`` at a plain turn boundary).
    """

    state: Mapping[str, Any]
    phase: str
    turn: int
    workflow: str
    transcript: Any = None


SET: Final = 0
UNSET: Final = 1
CALL: Final = 2

_SCALARS = (str, int, float, bool, type(None))

#: One compiled effect: ``(kind, payload, label, position)``. For ``SET`` the payload is
#: a tuple of ``(key, value, needs_copy)``; for ``UNSET`` a tuple of keys; for ``CALL``
#: ``(name, fn_or_None, is_async, args, args_need_copy)``.
Op: TypeAlias = tuple[int, Any, str, Position | None]


def is_async_callable(fn: object) -> bool:
    """True for ``async def`` functions (also behind ``functools.partial`` or as a
    ``__call__``); those make the machine take its async path."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - we want the bound __call__ itself
    return call is not None and inspect.iscoroutinefunction(call)


def compile_effect(effect: Effect, label: str, registry: Mapping[str, Callable[..., Any]]) -> Op:
    """Compile one effect; an unknown ``call`` name compiles to an op that reports it."""
    if isinstance(effect, SetEffect):
        items = tuple((k, v, not isinstance(v, _SCALARS)) for k, v in effect.values.items())
        return (SET, items, label, effect.position)
    if isinstance(effect, UnsetEffect):
        return (UNSET, tuple(effect.keys), label, effect.position)
    if isinstance(effect, CallEffect):
        fn = registry.get(effect.name)
        mutable = any(not isinstance(v, _SCALARS) for v in effect.args.values())
        payload = (effect.name, fn, fn is not None and is_async_callable(fn),
                   dict(effect.args), mutable)
        return (CALL, payload, label, effect.position)
    raise TypeError(f"not an effect: {effect!r}")  # pragma: no cover - the model forbids it


def compile_effects(
    effects: tuple[Effect, ...], where: str, registry: Mapping[str, Callable[..., Any]]
) -> tuple[tuple[Op, ...], bool]:
    """Compile a list of effects; also returns whether any of them calls an async callable."""
    ops = tuple(compile_effect(e, f"{where}[{i}]", registry) for i, e in enumerate(effects))
    return ops, any(op[0] == CALL and op[1][2] for op in ops)


class _Suspended(Exception):
    """An awaitable suspended while being driven synchronously."""


def _drive(awaitable: Awaitable[Any]) -> Any:
    """Run an awaitable that does not really suspend (e.g. an ``async def`` that awaits
    nothing) without an event loop; raise :class:`_Suspended` if it does suspend."""
    it: Generator[Any, None, Any] = awaitable.__await__()
    try:
        it.send(None)
    except StopIteration as stop:
        return stop.value
    it.close()
    raise _Suspended


def _error(kind: EventKind, phase: str, turn: int, message: str, op: Op) -> Event:
    return Event(kind, phase, turn, message, op[2], op[3])


def _failure(op: Op, exc: BaseException) -> str:
    """The message for a failed op: names the callable and the exception."""
    text = str(exc)
    if op[0] != CALL:
        return f"{type(exc).__name__}: {text}"
    if op[1][1] is None:
        return f"no callable registered for call {op[1][0]!r}"
    return f"call {op[1][0]!r} raised {type(exc).__name__}" + (f": {text}" if text else "")


def _begin_call(
    op: Op, state: Mapping[str, Any], phase: str, turn: int, workflow: str, transcript: Any
) -> Any:
    """Start a call effect: returns the callable's result (maybe an awaitable)."""
    name, fn, _is_async, args, args_mutable = op[1]
    if fn is None:
        raise LookupError(name)
    context = EffectContext(readonly(state), phase, turn, workflow, transcript)
    return fn(context, **(copy.deepcopy(args) if args_mutable else args))


def _merge(result: Any, writer: Writer) -> None:
    if isinstance(result, Mapping):
        for key, value in result.items():
            writer.set(key, value)


def _apply_plain(op: Op, writer: Writer) -> None:
    """Run a ``set`` or ``unset`` op; literal lists and mappings are copied so that the
    state never shares an object with the compiled workflow."""
    if op[0] == SET:
        for key, value, needs_copy in op[1]:
            writer.set(key, copy.deepcopy(value) if needs_copy else value)
    else:
        for key in op[1]:
            writer.unset(key)


def run_sync(
    ops: tuple[Op, ...],
    state: Mapping[str, Any],
    writer: Writer,
    phase: str,
    turn: int,
    workflow: str,
    transcript: Any = None,
    *,
    kind: EventKind = "effect_error",
) -> list[Event] | None:
    """Run ``ops`` in order without an event loop; return the failures (``None`` if none).

    An awaitable returned by a callable is driven to completion if it never suspends;
    one that suspends is closed and reported (the caller should have taken the async path).
    """
    events: list[Event] | None = None
    for op in ops:
        try:
            if op[0] == CALL:
                result = _begin_call(op, state, phase, turn, workflow, transcript)
                if inspect.isawaitable(result):
                    result = _drive(result)
                _merge(result, writer)
            else:
                _apply_plain(op, writer)
        except _Suspended:
            message = f"call {op[1][0]!r} is async and suspended outside an event loop"
            events = (events or []) + [_error(kind, phase, turn, message, op)]
        except Exception as exc:
            message = _failure(op, exc)
            events = (events or []) + [_error(kind, phase, turn, message, op)]
    return events


async def run_async(
    ops: tuple[Op, ...],
    state: Mapping[str, Any],
    writer: Writer,
    phase: str,
    turn: int,
    workflow: str,
    transcript: Any = None,
    *,
    kind: EventKind = "effect_error",
) -> list[Event] | None:
    """:func:`run_sync` for when an effect is async: awaitables are awaited."""
    events: list[Event] | None = None
    for op in ops:
        try:
            if op[0] == CALL:
                result = _begin_call(op, state, phase, turn, workflow, transcript)
                if inspect.isawaitable(result):
                    result = await result
                _merge(result, writer)
            else:
                _apply_plain(op, writer)
        except Exception as exc:
            message = _failure(op, exc)
            events = (events or []) + [_error(kind, phase, turn, message, op)]
    return events
