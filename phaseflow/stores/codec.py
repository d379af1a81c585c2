"""A session record as rows: what every durable store writes and reads.

One record is one ``sessions`` row (its small JSON ``snapshot``: the turn core's run
state, the continuation without its history and marks, the machine, the state, the
session core; the ``progress`` part that older snapshots carry (the turn core's stages, no
longer kept) is ignored) plus append-only ``messages`` and ``marks`` rows. A commit writes
the snapshot and only the messages and marks the session added since the last commit, so
its cost does not grow with the conversation. Reading puts them back together and
checks every part through the turn core's own ``from_json`` (which validates every
invariant), so a corrupted row is an error naming the session, never a wrong session.

Everything a durable store reads back goes through this module, so damage is found the
same way in both databases:

- JSON is read strictly (:func:`loads`): ``NaN``, ``Infinity`` and a number no float
  holds are not JSON, and nothing phaseflow writes holds them (:func:`dumps` refuses
  them), so finding one is damage.
- A row's columns have the types phaseflow writes, and the ones a snapshot repeats
  (status, phase, turn, workflow) say what the snapshot says
  (:func:`~phaseflow.stores.base.record_problem`): the snapshot is the truth, the
  columns are an index for listing, and a column edited by hand is an error, both when a
  session is loaded and when sessions are listed.
- Events come back numbered ``after + 1`` up to the count the session's row keeps, with
  no gap (:func:`stored_events`): a deleted or added event row is an error.
- A database is used only when it is phaseflow's, or empty (:func:`must_create`): a
  database holding tables of its own is refused before anything is written to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from phaseflow.stores import rules
from phaseflow.stores.base import (
    Lease,
    QueuedMessage,
    SessionRecord,
    SessionSummary,
    StoredEvent,
    StoreError,
    record_problem,
)
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import TurnExecution
from phaseflow.turn.jsonio import fields_to_json
from phaseflow.turn.messages import History, message_to_json
from phaseflow.turn.rejections import Rejected

#: the version of the stored form; a store refuses data of a later version. 2: the
#: ``turns`` table (the record of each turn's end, what a fork starts from); a store of
#: version 1 gets it when the new code opens it (:func:`must_migrate`). 3: the
#: ``request_keys`` (a request's ``Idempotency-Key``, kept with its session so every
#: worker recognises a retry), ``cancels`` (a cancel asked of the worker that runs the
#: turn) and ``owners`` (the identity a served session belongs to) tables, and the indexes
#: sessions are paged by (most recently updated first; of one status). 4: the ``timers``
#: table (when each session's next timer is due, indexed, so due sessions are found
#: without reading the others); the snapshot repeats the deadline (``"timer"``)
SCHEMA_VERSION = 4

#: phaseflow's tables and their columns, the same in both databases (each store's DDL
#: makes exactly these); a store opening a database checks them before it uses it
TABLES: dict[str, tuple[str, ...]] = {
    "phaseflow_schema": ("version",),
    "sessions": ("id", "workflow", "workflow_hash", "version", "status", "phase", "turn",
                 "lease_owner", "lease_expires", "lease_epoch", "snapshot", "message_count",
                 "mark_count", "event_count", "created_at", "updated_at"),
    "messages": ("session_id", "idx", "data"),
    "marks": ("session_id", "idx", "data"),
    "events": ("session_id", "seq", "data"),
    "captures": ("sha256", "data"),
    "inbox": ("id", "session_id", "data"),
    "turns": ("session_id", "turn", "version", "workflow", "workflow_hash", "status", "phase",
              "snapshot", "message_count", "mark_count", "updated_at"),
    "request_keys": ("session_id", "key", "fingerprint", "created_at"),
    "cancels": ("session_id", "requested_at"),
    "owners": ("session_id", "owner"),
    "timers": ("session_id", "due_at"),
}

#: the schema version each table came with (the others are version 1's): a store of an
#: older version lacks them until it is migrated
ADDED_IN: dict[str, int] = {"turns": 2, "request_keys": 3, "cancels": 3, "owners": 3,
                            "timers": 4}


class StoreDataError(StoreError):
    """What a store holds for a session cannot be read back as a session: the message
    names the session and what is wrong."""


def must_create(where: str, found: Mapping[str, Sequence[str]], version: int | None, *,
                whole: bool = False) -> bool:
    """Whether a store must create its schema in the database ``where``, which holds the
    tables ``found`` (name: its columns) and, when it holds ``phaseflow_schema``, the
    schema ``version`` written there. ``whole``: the database is the store (an SQLite
    file), so a table of any name makes it another program's; a PostgreSQL schema is
    shared, so only tables with phaseflow's names count there.

    A database that is empty of them gets the schema (``True``); phaseflow's schema of
    this version, complete, is used as it is (``False``). Anything else is refused with a
    :class:`StoreError` naming the database, before anything was written to it: tables
    of its own without ``phaseflow_schema`` (another program's database), a schema from
    a later phaseflow, or phaseflow's tables with other columns (damaged)."""
    if "phaseflow_schema" not in found:
        theirs = sorted(t for t in found if whole or t in TABLES)
        if not theirs:
            return True
        raise StoreError(
            f"{where}: not a phaseflow session store: it holds tables of its own "
            f"({_names(theirs)}) and no phaseflow_schema table; phaseflow left it unchanged "
            "(name a new file or an empty database)")
    if version is None or version < 1:
        raise StoreError(f"{where}: the session store is damaged: its phaseflow_schema "
                         f"table holds no schema version ({version!r})")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: the store's schema is version {version}; this phaseflow "
            f"knows up to version {SCHEMA_VERSION}: upgrade phaseflow")
    for table, columns in TABLES.items():
        have = found.get(table)
        if have is None and ADDED_IN.get(table, 1) > version:
            continue  # a table of a later version: the migration adds it
        if have is None:
            raise StoreError(f"{where}: the session store is damaged: its table {table!r} "
                             "is missing")
        if set(have) != set(columns):
            missing = [c for c in columns if c not in have]
            other = [c for c in have if c not in columns]
            said = "; ".join(part for part in (
                f"without {_names(missing)}" if missing else "",
                f"with {_names(other)}, which are not phaseflow's" if other else "") if part)
            raise StoreError(f"{where}: the session store is damaged or not phaseflow's: "
                             f"its table {table!r} has other columns than phaseflow's ({said})")
    return False


def must_migrate(version: int | None) -> bool:
    """Whether a store whose ``phaseflow_schema`` says ``version`` (checked by
    :func:`must_create`) must be brought to :data:`SCHEMA_VERSION`: it gets the tables of
    the later versions (:data:`ADDED_IN`) and the new version number, in one
    transaction. Nothing in the older tables changes, so no row is rewritten."""
    return version is not None and version < SCHEMA_VERSION


def migrations(version: int) -> tuple[str, ...]:
    """The tables a store of schema ``version`` lacks, oldest first."""
    return tuple(t for t, added in ADDED_IN.items() if added > version)


def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


class NotJson(ValueError):
    """JSON text holding a number JSON has not: NaN, an infinity, or one beyond a
    float's range (which Python would read as an infinity)."""


def _constant(name: str) -> Any:
    raise NotJson(f"it holds {name}, which is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJson(f"it holds the number {text[:24]}, beyond the range of a float")
    return value


#: one decoder for every read (``json.loads`` with options makes a new one each call)
_decode = json.JSONDecoder(parse_constant=_constant, parse_float=_finite).decode


def loads(text: object) -> Any:
    """A JSON text as phaseflow writes it (:func:`dumps`): ``NaN``, ``Infinity`` and
    numbers no float can hold are refused (:class:`NotJson`), as is anything but text
    (what a hand-edited column may hold). ``ValueError`` saying what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"a value of type {type(text).__name__}, not JSON text")
    try:
        return _decode(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


@dataclass(frozen=True, slots=True)
class Written:
    """What one commit stores: the snapshot, the messages and marks to append (from
    positions ``message_from`` / ``mark_from``), and whether the stored history must be
    replaced rather than extended (a compaction or a rewind rewrote it)."""

    snapshot: str
    messages: tuple[str, ...]
    marks: tuple[str, ...]
    message_from: int
    mark_from: int
    rewrite: bool

    @property
    def history(self) -> rules.History:
        """What the commit rule checks of these rows (:func:`rules.plan_commit`)."""
        return rules.History(self.message_from, self.mark_from, len(self.messages),
                             len(self.marks), self.rewrite)


@dataclass(frozen=True, slots=True)
class Known:
    """What a store knows it holds for a session: the history it wrote (the value, so
    ``starts_with`` tells cheaply whether the next commit extends it), the marks, and,
    after its own commit, the row's event count, its version and the epoch of the
    lease the commit let go (``None``: not known, as after a load; or no lease let
    go), from which the next commit and lease predict the row they will find
    (:func:`phaseflow.stores.operations.expected_commit_row`)."""

    messages: History
    marks: int
    events: int | None = None
    version: int | None = None
    released: int | None = None
    #: the timer deadline the ``timers`` table holds (NaN: not known, as after a load)
    timer: float | None = math.nan


#: the one encoder of :func:`dumps` (``json.dumps`` with options builds one a call)
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def dumps(value: Any) -> str:
    """JSON text every database stores: ASCII (a lone surrogate, which a model can send
    in JSON, is written as its escape, which :func:`loads` gives back exactly), with no
    NaN or infinity (``ValueError``: they are not JSON)."""
    return _ENCODER.encode(value)


def encode_events(session_id: str, events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows of a commit's events; :class:`StoreError` naming the session for one that
    is not JSON (nothing is written)."""
    try:
        return [dumps(dict(e)) for e in events]
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"session {session_id!r}: an event is not JSON ({exc})") from None


def encode_queued(session_id: str, data: Mapping[str, Any]) -> str:
    """The row of a queued message; :class:`StoreError` naming the session when it is
    not JSON."""
    try:
        return dumps(dict(data))
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"session {session_id!r}: the queued message is not JSON ({exc})"
                         ) from None


def encode(record: SessionRecord, known: Known | None) -> tuple[Written, Known]:
    """The rows of ``record``, given what is stored already (``None``: nothing this
    store wrote, so everything is written)."""
    c = record.continuation
    messages = c.messages
    rewrite = known is None or not (len(messages) >= len(known.messages)
                                    and messages.starts_with(known.messages)
                                    and len(c.marks) >= known.marks)
    message_from = 0 if rewrite or known is None else len(known.messages)
    mark_from = 0 if rewrite or known is None else known.marks
    continuation = c.to_json(messages_from=len(messages), marks_from=len(c.marks))
    snapshot = {
        "schema": SCHEMA_VERSION,
        "execution": record.execution.to_json(),
        "continuation": continuation,
        "machine": record.machine,
        "state": record.state,
        "core": record.core,
    }
    if record.next_timer_at is not None:
        snapshot["timer"] = record.next_timer_at
    try:
        text = dumps(snapshot)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"session {record.session_id!r}: the state is not JSON ({exc})"
                         ) from None
    try:
        new_messages = tuple(dumps(message_to_json(m)) for m in messages.after(message_from))
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"session {record.session_id!r}: a message is not JSON ({exc})"
                         ) from None
    new_marks = tuple(dumps(fields_to_json(m)) for m in c.marks[mark_from:])
    return (Written(text, new_messages, new_marks, message_from, mark_from, rewrite),
            Known(messages, len(c.marks)))


@dataclass(frozen=True, slots=True)
class Row:
    """A ``sessions`` row as read."""

    session_id: str
    workflow: str
    workflow_hash: str
    version: int
    status: str
    phase: str
    turn: int
    snapshot: str
    created_at: float
    updated_at: float


def _value(decoded: Any, session_id: str, what: str) -> Any:
    if isinstance(decoded, Rejected):
        raise StoreDataError(f"session {session_id!r}: the stored {what} is invalid: {decoded}")
    return decoded


def _parse(sid: str, what: str, text: object) -> Any:
    try:
        return loads(text)
    except NotJson as exc:
        raise StoreDataError(f"session {sid!r}: {what} is not phaseflow's JSON: {exc} "
                             "(phaseflow never writes one: it was edited or is damaged)"
                             ) from None
    except ValueError as exc:
        raise StoreDataError(f"session {sid!r}: {what} is truncated or corrupt, not "
                             f"phaseflow's JSON ({exc})") from None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _damaged(sid: str, name: str, value: object) -> StoreDataError:
    return StoreDataError(f"session {sid!r}: the {name} column holds {value!r}, which "
                          "phaseflow never writes: the row was edited or is damaged")


# A column's value has the type phaseflow writes: SQLite keeps whatever an UPDATE puts,
# PostgreSQL keeps NaN in a float column.

def _text(sid: str, name: str, value: object) -> str:
    if not isinstance(value, str):
        raise _damaged(sid, name, value)
    return value


def _count(sid: str, name: str, value: object) -> int:
    if not _is_int(value) or value < 0:
        raise _damaged(sid, name, value)
    return int(value)


def _time(sid: str, name: str, value: object, *, null: bool = False) -> float | None:
    if value is None and null:
        return None
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not math.isfinite(value) or (value < 0 and not null)):
        raise _damaged(sid, name, value)
    return float(value)


def counts(sid: str, row: Sequence[Any]) -> tuple[int, ...]:
    """The integer columns of a sessions row a commit reads (``version``, the counts of
    messages, marks and events, ``lease_epoch``: a prefix of them), checked."""
    names = ("version", "message_count", "mark_count", "event_count", "lease_epoch")
    return tuple(_count(sid, name, value) for name, value in zip(names, row, strict=False))


#: the columns of the sessions row a commit writes, in the order of its values
#: (:func:`phaseflow.stores.operations.commit`)
SESSION_COLUMNS = ("workflow, workflow_hash, version, status, phase, turn, snapshot,"
                   " message_count, mark_count, event_count, updated_at")

#: the columns of the sessions row a commit reads (:func:`stored`)
COMMIT_READ = "version, message_count, mark_count, event_count, lease_epoch, lease_owner"


def stored(sid: str, row: Sequence[Any] | None) -> rules.Stored | None:
    """What the commit rule needs of a sessions row read as :data:`COMMIT_READ`
    (``None``: no row), checked."""
    if row is None:
        return None
    version, messages, marks, events, epoch = counts(sid, row[:5])
    owner = None if row[5] is None else _text(sid, "lease_owner", row[5])
    return rules.Stored(version, events, owner, epoch, messages, marks)


def lease(sid: str, owner: object, expires: object, epoch: object
          ) -> tuple[str | None, float | None, int]:
    """The lease columns of a sessions row, checked: holder, expiry, epoch."""
    return (None if owner is None else _text(sid, "lease_owner", owner),
            _time(sid, "lease_expires", expires, null=True), _count(sid, "lease_epoch", epoch))


def stored_lease(sid: str, owner: object, expires: object, epoch: object) -> Lease | None:
    """The lease a sessions row holds (``None``: nobody holds it)."""
    holder, until, number = lease(sid, owner, expires, epoch)
    if holder is None or until is None:
        return None
    return Lease(sid, holder, number, until)


def _snapshot(sid: str, text: object) -> dict[str, Any]:
    data = _parse(sid, "the stored snapshot", text)
    if not isinstance(data, dict):
        raise StoreDataError(f"session {sid!r}: the stored snapshot is not an object")
    schema = data.get("schema")
    if not _is_int(schema) or schema < 1:
        raise StoreDataError(f"session {sid!r}: the stored snapshot has no valid schema "
                             f"version ({schema!r}): it is corrupt or not phaseflow's")
    if schema > SCHEMA_VERSION:
        raise StoreDataError(
            f"session {sid!r} was stored in schema version {schema!r}; this phaseflow reads "
            f"up to version {SCHEMA_VERSION}: upgrade phaseflow to open it")
    return data


def _one_truth(sid: str, status: object, phase: object, turn: object, workflow: object,
               machine: object, core: object) -> None:
    """The columns a snapshot repeats say what it says (the snapshot is the truth)."""
    problem = record_problem(status, phase, turn, workflow, machine, core)
    if problem is not None:
        name, said, truth, source = problem
        raise StoreDataError(
            f"session {sid!r}: its {name} column says {said!r} where its stored "
            f"{source} says {truth!r}: the row was edited or is damaged")


def complete(table: str, sid: str, count: object, indexes: Sequence[object],
             rows: Sequence[str]) -> Sequence[str]:
    """``rows`` when they are exactly the ``count`` rows ``0 .. count - 1`` the sessions
    row says were written; :class:`StoreDataError` otherwise (a lost row would read as a
    shorter, valid-looking history)."""
    written = _count(sid, f"{table[:-1]}_count", count)
    if len(rows) != written or list(indexes) != list(range(written)):
        raise StoreDataError(
            f"session {sid!r}: the store holds {len(rows)} {table} rows where it wrote "
            f"{written}: the stored history is incomplete or corrupt")
    return rows


def decode(row: Row, messages: Sequence[str], marks: Sequence[str]) -> tuple[SessionRecord, Known]:
    """The record the rows describe; :class:`StoreDataError` naming the session and the
    part that is wrong (never a traceback, never a silently different session)."""
    sid = row.session_id
    for name in ("workflow", "workflow_hash", "status", "phase"):
        _text(sid, name, getattr(row, name))
    for name in ("version", "turn"):
        _count(sid, name, getattr(row, name))
    for name in ("created_at", "updated_at"):
        _time(sid, name, getattr(row, name))
    data = _snapshot(sid, row.snapshot)
    parsed_messages = [_parse(sid, f"stored message {k}", m) for k, m in enumerate(messages)]
    parsed_marks = [_parse(sid, f"stored mark {k}", m) for k, m in enumerate(marks)]
    try:
        raw = dict(data["continuation"])
        raw["messages"] = parsed_messages + list(raw.get("messages") or [])
        raw["marks"] = parsed_marks + list(raw.get("marks") or [])
        continuation = _value(Continuation.from_json(raw), sid, "history")
        execution = _value(TurnExecution.from_json(data["execution"]), sid, "run state")
        machine, state, core = data["machine"], data["state"], data["core"]
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreDataError(f"session {sid!r}: the stored snapshot is malformed "
                             f"({type(exc).__name__}: {exc})") from None
    if not isinstance(machine, Mapping) or not isinstance(state, Mapping) or not isinstance(
            core, Mapping):
        raise StoreDataError(f"session {sid!r}: the stored machine, state or core is not an "
                             "object")
    _one_truth(sid, row.status, row.phase, row.turn, row.workflow, machine, core)
    record = SessionRecord(
        session_id=sid, workflow=row.workflow, workflow_hash=row.workflow_hash,
        version=row.version, status=row.status, phase=row.phase, turn=row.turn,
        execution=execution, continuation=continuation,
        machine=machine, state=state, core=core, created_at=row.created_at,
        updated_at=row.updated_at, next_timer_at=_timer(sid, data.get("timer")),
    )
    return record, Known(continuation.messages, len(continuation.marks),
                         timer=record.next_timer_at)


def _timer(sid: str, value: object) -> float | None:
    """The snapshot's timer deadline (absent: none)."""
    if value is None:
        return None
    return _time(sid, "timer", value)


def timer_changed(known: Known | None, due_at: float | None) -> bool:
    """Whether a commit writes the ``timers`` row: the deadline is not what the store
    knows it holds (a session with no timer, as most are, writes nothing)."""
    return known is None or known.timer != due_at


#: the columns of a ``turns`` row a commit writes, in the order of :func:`turn_values`
TURN_COLUMNS = ("session_id, turn, version, workflow, workflow_hash, status, phase, snapshot,"
                " message_count, mark_count, updated_at")


def turn_values(record: SessionRecord, written: Written, message_count: int,
                mark_count: int) -> tuple[Any, ...]:
    """The ``turns`` row of a commit that ends a turn (``keep_turn``): the snapshot text
    the commit encoded already and the history's counts after it, so the record of the
    turn's end is the session's own rows below those counts (nothing else is copied)."""
    return (record.session_id, record.turn, record.version, record.workflow,
            record.workflow_hash, record.status, record.phase, written.snapshot,
            message_count, mark_count, record.updated_at)


def is_turn(turn: object) -> bool:
    """Whether ``turn`` can be a stored turn's number: an integer from 1 that a 64-bit
    column holds (a larger one names no turn, and no database could bind it)."""
    return _is_int(turn) and 1 <= turn < 2**63


def turn_record(sid: str, turn: int, row: Sequence[Any], messages: tuple[Sequence[object],
                Sequence[str]], marks: tuple[Sequence[object], Sequence[str]]) -> SessionRecord:
    """The record of the end of turn ``turn`` from its ``turns`` row ``(version,
    workflow, workflow_hash, status, phase, turn, snapshot, message_count, mark_count,
    updated_at, created_at)`` (``created_at``: the session's) and the session's history
    rows below the counts (``(indexes, rows)``), checked as :func:`decode` checks a
    session: a lost history row, a column that says another thing than the snapshot, or
    a row of another turn is an error naming the session and the turn."""
    (version, workflow, workflow_hash, status, phase, stored_turn, snapshot, message_count,
     mark_count, updated_at, created_at) = row
    if stored_turn != turn:
        raise _damaged(sid, "turn", stored_turn)
    try:
        record, _ = decode(
            Row(sid, workflow, workflow_hash, version, status, phase, stored_turn, snapshot,
                created_at, updated_at),
            complete("messages", sid, message_count, *messages),
            complete("marks", sid, mark_count, *marks))
    except StoreDataError as exc:
        raise StoreDataError(f"the stored record of the end of turn {turn}: {exc}") from None
    return record


def summary(row: Sequence[Any]) -> SessionSummary:
    """A listed session from its row ``(id, workflow, status, phase, turn, version,
    updated_at, snapshot)``: the columns, checked against the snapshot they repeat, so a
    list shows what opening the session gives. A damaged row is a summary with its
    ``problem`` (and nothing else it says), so it hides no other session."""
    sid = str(row[0])
    try:
        return _summary(sid, *row[1:])
    except StoreDataError as exc:
        return SessionSummary(sid, "", "", "", 0, 0, 0.0, problem=str(exc))


def _summary(sid: str, workflow: object, status: object, phase: object, turn: object,
             version: object, updated_at: object, snapshot: object) -> SessionSummary:
    listed = SessionSummary(
        sid, _text(sid, "workflow", workflow), _text(sid, "status", status),
        _text(sid, "phase", phase), _count(sid, "turn", turn), _count(sid, "version", version),
        _time(sid, "updated_at", updated_at) or 0.0)
    data = _snapshot(sid, snapshot)
    _one_truth(sid, status, phase, turn, workflow, data.get("machine"), data.get("core"))
    return listed


def stored_events(sid: str, after: int, count: object,
                  rows: Iterable[tuple[Any, Any]]) -> tuple[StoredEvent, ...]:
    """The events of ``rows`` (``(seq, data)``, in order of ``seq``, those after
    ``after``), checked: each is a JSON object, and they are numbered ``after + 1`` up
    to ``count``, the number of events the session's row says were written (``None``:
    there is no row, so none), with no gap: a lost or added row is an error naming the
    session and the event, never a log that reads as another one."""
    written = 0 if count is None else _count(sid, "event_count", count)
    expected = max(after, 0) + 1
    out = []
    for seq, data in rows:
        if not _is_int(seq) or seq > written:
            raise StoreDataError(
                f"session {sid!r}: the store holds an event {seq!r} the session never wrote "
                f"(it wrote {written}): {_EDITED}")
        if seq != expected:
            raise StoreDataError(f"session {sid!r}: {_missing(expected, seq - 1)}")
        parsed = _parse(sid, f"event {seq}", data)
        if not isinstance(parsed, dict):
            raise StoreDataError(f"session {sid!r}: event {seq} is not a JSON object")
        out.append(StoredEvent(sid, seq, parsed))
        expected += 1
    if expected <= written:
        raise StoreDataError(f"session {sid!r}: {_missing(expected, written)}")
    return tuple(out)


_EDITED = "the event log was edited or is damaged"


def _missing(first: int, last: int) -> str:
    which = f"event {first} is" if first == last else f"events {first} to {last} are"
    return f"{which} missing from the stored log: {_EDITED}"


def queued(sid: str, rows: Iterable[tuple[Any, Any]]) -> tuple[QueuedMessage, ...]:
    """The messages of ``rows`` (``(id, data)``), each a JSON object."""
    out = []
    for qid, data in rows:
        try:
            parsed = loads(data)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not _is_int(qid):
            raise StoreDataError(f"session {sid!r}: queued message {qid!r} is corrupt")
        out.append(QueuedMessage(qid, parsed))
    return tuple(out)
