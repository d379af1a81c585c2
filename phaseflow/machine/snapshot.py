"""A machine's per-conversation values as plain JSON, and back.

A host that keeps a conversation across processes saves ``machine.snapshot()`` beside
its state and later calls ``PhaseMachine.restore(workflow, data)``. The snapshot comes
back from disk or another process, so it is untrusted: :func:`restore_snapshot` checks
every field before it touches the machine and refuses anything wrong with a
:class:`SnapshotError` that names the field by its path in the JSON
(``snapshot.history[3].to``). No input of any shape or size produces another exception,
and a message never prints a value whole (a huge integer or string is described, not
shown).

Times are never stored as clock readings, which mean nothing to another process's clock:
``elapsed`` is the seconds spent in the current phase so far, and each history record's
``at`` is relative to the current phase's entry (0 for the record that entered it,
negative before). Rebuilding clock readings from those on the new clock rounds, so a
restored machine remembers the values it was given and reports them unchanged until they
could have changed (its clock moves, or it moves phase): ``restore(wf, s).snapshot() ==
s`` holds exactly. The memory is a weak side table, so the machine's hot path pays
nothing for it.

This module reads and writes the machine's slots through the :class:`MachineSlots`
protocol and never imports the machine, which imports it.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from phaseflow.errors import PhaseflowError
from phaseflow.machine.results import (
    ERROR_KINDS,
    MODEL_REQUEST,
    ErrorKind,
    ErrorRecord,
    GuardTrigger,
    HistoryRecord,
    ModelTrigger,
    ProgrammaticTrigger,
    TransitionTrigger,
)
from phaseflow.spec.model import Position, Workflow

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "MachineSlots",
    "SnapshotError",
    "restore_snapshot",
    "take_snapshot",
]

#: The ``format`` tag of every machine snapshot.
SNAPSHOT_FORMAT = "phaseflow.machine"
#: The ``version`` this module writes and the only one it reads.
SNAPSHOT_VERSION = 1

#: The largest counter a snapshot holds (turns, visits, positions): a signed 64-bit
#: integer, what every store can keep.
MAX_COUNT = 2**63 - 1
#: The largest magnitude of a time in seconds: beyond it a float no longer counts whole
#: seconds, and sums of two times could overflow.
MAX_SECONDS = float(2**53)

_TOP_KEYS = ("format", "version", "workflow", "phase", "elapsed", "turn", "turns_in_phase",
             "visits", "history", "trace")
_RECORD_KEYS = ("from", "to", "turn", "at", "trigger", "duration_in_phase")
_EVENT_KEYS = ("kind", "phase", "turn", "message", "source", "position")
_POSITION_KEYS = ("path", "line", "column")
_EVENT_KINDS = ERROR_KINDS


class SnapshotError(PhaseflowError):
    """A machine snapshot cannot be restored: wrong shape, a value out of range, or a
    mismatch with the workflow (another name, a phase it does not have). The message
    starts with the path of the offending field, e.g. ``snapshot.history[3].to``."""


class MachineSlots(Protocol):
    """The per-conversation slots of a ``PhaseMachine`` this module reads and writes."""

    _clock: Callable[[], float]
    _current: str
    _entered_at: float
    _history: deque[HistoryRecord] | None
    _trace: deque[ErrorRecord] | None
    _visits: dict[str, int]
    _turn: int
    _turns_in_phase: int
    _cur: Any

    @property
    def workflow(self) -> Workflow | None: ...


M = TypeVar("M", bound=MachineSlots)

#: ``tuple.__new__``: makes a named tuple without its Python-level ``__new__``.
_new_tuple: Any = tuple.__new__


class _Given(NamedTuple):
    """What a restored machine was given, kept until it could have changed."""

    clock: Callable[[], float]
    reading: float  # the clock's reading at restore
    entered_at: float  # the entry time restore derived from it
    elapsed: float
    at: dict[int, tuple[HistoryRecord, float]]  # id(record) -> (record, its ``at``)


#: Restored machines -> what they were given (weak: it goes with the machine).
_GIVEN: weakref.WeakKeyDictionary[Any, _Given] = weakref.WeakKeyDictionary()


# --- writing ------------------------------------------------------------------------------


def take_snapshot(machine: MachineSlots) -> dict[str, Any]:
    """The machine's per-conversation values as plain JSON (see the module docstring)."""
    now = machine._clock()
    entered = machine._entered_at
    given = _GIVEN.get(machine)
    if given is not None and given.entered_at != entered:
        del _GIVEN[machine]  # it moved phase (or changed clock): the values are stale
        given = None
    if given is not None and now == given.reading and machine._clock is given.clock:
        elapsed = given.elapsed
    else:
        elapsed = float(now - entered)
    if elapsed - elapsed != 0.0:  # inf or nan
        raise SnapshotError("snapshot.elapsed: the machine's clock gave a non-finite time")
    exact = given.at if given is not None else _NOTHING_GIVEN
    history: list[dict[str, Any]] = []
    append = history.append
    for r in machine._history or ():
        # unpacked, not indexed: HistoryRecord's __getitem__ is Python code (it takes names)
        source, target, turn, clock_at, trigger, duration = r
        hit = exact.get(id(r))
        at = hit[1] if hit is not None and hit[0] is r else float(clock_at - entered)
        duration = float(duration)
        if at - at != 0.0 or duration - duration != 0.0:
            raise SnapshotError(f"snapshot.history[{len(history)}]: the machine's clock gave "
                                "a non-finite time")
        if isinstance(trigger, GuardTrigger):
            trig: dict[str, Any] = {"kind": "guard", "index": trigger.index}
        else:
            trig = _trigger_json(trigger, len(history))
        append({"from": source, "to": target, "turn": turn, "at": at, "trigger": trig,
                "duration_in_phase": duration})
    workflow = machine.workflow
    return {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "workflow": workflow.name if workflow is not None else None,
        "phase": machine._current,
        "elapsed": elapsed,
        "turn": machine._turn,
        "turns_in_phase": machine._turns_in_phase,
        "visits": dict(machine._visits),
        "history": history,
        "trace": [_event_json(e) for e in machine._trace or ()],
    }


_NOTHING_GIVEN: dict[int, tuple[HistoryRecord, float]] = {}


def _trigger_json(trigger: TransitionTrigger, i: int) -> dict[str, Any]:
    if isinstance(trigger, GuardTrigger):
        return {"kind": "guard", "index": trigger.index}
    if isinstance(trigger, ProgrammaticTrigger):
        return {"kind": "programmatic", "source": trigger.source}
    if isinstance(trigger, ModelTrigger):
        return {"kind": "model"}
    raise SnapshotError(f"snapshot.history[{i}].trigger: {type(trigger).__name__} is not a "
                        "transition trigger")


def _event_json(event: ErrorRecord) -> dict[str, Any]:
    p = event.position
    return {
        "kind": event.kind,
        "phase": event.phase,
        "turn": event.turn,
        "message": event.message,
        "source": event.source,
        "position": None if p is None else {"path": p.path, "line": p.line,
                                             "column": p.column},
    }


# --- reading ------------------------------------------------------------------------------


def restore_snapshot(
    machine: M, workflow: Workflow, data: object, history_limit: int, trace_limit: int
) -> M:
    """Put the snapshot ``data`` into ``machine`` (a fresh machine of ``workflow``) and
    return it; :class:`SnapshotError` when anything is wrong, before anything changed."""
    top = _object(data, "snapshot", _TOP_KEYS)
    fmt = top["format"]
    if not isinstance(fmt, str) or fmt != SNAPSHOT_FORMAT:
        raise SnapshotError(f"snapshot.format: expected {SNAPSHOT_FORMAT!r}, got {_show(fmt)}")
    version = top["version"]
    if type(version) is not int or version != SNAPSHOT_VERSION:
        raise SnapshotError(f"snapshot.version: this phaseflow reads version "
                            f"{SNAPSHOT_VERSION}, got {_show(version)}")
    name = top["workflow"]
    if not isinstance(name, str) or name != workflow.name:
        raise SnapshotError(f"snapshot.workflow: {_show(name)} is not workflow "
                            f"{_show(workflow.name)}")
    scope = _Scope(workflow)
    current = scope.phase(top["phase"], "snapshot.phase")
    elapsed = _time(top["elapsed"], "snapshot.elapsed", negative=False)
    turn = _count(top["turn"], "snapshot.turn")
    turns_in_phase = _count(top["turns_in_phase"], "snapshot.turns_in_phase")
    visits = _visits(top["visits"], scope)
    records = _array(top["history"], "snapshot.history", history_limit)
    events = _array(top["trace"], "snapshot.trace", trace_limit)
    history = [_record(item, i, scope) for i, item in enumerate(records)]
    for i in range(1, len(history)):
        if history[i][0] != history[i - 1][1]:
            raise SnapshotError(
                f"snapshot.history[{i}].from: {_show(history[i][0])} does not follow "
                f"snapshot.history[{i - 1}].to ({_show(history[i - 1][1])})")
    if history and history[-1][1] != current:
        raise SnapshotError(
            f"snapshot.phase: {_show(current)} is not where snapshot.history[{len(history) - 1}]"
            f".to went ({_show(history[-1][1])})")
    trace = [_event(item, i, scope) for i, item in enumerate(events)]

    clock = machine._clock
    now = clock()
    entered = now - elapsed
    kept: list[HistoryRecord] = [_new_tuple(HistoryRecord, (f, t, n, entered + at, trig, d))
                                 for f, t, n, at, trig, d in history]
    machine._current = current
    machine._entered_at = entered
    machine._turn = turn
    machine._turns_in_phase = turns_in_phase
    machine._visits = visits
    machine._history = deque(kept, maxlen=history_limit) if kept else None
    machine._trace = deque(trace, maxlen=trace_limit) if trace else None
    machine._cur = None
    _GIVEN[machine] = _Given(clock, now, entered, elapsed,
                             {id(r): (r, h[3]) for r, h in zip(kept, history, strict=True)})
    return machine


class _Scope:
    """The workflow a snapshot is checked against: which names are its phases."""

    __slots__ = ("name", "phases")

    def __init__(self, workflow: Workflow) -> None:
        self.name = workflow.name
        self.phases: Mapping[str, Any] = workflow.phases

    def phase(self, value: object, where: str) -> str:
        if not isinstance(value, str):
            raise SnapshotError(f"{where}: expected a phase name, got {_show(value)}")
        if value not in self.phases:
            raise SnapshotError(f"{where}: {_show(value)} is not a phase of workflow "
                                f"{_show(self.name)}")
        return value


_Record = tuple[str, str, int, float, TransitionTrigger, float]


def _record(data: object, i: int, scope: _Scope) -> _Record:
    """History record ``i``. The common case (plain types, every value in range) is read
    without building a message; anything else goes through :func:`_checked_record`,
    which accepts exactly the same records and names the first wrong field of the rest."""
    if type(data) is dict and len(data) == 6:
        f = data.get("from")
        t = data.get("to")
        n = data.get("turn")
        at = data.get("at")
        d = data.get("duration_in_phase")
        phases = scope.phases
        if (type(f) is str and type(t) is str and type(n) is int and type(at) is float
                and type(d) is float and f in phases and t in phases and 0 <= n <= MAX_COUNT
                and -MAX_SECONDS <= at <= MAX_SECONDS and 0.0 <= d <= MAX_SECONDS):
            trigger = _plain_trigger(data.get("trigger"))
            if trigger is not None:
                return (f, t, n, at, trigger, d)
    return _checked_record(data, i, scope)


#: Guard triggers of the first transitions, shared (they are immutable values).
_GUARD_TRIGGERS = tuple(GuardTrigger(i) for i in range(32))


def _plain_trigger(data: object) -> TransitionTrigger | None:
    """A well-formed trigger, or ``None`` for anything :func:`_trigger` must look at."""
    if type(data) is not dict:
        return None
    kind = data.get("kind")
    if kind == "guard" and len(data) == 2:
        index = data.get("index")
        if type(index) is int and 0 <= index <= MAX_COUNT:
            return _GUARD_TRIGGERS[index] if index < 32 else GuardTrigger(index)
    elif kind == "model" and len(data) == 1:
        return MODEL_REQUEST
    elif kind == "programmatic" and len(data) == 2:
        source = data.get("source")
        if type(source) is str:
            return ProgrammaticTrigger(source)
    return None


def _checked_record(data: object, i: int, scope: _Scope) -> _Record:
    where = f"snapshot.history[{i}]"
    rec = _object(data, where, _RECORD_KEYS)
    return (
        scope.phase(rec["from"], f"{where}.from"),
        scope.phase(rec["to"], f"{where}.to"),
        _count(rec["turn"], f"{where}.turn"),
        _time(rec["at"], f"{where}.at", negative=True),
        _trigger(rec["trigger"], f"{where}.trigger"),
        _time(rec["duration_in_phase"], f"{where}.duration_in_phase", negative=False),
    )


def _trigger(data: object, where: str) -> TransitionTrigger:
    if not isinstance(data, dict):
        raise SnapshotError(f"{where}: expected an object, got {_show(data)}")
    kind = data.get("kind")
    if isinstance(kind, str) and kind == "guard":
        trig = _object(data, where, ("kind", "index"))
        return GuardTrigger(_count(trig["index"], f"{where}.index"))
    if isinstance(kind, str) and kind == "programmatic":
        trig = _object(data, where, ("kind", "source"))
        return ProgrammaticTrigger(_string(trig["source"], f"{where}.source"))
    if isinstance(kind, str) and kind == "model":
        _object(data, where, ("kind",))
        return MODEL_REQUEST
    if "kind" not in data:
        raise SnapshotError(f"{where}: missing key 'kind'")
    raise SnapshotError(f"{where}.kind: expected 'guard', 'model' or 'programmatic', got "
                        f"{_show(kind)}")


def _event(data: object, i: int, scope: _Scope) -> ErrorRecord:
    """Trace event ``i``: a fast path for the common case, as :func:`_record`."""
    if type(data) is dict and len(data) == 6:
        kind = data.get("kind")
        phase = data.get("phase")
        turn = data.get("turn")
        message = data.get("message")
        source = data.get("source")
        pos = data.get("position", _MISSING)
        if (type(kind) is str and type(phase) is str and type(turn) is int
                and type(message) is str and type(source) is str and kind in _EVENT_KINDS
                and phase in scope.phases and 0 <= turn <= MAX_COUNT):
            if pos is None:
                return ErrorRecord(cast(ErrorKind, kind), phase, turn, message, source, None)
            if type(pos) is dict and len(pos) == 3:
                path = pos.get("path")
                line = pos.get("line")
                column = pos.get("column")
                if (type(path) is str and type(line) is int and type(column) is int
                        and 0 <= line <= MAX_COUNT and 0 <= column <= MAX_COUNT):
                    return ErrorRecord(cast(ErrorKind, kind), phase, turn, message, source,
                                      Position(path, line, column))
    return _checked_event(data, i, scope)


_MISSING = object()


def _checked_event(data: object, i: int, scope: _Scope) -> ErrorRecord:
    where = f"snapshot.trace[{i}]"
    ev = _object(data, where, _EVENT_KEYS)
    kind = ev["kind"]
    if not isinstance(kind, str) or kind not in _EVENT_KINDS:
        raise SnapshotError(f"{where}.kind: expected one of "
                            f"{', '.join(sorted(_EVENT_KINDS))}, got {_show(kind)}")
    return ErrorRecord(
        cast(ErrorKind, kind),
        scope.phase(ev["phase"], f"{where}.phase"),
        _count(ev["turn"], f"{where}.turn"),
        _string(ev["message"], f"{where}.message"),
        _string(ev["source"], f"{where}.source"),
        _position(ev["position"], f"{where}.position"),
    )


def _position(data: object, where: str) -> Position | None:
    if data is None:
        return None
    pos = _object(data, where, _POSITION_KEYS)
    return Position(_string(pos["path"], f"{where}.path"), _count(pos["line"], f"{where}.line"),
                    _count(pos["column"], f"{where}.column"))


def _visits(data: object, scope: _Scope) -> dict[str, int]:
    if not isinstance(data, dict):
        raise SnapshotError(f"snapshot.visits: expected an object, got {_show(data)}")
    visits: dict[str, int] = {}
    for key, value in data.items():
        where = f"snapshot.visits[{_show(key)}]"
        visits[scope.phase(key, where)] = _count(value, where)
    return visits


# --- shapes ---------------------------------------------------------------------------------


def _object(data: object, where: str, keys: tuple[str, ...]) -> dict[str, object]:
    """``data`` as an object with exactly ``keys``."""
    if not isinstance(data, dict):
        raise SnapshotError(f"{where}: expected an object, got {_show(data)}")
    for key in keys:
        if key not in data:
            raise SnapshotError(f"{where}: missing key {key!r}")
    if len(data) != len(keys):
        extra = next(k for k in data if k not in keys)
        raise SnapshotError(f"{where}: unexpected key {_show(extra)}")
    return data


def _array(data: object, where: str, limit: int) -> list[object]:
    if not isinstance(data, list):
        raise SnapshotError(f"{where}: expected an array, got {_show(data)}")
    if len(data) > limit:
        raise SnapshotError(f"{where}: {len(data)} entries, more than the {limit} a machine "
                            "keeps")
    return data


def _string(data: object, where: str) -> str:
    if not isinstance(data, str):
        raise SnapshotError(f"{where}: expected a string, got {_show(data)}")
    return data


def _count(data: object, where: str) -> int:
    """A non-negative integer a store can keep (never a boolean)."""
    if type(data) is not int:
        raise SnapshotError(f"{where}: expected an integer, got {_show(data)}")
    if not 0 <= data <= MAX_COUNT:
        raise SnapshotError(f"{where}: expected an integer from 0 to 2**63-1, got {_show(data)}")
    return data


def _time(data: object, where: str, *, negative: bool) -> float:
    """Seconds: a finite number of at most :data:`MAX_SECONDS` magnitude (``negative``:
    below zero allowed). Integers are read as floats."""
    if isinstance(data, bool) or not isinstance(data, int | float):
        raise SnapshotError(f"{where}: expected a number of seconds, got {_show(data)}")
    if isinstance(data, int) and data.bit_length() > 60:
        raise SnapshotError(f"{where}: {_show(data)} is out of range")
    seconds = float(data)
    if not math.isfinite(seconds) or abs(seconds) > MAX_SECONDS:
        raise SnapshotError(f"{where}: expected a finite number of seconds up to 2**53, got "
                            f"{_show(data)}")
    if seconds < 0 and not negative:
        raise SnapshotError(f"{where}: expected seconds >= 0, got {_show(data)}")
    return seconds


def _show(value: object) -> str:
    """A short, always buildable description of a value for a message: scalars shown
    (strings cut at 60 characters, integers beyond 64 bits described by size), containers
    and other objects only named (their contents may be huge or nested without end)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        bits = value.bit_length()
        return str(value) if bits <= 64 else f"an integer of {bits} bits"
    if type(value) is float:
        return repr(value)
    if type(value) is str:
        return repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} chars)"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
