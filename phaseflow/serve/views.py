"""What the resources answer: JSON views of stored sessions, their history and events,
a page of sessions, the served workflows. Pure functions of stored values."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from phaseflow.machine.calls import snapshot_path
from phaseflow.serve.problems import Problem
from phaseflow.session.records import history, message_json, pending_json
from phaseflow.spec.model import tree_catalogue
from phaseflow.stores.base import SessionRecord, SessionSummary, StoredEvent

#: the statuses a session may have (``?status=`` is one of them)
STATUSES = ("idle", "running", "awaiting_approval", "finished", "failed", "cancelling")


def session_json(record: SessionRecord) -> dict[str, Any]:
    return {"id": record.session_id, "workflow": record.workflow, "status": record.status,
            "phase": record.phase, "path": snapshot_path(record.machine),
            "turn": record.turn, "state": dict(record.state),
            "pending_approval": pending_json(record), "version": record.version,
            "created_at": record.created_at, "updated_at": record.updated_at,
            "next_timer_at": record.next_timer_at}


def history_json(record: SessionRecord) -> list[dict[str, Any]]:
    """The exact messages the model sees now (the summary in place of what a history
    compaction folded)."""
    return [message_json(m) for m in history(record)]


def event_json(stored: StoredEvent) -> dict[str, Any]:
    """A persisted event as the session emitted it (``seq`` the store's)."""
    return {**stored.data, "seq": stored.seq}


def summary_json(summary: SessionSummary) -> dict[str, Any]:
    out: dict[str, Any] = {"id": summary.session_id, "workflow": summary.workflow,
                           "status": summary.status, "phase": summary.phase,
                           "turn": summary.turn, "version": summary.version,
                           "updated_at": summary.updated_at}
    if summary.problem is not None:
        out["problem"] = summary.problem
    return out


def encode_cursor(summary: SessionSummary) -> str:
    raw = json.dumps([summary.updated_at, summary.session_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
        at, sid = value
        if isinstance(at, bool) or not isinstance(at, int | float) or not isinstance(sid, str):
            raise ValueError
        return float(at), sid
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise Problem(400, "invalid_parameter", "the cursor is not one this server gave",
                      field="cursor") from None


def page(rows: Sequence[SessionSummary], *, limit: int) -> dict[str, Any]:
    """A page of sessions as the store read it (newest first, by last update, then id,
    filtered, after the cursor: ``Store.sessions_page``), of up to ``limit + 1`` rows:
    the first ``limit`` listed, a next cursor when there are more."""
    chosen = rows[:limit]
    more = len(rows) > limit
    return {"sessions": [summary_json(s) for s in chosen],
            "next_cursor": encode_cursor(chosen[-1]) if more and chosen else None}


def workflow_json(name: str, content_hash: str, workflow: Any,
                  implemented: Mapping[str, Any]) -> dict[str, Any]:
    catalogue = tree_catalogue(workflow) or {}  # the tools of the workflows it calls, too
    return {"name": name, "hash": content_hash, "initial": workflow.initial,
            "description": workflow.description or "",
            "phases": [{"name": p.name, "goal": p.goal, "terminal": p.terminal}
                       for p in workflow.phases.values()],
            "tools": [{"name": t, "implemented": t in implemented}
                      for t in catalogue]}
