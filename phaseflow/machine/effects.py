"""Effects (``set``, ``unset``, ``call``) compiled once and run through a writer.

Effects are compiled per workflow into flat tuples so that running one at a turn boundary
does no lookups beyond what it must: the registry is resolved at compile time and literal
values that need copying are known in advance. An effect list is run by
:func:`effect_steps`, written once for both flavours of the machine: it yields each host
callable to call to its driver (:mod:`phaseflow.machine.drivers`), which calls it, or
calls and awaits it, and sends back what it returned.

Failures never propagate: each becomes an
:class:`~phaseflow.machine.results.ErrorRecord` and the remaining effects still run. That
holds for every :class:`Exception`, whatever its ``__str__`` does (the message is built by
:func:`~phaseflow.expr.describe.describe_exception`, which cannot fail). A ``BaseException``
that is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``,
task cancellation) is a request to stop, not a failure, and propagates.

What a callable returns is state, and the state is JSON: each key of a returned mapping
whose value :func:`~phaseflow.expr.jsonvalue.check_json` accepts is written (normalised:
a tuple becomes a list); a key that is not a string or whose value is not JSON is not
written and becomes an error record naming the key and why, while the other keys of the
same mapping are still written. A ``call`` that declares ``produces`` may write only
those keys, each with a value that fits its declared state type (the validator's rule,
:data:`~phaseflow.spec.reference_checks.TYPE_CHECKS`); any other key it returns is not
written and becomes an error record the same way.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from phaseflow.expr.describe import describe_exception, type_name
from phaseflow.expr.jsonvalue import JsonCheck, check_json
from phaseflow.machine.drivers import Call, Calls, Suspended
from phaseflow.machine.results import ErrorKind, ErrorRecord
from phaseflow.machine.state import Writer, readonly
from phaseflow.spec.model import (
    DEFAULT_TRANSCRIPT,
    CallEffect,
    Effect,
    Position,
    SetEffect,
    UnsetEffect,
)
from phaseflow.spec.reference_checks import TYPE_CHECKS
from phaseflow.spec.schema import type_name as json_type_name

__all__ = [
    "CallSpec",
    "EffectContext",
    "Op",
    "SetItem",
    "compile_effect",
    "compile_effects",
    "effect_steps",
    "is_async_callable",
]


@dataclass(frozen=True, slots=True)
class EffectContext:
    """What a host callable receives as its first argument.

    ``state`` is a deeply read-only view (nested mappings and lists are read-only views
    too, see :func:`~phaseflow.machine.state.readonly`); write by returning a mapping: it is
    merged into the state through the session's writer, so the change is recorded.
    ``phase`` is the phase the effect belongs to (the phase being left for ``on_exit``,
    the phase being entered for ``on_enter``, the phase being prepared for a preparation).
    ``transcript`` is what the host passed to the move (``transition``, ``advance``,
    ``take_request``; ``None`` when it passed nothing): a list or tuple is cut to the
    call's last ``transcript: N`` items (default 6; 0: empty), anything else is passed as
    it is. A session passes its history's last messages, each ``{role, content, ...}``.
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
_str_value = str.__str__


class SetItem(NamedTuple):
    """One key of a compiled ``set``; ``needs_copy`` when the value is a list or mapping
    (the state must never share an object with the compiled workflow)."""

    key: str
    value: Any
    needs_copy: bool


class CallSpec(NamedTuple):
    """A compiled ``call``: ``fn`` is ``None`` when no callable is registered by that name.
    ``produces``: the keys it may write, each with its declared type (``None``: the call
    declares nothing, and any key it returns is written)."""

    name: str
    fn: Callable[..., Any] | None
    args: dict[str, Any]
    args_need_copy: bool
    produces: Mapping[str, str] | None = None
    #: how many of the transcript's last items it receives (``transcript: N``)
    transcript: int = DEFAULT_TRANSCRIPT


class Op(NamedTuple):
    """One compiled effect. ``payload``: for ``SET`` a tuple of :class:`SetItem`; for
    ``UNSET`` a tuple of keys; for ``CALL`` a :class:`CallSpec`."""

    kind: int
    payload: Any
    label: str
    position: Position | None


def is_async_callable(fn: object) -> bool:
    """True for ``async def`` functions (also behind ``functools.partial`` or as a
    ``__call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - we want the bound __call__ itself
    return call is not None and inspect.iscoroutinefunction(call)


def compile_effect(effect: Effect, label: str, registry: Mapping[str, Callable[..., Any]],
                   state_types: Mapping[str, str] | None = None) -> Op:
    """Compile one effect; an unknown ``call`` name compiles to an op that reports it.
    ``state_types``: the workflow's declared type of each state key (a key not in it is of
    type ``any``)."""
    if isinstance(effect, SetEffect):
        items = tuple(SetItem(k, v, not isinstance(v, _SCALARS))
                      for k, v in effect.values.items())
        return Op(SET, items, label, effect.position)
    if isinstance(effect, UnsetEffect):
        return Op(UNSET, tuple(effect.keys), label, effect.position)
    if isinstance(effect, CallEffect):
        fn = registry.get(effect.name)
        mutable = any(not isinstance(v, _SCALARS) for v in effect.args.values())
        produces = None
        if effect.produces is not None:
            types = state_types or {}
            produces = {key: types.get(key, "any") for key in effect.produces}
        payload = CallSpec(effect.name, fn, dict(effect.args), mutable, produces,
                           effect.transcript_window)
        return Op(CALL, payload, label, effect.position)
    raise TypeError(f"not an effect: {effect!r}")  # pragma: no cover - the model forbids it


def compile_effects(
    effects: tuple[Effect, ...], where: str, registry: Mapping[str, Callable[..., Any]],
    state_types: Mapping[str, str] | None = None,
) -> tuple[Op, ...]:
    """Compile a list of effects."""
    return tuple(compile_effect(e, f"{where}[{i}]", registry, state_types)
                 for i, e in enumerate(effects))


def last_items(transcript: Any, window: int) -> Any:
    """What a call with ``transcript: window`` receives of the move's ``transcript``: a
    list or tuple cut to its last ``window`` items (itself when it has no more), anything
    else as it is."""
    if isinstance(transcript, list | tuple) and len(transcript) > window:
        return transcript[len(transcript) - window:]
    return transcript


def _error(kind: ErrorKind, phase: str, turn: int, message: str, op: Op) -> ErrorRecord:
    return ErrorRecord(kind, phase, turn, message, op.label, op.position)


def _failure(op: Op, exc: BaseException) -> str:
    """The message for a failed op: names the callable and the exception, through the one
    describer that never fails (the exception is the host's object: its ``__str__`` may
    raise, return a non-string or return megabytes)."""
    if op.kind != CALL:
        return describe_exception(exc)
    call: CallSpec = op.payload
    if call.fn is None:
        return f"no callable registered for call {call.name!r}"
    return f"call {call.name!r} raised {describe_exception(exc)}"


def _key_text(key: str) -> str:
    return repr(key) if len(key) <= 60 else repr(key[:57]) + "..."


def _merge(result: Any, writer: Writer, name: str,
           produces: Mapping[str, str] | None = None) -> list[str] | None:
    """Write what a callable returned: each key of a returned mapping whose value is JSON
    (normalised by :func:`~phaseflow.expr.jsonvalue.check_json`); a key that is not a
    string, or whose value is not JSON, is not written and is described in the returned
    list (``None`` when nothing was refused). Anything but a mapping is ignored. With
    ``produces`` (key -> declared type), a key outside it, or a value (not ``null``) that
    does not fit its type, is refused the same way."""
    if not isinstance(result, Mapping):
        return None
    refused: list[str] | None = None
    for key, value in list(result.items()):
        if type(key) is not str:
            if not isinstance(key, str):
                refused = (refused or []) + [
                    f"call {name!r} returned a key of type {type_name(key)}, which is not a "
                    "string; it was not written"]
                continue
            key = _str_value(key)
        if produces is not None and key not in produces:
            declared = ", ".join(repr(k) for k in produces) or "nothing"
            refused = (refused or []) + [
                f"call {name!r} returned {_key_text(key)}, which its 'produces' does not "
                f"declare (it declares {declared}); the key was not written"]
            continue
        try:
            checked = check_json(value)
        except Exception as exc:  # a host container whose methods raise
            checked = JsonCheck(None, f"it cannot be read: {describe_exception(exc)}")
        problem = checked.problem
        if problem is not None:
            refused = (refused or []) + [
                f"call {name!r} returned a value for {_key_text(key)} that is not JSON: "
                f"{problem}; the key was not written"]
            continue
        if produces is not None and checked.value is not None:
            declared_type = produces[key]
            if not TYPE_CHECKS[declared_type](checked.value):
                refused = (refused or []) + [
                    f"call {name!r} returned a value for {_key_text(key)} that does not fit "
                    f"its declared type: {declared_type} expected, got "
                    f"{json_type_name(checked.value)}; the key was not written"]
                continue
        writer.set(key, checked.value)
    return refused


def _apply_plain(op: Op, writer: Writer) -> None:
    """Run a ``set`` or ``unset`` op; literal lists and mappings are copied so that the
    state never shares an object with the compiled workflow."""
    if op.kind == SET:
        for key, value, needs_copy in op.payload:
            writer.set(key, copy.deepcopy(value) if needs_copy else value)
    else:
        for key in op.payload:
            writer.unset(key)


def effect_steps(
    ops: tuple[Op, ...],
    state: Mapping[str, Any],
    writer: Writer,
    phase: str,
    turn: int,
    workflow: str,
    transcript: Any = None,
    *,
    kind: ErrorKind = "effect_error",
) -> Calls[list[ErrorRecord] | None]:
    """Run ``ops`` in order; returns the failures (``None`` if none). Each ``call`` is
    yielded to the driver (:mod:`phaseflow.machine.drivers`), which runs the callable and
    sends back its result or throws in its exception."""
    events: list[ErrorRecord] | None = None
    for op in ops:
        try:
            if op.kind == CALL:
                call: CallSpec = op.payload
                if call.fn is None:
                    raise LookupError(call.name)
                context = EffectContext(readonly(state), phase, turn, workflow,
                                        last_items(transcript, call.transcript))
                args = copy.deepcopy(call.args) if call.args_need_copy else call.args
                result = yield Call(call.fn, context, args)
                refused = _merge(result, writer, call.name, call.produces)
                if refused is not None:
                    events = (events or []) + [_error(kind, phase, turn, m, op) for m in refused]
            else:
                _apply_plain(op, writer)
        except Suspended:
            message = f"call {op.payload.name!r} is async and suspended outside an event loop"
            events = (events or []) + [_error(kind, phase, turn, message, op)]
        except Exception as exc:
            message = _failure(op, exc)
            events = (events or []) + [_error(kind, phase, turn, message, op)]
    return events
