"""A session record as rows: what every durable store writes and reads.

One record is one ``sessions`` row (its small JSON ``snapshot``: the turn core's run
state and progress, the continuation without its history and marks, the machine, the
state, the session core) plus append-only ``messages`` and ``marks`` rows. A commit writes
the snapshot and only the messages and marks the session added since the last commit,
so its cost does not grow with the conversation. Reading puts them back together and
checks every part through the turn core's own ``from_json`` (which validates every
invariant), so a corrupted row is an error naming the session, never a wrong session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phaseflow.stores.base import SessionRecord, StoreError
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import TurnExecution
from phaseflow.turn.messages import History, message_to_json
from phaseflow.turn.progress import TurnProgress
from phaseflow.turn.rejections import Rejected

#: the version of the stored form; a store refuses data of a later version
SCHEMA_VERSION = 1


class StoreDataError(StoreError):
    """What a store holds for a session cannot be read back as a session."""


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


@dataclass(frozen=True, slots=True)
class Known:
    """What a store knows it holds for a session: the history it wrote (the value, so
    ``starts_with`` tells cheaply whether the next commit extends it) and the marks."""

    messages: History
    marks: int


def dumps(value: Any) -> str:
    # ASCII: a lone surrogate (a model can send one in JSON) is written as its escape,
    # which every database stores and json.loads gives back exactly
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


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
        "progress": record.progress.to_json(),
        "continuation": continuation,
        "machine": record.machine,
        "state": record.state,
        "core": record.core,
    }
    new_messages = tuple(dumps(message_to_json(m)) for m in messages.after(message_from))
    new_marks = tuple(dumps({"display_entry": m.display_entry, "revision": m.revision,
                              "message_count": m.message_count}) for m in c.marks[mark_from:])
    try:
        text = dumps(snapshot)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"session {record.session_id!r}: the state is not JSON ({exc})"
                         ) from None
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


def decode(row: Row, messages: Sequence[str], marks: Sequence[str]) -> tuple[SessionRecord, Known]:
    """The record the rows describe; :class:`StoreDataError` naming the session and the
    part that is wrong (never a traceback, never a silently different session)."""
    sid = row.session_id
    try:
        data = json.loads(row.snapshot)
        parsed_messages = [json.loads(m) for m in messages]
        parsed_marks = [json.loads(m) for m in marks]
    except (ValueError, TypeError) as exc:
        raise StoreDataError(f"session {sid!r}: stored JSON is truncated or corrupt ({exc})"
                             ) from None
    if not isinstance(data, Mapping):
        raise StoreDataError(f"session {sid!r}: the stored snapshot is not an object")
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise StoreDataError(f"session {sid!r}: the stored snapshot has no valid schema "
                             f"version ({schema!r}): it is corrupt or not phaseflow's")
    if schema > SCHEMA_VERSION:
        raise StoreDataError(
            f"session {sid!r} was stored in schema version {schema!r}; this phaseflow reads "
            f"up to version {SCHEMA_VERSION}: upgrade phaseflow to open it")
    try:
        raw = dict(data["continuation"])
        raw["messages"] = parsed_messages + list(raw.get("messages") or [])
        raw["marks"] = parsed_marks + list(raw.get("marks") or [])
        continuation = _value(Continuation.from_json(raw), sid, "history")
        execution = _value(TurnExecution.from_json(data["execution"]), sid, "run state")
        progress = _value(TurnProgress.from_json(data["progress"]), sid, "turn progress")
        machine, state, core = data["machine"], data["state"], data["core"]
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreDataError(f"session {sid!r}: the stored snapshot is malformed "
                             f"({type(exc).__name__}: {exc})") from None
    if not isinstance(machine, Mapping) or not isinstance(state, Mapping) or not isinstance(
            core, Mapping):
        raise StoreDataError(f"session {sid!r}: the stored machine, state or core is not an "
                             "object")
    record = SessionRecord(
        session_id=sid, workflow=row.workflow, workflow_hash=row.workflow_hash,
        version=row.version, status=row.status, phase=row.phase, turn=row.turn,
        execution=execution, progress=progress, continuation=continuation,
        machine=machine, state=state, core=core, created_at=row.created_at,
        updated_at=row.updated_at,
    )
    return record, Known(continuation.messages, len(continuation.marks))
