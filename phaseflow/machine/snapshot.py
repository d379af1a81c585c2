"""A machine's per-conversation values as plain JSON, and back.

A host that keeps a conversation across processes saves ``machine.snapshot()`` beside
its state and later calls ``PhaseMachine.restore(workflow, data)``. The snapshot comes
back from disk or another process, so it is untrusted: :func:`restore_snapshot` checks
every field before it touches the machine and refuses anything wrong with a
:class:`SnapshotError` that names the field by its path in the JSON
(``snapshot.history[3].to``). It reads only the exact plain types ``json.loads`` makes
(``type(x) is dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``), so a
subclass whose ``__hash__``, ``__eq__`` or ``__len__`` raises is refused by its type
before any of its methods runs, and a message never prints a value whole (a huge integer
or string is described, not shown).

Times are never stored as clock readings, which mean nothing to another process's clock:
``elapsed`` is the seconds spent in the current phase so far, and each history record's
``at`` is relative to the current phase's entry. The restored machine puts them on its
own time line so that, right after restore, every time it computes is the saved one bit
for bit (see :func:`_time_line`); from then on it computes them exactly as the machine
that never stopped did, from differences of its clock's readings. Nothing is remembered
beside the machine's own slots.

This module reads and writes the machine's slots through the :class:`MachineSlots`
protocol and never imports the machine, which imports it.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.expr.describe import type_name
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
#: The ``version`` this module writes. Version 2 records which ``model`` transition a
#: model trigger took (``{"kind": "model", "index": i}``); version 1 snapshots, whose model
#: triggers name none, are still read (an older phaseflow refuses version 2 by its number).
SNAPSHOT_VERSION = 2
#: The versions this module reads.
SNAPSHOT_VERSIONS = (1, 2)

#: The largest counter a snapshot holds (turns, visits, positions): a signed 64-bit
#: integer, what every store can keep.
MAX_COUNT = 2**63 - 1
#: The largest magnitude of a time in seconds: beyond it a float no longer counts whole
#: seconds (and an integer time would not convert to a float exactly).
MAX_SECONDS = 2**53

_TOP_KEYS = ("format", "version", "workflow", "phase", "elapsed", "turn", "turns_in_phase",
             "visits", "history", "trace")
_RECORD_KEYS = ("from", "to", "turn", "at", "trigger", "duration_in_phase")
_EVENT_KEYS = ("kind", "phase", "turn", "message", "source", "position")
_POSITION_KEYS = ("path", "line", "column")


class SnapshotError(PhaseflowError):
    """A machine snapshot cannot be restored: wrong shape, a value out of range, a state
    no machine reaches, or a mismatch with the workflow (another name, a current phase it
    does not have). The message starts with the path of the offending field, e.g.
    ``snapshot.history[3].to``. (``snapshot()`` raises it too, naming ``snapshot.elapsed``
    or a record, when the machine's clock gave a non-finite time.)"""


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


# --- writing ------------------------------------------------------------------------------


def take_snapshot(machine: MachineSlots) -> dict[str, Any]:
    """The machine's per-conversation values as plain JSON (see the module docstring)."""
    entered = machine._entered_at
    elapsed = float(machine._clock() - entered)
    if not math.isfinite(elapsed):
        raise SnapshotError("snapshot.elapsed: the machine's clock gave a non-finite time")
    history: list[dict[str, Any]] = []
    for r in machine._history or ():
        at = float(r.at - entered)
        duration = float(r.duration_in_phase)
        if not (math.isfinite(at) and math.isfinite(duration)):
            raise SnapshotError(f"snapshot.history[{len(history)}]: the machine's clock gave "
                                "a non-finite time")
        history.append({"from": r.from_phase, "to": r.to_phase, "turn": r.turn, "at": at,
                        "trigger": _trigger_json(r.trigger), "duration_in_phase": duration})
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


def _trigger_json(trigger: TransitionTrigger) -> dict[str, Any]:
    if isinstance(trigger, GuardTrigger):
        return {"kind": "guard", "index": trigger.index}
    if isinstance(trigger, ProgrammaticTrigger):
        return {"kind": "programmatic", "source": trigger.source}
    assert isinstance(trigger, ModelTrigger)  # the three kinds a transition is taken by
    if trigger.index is None:
        return {"kind": "model"}
    return {"kind": "model", "index": trigger.index}


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
    """Put the snapshot ``data`` into ``machine`` (a fresh machine of ``workflow``, whose
    constructor just read its clock) and return it; :class:`SnapshotError` when anything
    is wrong, before anything changed.

    Checked beyond shapes and ranges, because no machine reaches a state without them: the
    current phase is a phase of ``workflow``; it and every phase a record names were
    entered (``visits`` holds them, every count at least 1 and at least the number of kept
    records that enter the phase); each record starts where the previous one went and the
    last one went to the current phase. Not checked, because a machine does reach such
    states: turn numbers in any order or relation (they are the host's numbers, recorded as
    given), any ``at`` (``set_clock`` restarts the timer on another clock), and phase names
    in the history, visits and trace that the workflow no longer has (it may have been
    edited since: only the current phase must still exist; a guard trigger's index is not
    checked against the phase's transitions for the same reason)."""
    top = _object(data, "snapshot", _TOP_KEYS)
    fmt = top["format"]
    if type(fmt) is not str or fmt != SNAPSHOT_FORMAT:
        raise SnapshotError(f"snapshot.format: expected {SNAPSHOT_FORMAT!r}, got {_show(fmt)}")
    version = top["version"]
    if type(version) is not int or version not in SNAPSHOT_VERSIONS:
        raise SnapshotError(f"snapshot.version: this phaseflow reads versions "
                            f"{' and '.join(map(str, SNAPSHOT_VERSIONS))}, got "
                            f"{_show(version)}")
    name = top["workflow"]
    # null: the machine was built in code, without a workflow; any workflow whose phases
    # hold what the snapshot names can take it (every phase below is checked)
    if name is not None and (type(name) is not str or name != workflow.name):
        raise SnapshotError(f"snapshot.workflow: {_show(name)} is not workflow "
                            f"{_show(workflow.name)}")
    current = _name(top["phase"], "snapshot.phase")
    if current not in workflow.phases:
        raise SnapshotError(f"snapshot.phase: {_show(current)} is not a phase of workflow "
                            f"{_show(workflow.name)}")
    elapsed = _time(top["elapsed"], "snapshot.elapsed", negative=False)
    turn = _count(top["turn"], "snapshot.turn")
    turns_in_phase = _count(top["turns_in_phase"], "snapshot.turns_in_phase")
    visits = _visits(top["visits"])
    records = _array(top["history"], "snapshot.history", history_limit)
    events = _array(top["trace"], "snapshot.trace", trace_limit)
    history = [_record(item, f"snapshot.history[{i}]") for i, item in enumerate(records)]
    trace = [_event(item, f"snapshot.trace[{i}]") for i, item in enumerate(events)]
    _check_reachable(current, visits, history)

    reading = _reading(machine._entered_at)
    saved = [r.at for r in history]
    clock, entered, ats = _time_line(machine._clock, reading, elapsed, saved)
    kept = history if ats is saved else [
        HistoryRecord(r.from_phase, r.to_phase, r.turn, at, r.trigger, r.duration_in_phase)
        for r, at in zip(history, ats, strict=True)]
    machine._clock = clock
    machine._current = current
    machine._entered_at = entered
    machine._turn = turn
    machine._turns_in_phase = turns_in_phase
    machine._visits = visits
    machine._history = deque(kept, maxlen=history_limit) if kept else None
    machine._trace = deque(trace, maxlen=trace_limit) if trace else None
    machine._cur = None
    return machine


def _check_reachable(current: str, visits: dict[str, int], history: list[HistoryRecord]
                     ) -> None:
    """Refuse what no machine reaches: a broken chain of records, a current phase that is
    not where the last record went, a phase current or entered without a visit."""
    for i in range(1, len(history)):
        if history[i].from_phase != history[i - 1].to_phase:
            raise SnapshotError(
                f"snapshot.history[{i}].from: {_show(history[i].from_phase)} does not follow "
                f"snapshot.history[{i - 1}].to ({_show(history[i - 1].to_phase)})")
    if history and history[-1].to_phase != current:
        raise SnapshotError(
            f"snapshot.phase: {_show(current)} is not where snapshot.history"
            f"[{len(history) - 1}].to went ({_show(history[-1].to_phase)})")
    if current not in visits:
        raise SnapshotError(f"snapshot.phase: {_show(current)} is current but was never "
                            "entered (it is not in snapshot.visits)")
    if history and history[0].from_phase not in visits:
        raise SnapshotError(f"snapshot.history[0].from: {_show(history[0].from_phase)} was "
                            "current but was never entered (it is not in snapshot.visits)")
    entering = Counter(r.to_phase for r in history)
    last = {r.to_phase: i for i, r in enumerate(history)}
    for phase, times in entering.items():
        if visits.get(phase, 0) < times:
            raise SnapshotError(
                f"snapshot.history[{last[phase]}].to: {times} kept records enter "
                f"{_show(phase)}, more than snapshot.visits[{_show(phase)}] "
                f"({visits.get(phase, 0)})")


def _time_line(
    clock: Callable[[], float], reading: float, elapsed: float, ats: list[float]
) -> tuple[Callable[[], float], float, list[float]]:
    """The restored machine's clock, its phase-entry time and its records' ``at`` readings:
    chosen so that, with the clock still at ``reading``, ``clock() - entry`` is ``elapsed``
    and each ``at - entry`` the saved ``at``, bit for bit.

    When floating point can place the saved times on the new clock exactly (the entry at
    ``reading - elapsed``, each record at ``entry + at``, every sum exact), the machine
    keeps the new clock as it is: its time line is then the original's shifted by a
    constant, exactly, and the readings in its history are readings of that clock. When
    it cannot (a saved ``0.30000000000000004`` has more fraction bits than a clock reading
    1e9 holds), the clock is read as ``(clock() - reading) + elapsed``: the time line
    starts at 0 at the current phase's entry and the records' ``at`` are the saved ones.
    In both cases, if the saved times were exact differences of the original clock's
    readings and the new clock moves by the same amounts as the original would have, every
    reading of the restored machine is exactly an original reading plus one constant, so
    every time computed from two of them (``seconds_in_phase``, ``duration_in_phase``, a
    later snapshot's ``elapsed`` and ``at``) is the never-stopped machine's, bit for bit."""
    entered = reading - elapsed
    placed = [entered + at for at in ats]
    if math.fsum((reading, -elapsed, -entered)) == 0.0 and all(
            math.fsum((entered, at, -p)) == 0.0 for at, p in zip(ats, placed, strict=True)):
        return clock, entered, placed
    return _shifted(clock, reading, elapsed), 0.0, ats


def _shifted(clock: Callable[[], float], reading: float, elapsed: float
             ) -> Callable[[], float]:
    """``clock`` read on a time line whose 0 is ``elapsed`` seconds before ``reading``.
    A closure over the three values and nothing else: a clock that is a bound method of
    an object holding the machine makes an ordinary reference cycle, which the garbage
    collector frees."""

    def shifted() -> float:
        return (clock() - reading) + elapsed

    return shifted


def _reading(value: object) -> float:
    """The new clock's reading at restore, as a finite float (a clock counts seconds)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
        if math.isfinite(seconds) and seconds == value:  # an integer a float holds exactly
            return seconds
    shown = _show(value) if type(value) in (int, float) else f"a {type_name(value)}"
    raise ConfigError(f"restore: the clock gave {shown}, not a finite number of seconds")


def _record(data: object, where: str) -> HistoryRecord:
    rec = _object(data, where, _RECORD_KEYS)
    return HistoryRecord(
        _name(rec["from"], where, "from"),
        _name(rec["to"], where, "to"),
        _count(rec["turn"], where, "turn"),
        _time(rec["at"], where, "at", negative=True),
        _trigger(rec["trigger"], where, "trigger"),
        _time(rec["duration_in_phase"], where, "duration_in_phase", negative=False),
    )


def _trigger(data: object, where: str, field: str) -> TransitionTrigger:
    where = _at(where, field)
    if type(data) is not dict:
        raise SnapshotError(f"{where}: expected an object, got {_show(data)}")
    _keys_are_strings(data, where)
    if "kind" not in data:
        raise SnapshotError(f"{where}: missing key 'kind'")
    kind = data["kind"]
    if type(kind) is not str:
        raise SnapshotError(f"{where}.kind: expected 'guard', 'model' or 'programmatic', got "
                            f"{_show(kind)}")
    if kind == "guard":
        trig = _object(data, where, ("kind", "index"))
        return GuardTrigger(_count(trig["index"], where, "index"))
    if kind == "programmatic":
        trig = _object(data, where, ("kind", "source"))
        return ProgrammaticTrigger(_string(trig["source"], where, "source"))
    if kind == "model":  # (version 1 snapshots have no index)
        if "index" not in data:
            _object(data, where, ("kind",))
            return MODEL_REQUEST
        trig = _object(data, where, ("kind", "index"))
        return ModelTrigger(_count(trig["index"], where, "index"))
    raise SnapshotError(f"{where}.kind: expected 'guard', 'model' or 'programmatic', got "
                        f"{_show(kind)}")


def _event(data: object, where: str) -> ErrorRecord:
    ev = _object(data, where, _EVENT_KEYS)
    kind = ev["kind"]
    if type(kind) is not str or kind not in ERROR_KINDS:
        raise SnapshotError(f"{where}.kind: expected one of "
                            f"{', '.join(sorted(ERROR_KINDS))}, got {_show(kind)}")
    return ErrorRecord(
        cast(ErrorKind, kind),
        _name(ev["phase"], where, "phase"),
        _count(ev["turn"], where, "turn"),
        _string(ev["message"], where, "message"),
        _string(ev["source"], where, "source"),
        _position(ev["position"], where, "position"),
    )


def _position(data: object, where: str, field: str) -> Position | None:
    if data is None:
        return None
    where = _at(where, field)
    pos = _object(data, where, _POSITION_KEYS)
    return Position(_string(pos["path"], where, "path"), _count(pos["line"], where, "line"),
                    _count(pos["column"], where, "column"))


def _visits(data: object) -> dict[str, int]:
    if type(data) is not dict:
        raise SnapshotError(f"snapshot.visits: expected an object, got {_show(data)}")
    _keys_are_strings(data, "snapshot.visits")
    visits: dict[str, int] = {}
    for key, value in data.items():
        where = f"snapshot.visits[{_show(key)}]"
        visits[key] = _count(value, where, low=1)
    return visits


# --- shapes ---------------------------------------------------------------------------------


def _object(data: object, where: str, keys: tuple[str, ...]) -> dict[str, object]:
    """``data`` as an object with exactly ``keys``."""
    if type(data) is not dict:
        raise SnapshotError(f"{where}: expected an object, got {_show(data)}")
    _keys_are_strings(data, where)
    for key in keys:
        if key not in data:
            raise SnapshotError(f"{where}: missing key {key!r}")
    if len(data) != len(keys):
        extra = next(k for k in data if k not in keys)
        raise SnapshotError(f"{where}: unexpected key {_show(extra)}")
    return data


def _keys_are_strings(data: dict[Any, object], where: str) -> None:
    """Refuse a key that is not an exact ``str`` before any lookup compares keys (a key of
    another type could run its own ``__eq__``)."""
    if {*map(type, data)} - _STRING_TYPE:
        key = next(k for k in data if type(k) is not str)
        raise SnapshotError(f"{where}: a key is {_show(key)}, not a string")


_STRING_TYPE = {str}


def _array(data: object, where: str, limit: int) -> list[object]:
    if type(data) is not list:
        raise SnapshotError(f"{where}: expected an array, got {_show(data)}")
    if len(data) > limit:
        raise SnapshotError(f"{where}: {len(data)} entries, more than the {limit} a machine "
                            "keeps")
    return data


def _at(where: str, field: str) -> str:
    """The path of ``field`` of the node at ``where`` (built only for a message)."""
    return f"{where}.{field}" if field else where


def _string(data: object, where: str, field: str = "") -> str:
    if type(data) is not str:
        raise SnapshotError(f"{_at(where, field)}: expected a string, got {_show(data)}")
    return data


def _name(data: object, where: str, field: str = "") -> str:
    if type(data) is not str:
        raise SnapshotError(f"{_at(where, field)}: expected a phase name, got {_show(data)}")
    return data


def _count(data: object, where: str, field: str = "", *, low: int = 0) -> int:
    """An integer from ``low`` to :data:`MAX_COUNT`, what a store can keep (never a
    boolean)."""
    if type(data) is not int:
        raise SnapshotError(f"{_at(where, field)}: expected an integer, got {_show(data)}")
    if not low <= data <= MAX_COUNT:
        raise SnapshotError(f"{_at(where, field)}: expected an integer from {low} to 2**63-1, got "
                            f"{_show(data)}")
    return data


def _time(data: object, where: str, field: str = "", *, negative: bool) -> float:
    """Seconds: a finite number of at most :data:`MAX_SECONDS` magnitude (``negative``:
    below zero allowed). An integer is read as the float of the same value."""
    if type(data) is int:
        if data.bit_length() > 60:
            raise SnapshotError(f"{_at(where, field)}: {_show(data)} is out of range")
        seconds = float(data)
    elif type(data) is float:
        seconds = data
    else:
        raise SnapshotError(f"{_at(where, field)}: expected a number of seconds, got "
                            f"{_show(data)}")
    if not math.isfinite(seconds) or abs(data) > MAX_SECONDS:
        raise SnapshotError(f"{_at(where, field)}: expected a finite number of seconds up to "
                            f"2**53, got {_show(data)}")
    if seconds < 0 and not negative:
        raise SnapshotError(f"{_at(where, field)}: expected seconds >= 0, got {_show(data)}")
    return seconds


def _show(value: object) -> str:
    """A short, always buildable description of a value for a message: plain scalars
    shown (strings cut at 60 characters, integers beyond 64 bits described by size),
    everything else only named by its type (it may be huge, nested without end, or of a
    class whose methods raise)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is int:
        bits = cast(int, value).bit_length()
        return str(value) if bits <= 64 else f"an integer of {bits} bits"
    if kind is float:
        return repr(value)
    if kind is str:
        text = cast(str, value)
        return repr(text) if len(text) <= 60 else f"{text[:60]!r}... ({len(text)} chars)"
    if kind is list:
        return "an array"
    if kind is dict:
        return "an object"
    return f"a {type_name(value)}"
