"""The statements SQLite and PostgreSQL run alike, written once.

Both databases take this SQL as it is but for the parameter mark: SQLite's ``?`` is
how it is written here, and the PostgreSQL store turns it into psycopg's ``%s``
(:func:`for_psycopg`). A statement whose form differs between the two (an upsert, an
insert that returns its id, an append of many rows) stays with its backend.
"""

from __future__ import annotations

from phaseflow.stores import codec

#: what a commit reads of the session's row (PostgreSQL adds ``FOR UPDATE``)
READ_COMMIT = f"SELECT {codec.COMMIT_READ} FROM sessions WHERE id = ?"

#: a commit's update of an existing row (a lease's placeholder gets its creation time,
#: and a release clears the lease columns, in the same statement); parameters: the
#: values of :data:`codec.SESSION_COLUMNS`, then placeholder, created_at, release,
#: release, id
UPDATE_SESSION = ("UPDATE sessions SET "
                  + ", ".join(f"{c.strip()} = ?" for c in codec.SESSION_COLUMNS.split(","))
                  + ", created_at = CASE WHEN ? THEN ? ELSE created_at END,"
                  " lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END,"
                  " lease_expires = CASE WHEN ? THEN NULL ELSE lease_expires END"
                  " WHERE id = ?")

#: a commit's insert of the session's row; parameters: the values of
#: :data:`codec.SESSION_COLUMNS`, then id, created_at
INSERT_SESSION = (f"INSERT INTO sessions ({codec.SESSION_COLUMNS}, id, created_at) VALUES ("
                  + ", ".join("?" * (codec.SESSION_COLUMNS.count(",") + 3)) + ")")

#: the history a rewriting commit deletes: the records of earlier turns' ends name rows
#: that are gone with it
DROP_HISTORY = tuple(f"DELETE FROM {t} WHERE session_id = ?"
                     for t in ("messages", "marks", "turns"))

#: what a deleted session leaves: every row of it (the sessions row is deleted first)
DELETE_REST = tuple(f"DELETE FROM {t} WHERE session_id = ?"
                    for t in ("messages", "marks", "events", "inbox", "turns",
                              "request_keys", "cancels", "owners", "timers"))

CONSUME = "DELETE FROM inbox WHERE session_id = ? AND id <= ?"

#: the row a lease taken before the session's first commit makes (version 0: no session
#: yet, as every read treats it); parameters: id, now, now
PLACEHOLDER = ("INSERT INTO sessions (id, workflow, workflow_hash, version, status, phase,"
               " turn, snapshot, message_count, mark_count, event_count, created_at,"
               " updated_at) VALUES (?, '', '', 0, 'new', '', 0, '{}', 0, 0, 0, ?, ?)")

#: what the lease rule reads (and the version the lease says it was taken at)
READ_LEASE = ("SELECT lease_owner, lease_expires, lease_epoch, version FROM sessions"
              " WHERE id = ?")
SET_LEASE = ("UPDATE sessions SET lease_owner = ?, lease_expires = ?, lease_epoch = ?"
             " WHERE id = ?")
RELEASE = ("UPDATE sessions SET lease_owner = NULL, lease_expires = NULL"
           " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?")
LEASE = "SELECT lease_owner, lease_expires, lease_epoch FROM sessions WHERE id = ?"

VERSION = "SELECT version FROM sessions WHERE id = ?"
SESSIONS = ("SELECT id, workflow, status, phase, turn, version, updated_at, snapshot"
            " FROM sessions WHERE version != 0 ORDER BY updated_at DESC")
QUEUED = "SELECT id, data FROM inbox WHERE session_id = ? ORDER BY id"
GET_CAPTURE = "SELECT data FROM captures WHERE sha256 = ?"


#: an ``Idempotency-Key``'s claim (``rules.key_claimed``, in one statement, so two
#: racing claims cannot both win): a row when this claim won; parameters: session id,
#: key, fingerprint, now, now - ttl
CLAIM_KEY = ("INSERT INTO request_keys (session_id, key, fingerprint, created_at)"
             " VALUES (?, ?, ?, ?) ON CONFLICT (session_id, key) DO UPDATE SET"
             " fingerprint = excluded.fingerprint, created_at = excluded.created_at"
             " WHERE request_keys.created_at < ? RETURNING 1")
KEY = "SELECT fingerprint FROM request_keys WHERE session_id = ? AND key = ?"
DROP_KEY = "DELETE FROM request_keys WHERE session_id = ? AND key = ? AND fingerprint = ?"

REQUEST_CANCEL = ("INSERT INTO cancels (session_id, requested_at) VALUES (?, ?)"
                  " ON CONFLICT (session_id) DO UPDATE SET"
                  " requested_at = excluded.requested_at")


def cancels(count: int) -> str:
    """Which of ``count`` sessions have a cancel request (a read)."""
    marks = ", ".join("?" * count)
    return f"SELECT session_id FROM cancels WHERE session_id IN ({marks})"


def take_cancels(count: int) -> str:
    """The cancel requests of ``count`` sessions, deleted as they are read."""
    marks = ", ".join("?" * count)
    return (f"DELETE FROM cancels WHERE session_id IN ({marks})"
            " RETURNING session_id, requested_at")


#: a commit's ``timers`` row: its deadline (parameters: id, due_at), or none (id)
SET_TIMER = ("INSERT INTO timers (session_id, due_at) VALUES (?, ?)"
             " ON CONFLICT (session_id) DO UPDATE SET due_at = excluded.due_at")
DROP_TIMER = "DELETE FROM timers WHERE session_id = ?"
#: the sessions whose timer is due at a time, soonest first, along the ``timers_due``
#: index (parameters: now, limit): no other session's row is read
DUE_TIMERS = ("SELECT session_id, due_at FROM timers WHERE due_at <= ?"
              " ORDER BY due_at, session_id LIMIT ?")

#: what :func:`due_sessions` reads of each due session: its deadline, its lease, then
#: what a load reads of its row (:data:`~phaseflow.stores.durable.LoadRow`'s first
#: twelve columns)
DUE_COLUMNS = ("t.due_at, s.lease_owner, s.lease_expires, s.lease_epoch, s.id, s.workflow,"
               " s.workflow_hash, s.version, s.status, s.phase, s.turn, s.snapshot,"
               " s.created_at, s.updated_at, s.message_count, s.mark_count")


def due_sessions(*, after: bool, workflows: int, history: str = "") -> str:
    """One page of the sessions whose timer is due, read along the ``timers_due`` index
    from ``after`` (keyset pagination), joined with their rows (a lease's placeholder
    is no session): :data:`DUE_COLUMNS`, then ``history`` (columns a backend adds);
    parameters: now, after's due_at and id (when ``after``), the ``workflows`` names,
    the limit."""
    where = ["t.due_at <= ?", "s.version > 0"]
    if after:
        where.append("(t.due_at, t.session_id) > (?, ?)")
    if workflows:
        where.append(f"s.workflow IN ({', '.join('?' * workflows)})")
    return (f"SELECT {DUE_COLUMNS}{history} FROM timers AS t JOIN sessions AS s"
            f" ON s.id = t.session_id WHERE {' AND '.join(where)}"
            " ORDER BY t.due_at, t.session_id LIMIT ?")


CLAIM_OWNER = ("INSERT INTO owners (session_id, owner) VALUES (?, ?)"
               " ON CONFLICT (session_id) DO NOTHING")
OWNER = "SELECT owner FROM owners WHERE session_id = ?"


def sessions_page(*, owner: bool, workflow: bool, status: bool, before: bool) -> str:
    """One page of :data:`SESSIONS`' rows, read backwards along the ``sessions_recent``
    index (``updated_at, id``; ``sessions_status`` with a status: ``status, updated_at,
    id``) from ``before`` (keyset pagination: no row before the page is read);
    parameters, of those asked for, in this order: owner, workflow,
    status, before's updated_at and id, then the limit."""
    where = ["s.version != 0"]
    source = "sessions AS s"
    if owner:
        source += " JOIN owners AS o ON o.session_id = s.id"
        where.append("o.owner = ?")
    if workflow:
        where.append("s.workflow = ?")
    if status:
        where.append("s.status = ?")
    if before:
        where.append("(s.updated_at, s.id) < (?, ?)")
    return ("SELECT s.id, s.workflow, s.status, s.phase, s.turn, s.version, s.updated_at,"
            f" s.snapshot FROM {source} WHERE {' AND '.join(where)}"
            " ORDER BY s.updated_at DESC, s.id DESC LIMIT ?")


def for_psycopg(statement: str) -> str:
    """``statement`` with psycopg's parameter mark (none of these statements holds a
    ``?`` or a ``%`` of its own)."""
    return statement.replace("?", "%s")
