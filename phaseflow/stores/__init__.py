"""Where sessions are kept: the :class:`Store` protocol and its implementations.

``MemoryStore`` is the default. Durable stores (SQLite, Postgres) implement the same
protocol; see :mod:`phaseflow.stores.base` for what a commit is.
"""

from typing import TYPE_CHECKING, Any

from phaseflow.stores.base import (
    DueSession,
    InvalidSessionId,
    Lease,
    QueuedMessage,
    SessionRecord,
    SessionSummary,
    Store,
    StoreConflict,
    StoredEvent,
    StoreError,
    StoreFenced,
)
from phaseflow.stores.codec import StoreDataError
from phaseflow.stores.memory import MemoryStore
from phaseflow.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from phaseflow.stores.postgres import PostgresStore as PostgresStore

__all__ = [
    "DueSession",
    "InvalidSessionId",
    "Lease",
    "MemoryStore",
    "PostgresStore",
    "QueuedMessage",
    "SQLiteStore",
    "SessionRecord",
    "SessionSummary",
    "Store",
    "StoreConflict",
    "StoreDataError",
    "StoreError",
    "StoreFenced",
    "StoredEvent",
]


def __getattr__(name: str) -> Any:
    """``PostgresStore`` loads psycopg only when it is asked for (the ``postgres`` extra)."""
    if name == "PostgresStore":
        from phaseflow.stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'phaseflow.stores' has no attribute {name!r}")
