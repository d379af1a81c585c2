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
                    for t in ("messages", "marks", "events", "inbox", "turns"))

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


def for_psycopg(statement: str) -> str:
    """``statement`` with psycopg's parameter mark (none of these statements holds a
    ``?`` or a ``%`` of its own)."""
    return statement.replace("?", "%s")
