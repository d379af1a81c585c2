"""Where sessions are kept: the :class:`Store` protocol and its implementations.

``MemoryStore`` is the default. Durable stores (SQLite, Postgres) implement the same
protocol; see :mod:`phaseflow.stores.base` for what a commit is.
"""

from phaseflow.stores.base import (
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
from phaseflow.stores.memory import MemoryStore
from phaseflow.stores.sqlite import SQLiteStore

__all__ = [
    "Lease",
    "MemoryStore",
    "QueuedMessage",
    "SQLiteStore",
    "SessionRecord",
    "SessionSummary",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreFenced",
    "StoredEvent",
]
