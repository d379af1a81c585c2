"""Which session store a command uses: the ``--store`` value of ``phaseflow run`` and
``phaseflow sessions``.

One function, so both commands read the same value the same way: a path is an SQLite
file; a ``postgresql://`` (or ``postgres://``) URL, or a libpq connection string
(``host=db dbname=app``), a PostgreSQL database; ``memory`` a store that keeps nothing
after the process ends; no value is
``phaseflow-sessions.db`` in the current folder, so a chat run without options can be
listed, shown and recovered afterwards without naming a store.

The PostgreSQL store needs an optional dependency (psycopg): it is imported only when a
URL asks for it, and its absence is one clear line, not an ``ImportError``.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import TYPE_CHECKING

from phaseflow.errors import ConfigError, install_hint

if TYPE_CHECKING:
    from phaseflow.stores.base import Store

#: the store used when ``--store`` is not given: an SQLite file in the current folder
DEFAULT_STORE = "phaseflow-sessions.db"

#: the ``--store`` value of a store that lives only as long as the process
MEMORY = "memory"

POSTGRES_HINT = install_hint("postgres")


def is_postgres(value: str) -> bool:
    """Whether ``value`` names a PostgreSQL database: a ``postgresql://`` or
    ``postgres://`` URL, or a libpq connection string of ``key=value`` words (values
    quoted as libpq quotes them)."""
    from phaseflow.stores.dsn import LIBPQ_KEYWORDS, URL_SCHEMES, keywords

    if value.lower().startswith(URL_SCHEMES):
        return True
    keys = keywords(value)
    return keys is not None and all(key in LIBPQ_KEYWORDS for key in keys)


def store_name(value: str | None) -> str:
    """What to call the store in messages: the value as written, every password in it
    shown as ``***`` (what :class:`~phaseflow.stores.postgres.PostgresStore` calls
    itself in its errors, too). Any value is masked, not only one read as a database: a
    connection string libpq would refuse is taken for a file name, and still shown
    without its password."""
    from phaseflow.stores.dsn import masked

    return DEFAULT_STORE if value is None else masked(value)


def is_url(value: str) -> bool:
    """Whether ``value`` looks like ``scheme://...`` (so it is not meant as a file)."""
    scheme, sep, _ = value.partition("://")
    return bool(sep) and scheme.replace("+", "").isalnum()


def open_store(value: str | None, *, must_exist: bool = False,
               pool_size: int | None = None) -> Store:
    """The store ``value`` names (``None``: :data:`DEFAULT_STORE`).

    ``must_exist``: a file store that is not there is an error instead of a new, empty
    file (commands that only read sessions must not leave a file behind). ``pool_size``:
    the most connections a PostgreSQL store opens (``--store-pool``; None: the store's
    default); refused for any other store. Every problem is a
    :class:`~phaseflow.errors.ConfigError` whose message can be shown as it is.
    """
    chosen = DEFAULT_STORE if value is None else value
    if not chosen:
        raise ConfigError("--store needs a value: a file path, a postgresql:// URL or "
                          f"{MEMORY!r}")
    if pool_size is not None and not is_postgres(chosen):
        raise ConfigError(f"--store-pool sizes a PostgreSQL store's pool of connections; "
                          f"--store {store_name(chosen)} has none")
    if chosen == MEMORY:
        from phaseflow.stores.memory import MemoryStore

        return MemoryStore()
    if is_postgres(chosen):
        return _postgres(chosen, pool_size)
    if is_url(chosen):
        scheme = chosen.partition("://")[0]
        raise ConfigError(f"--store {store_name(chosen)}: unknown kind of store {scheme!r} "
                          "(a file path, a postgresql:// URL or 'memory')")
    if os.path.isdir(chosen):
        raise ConfigError(f"--store {store_name(chosen)}: is a folder, not a session store "
                          "file")
    if must_exist and not os.path.exists(chosen):
        where = " (the default; name one with --store)" if value is None else ""
        raise ConfigError(f"no session store at {store_name(chosen)}{where}")
    from phaseflow.stores.sqlite import SQLiteStore

    return SQLiteStore(chosen)


def _postgres(dsn: str, pool_size: int | None = None) -> Store:
    """A ``PostgresStore`` (of ``pool_size`` connections at most, when given) when the
    module and psycopg are installed."""
    missing = (f"--store {store_name(dsn)}: PostgreSQL stores need psycopg 3 and "
               f"phaseflow's PostgreSQL store: {POSTGRES_HINT}")
    try:
        postgres = importlib.import_module("phaseflow.stores.postgres")
    except ImportError:
        raise ConfigError(missing) from None
    from phaseflow.stores.base import StoreError

    try:
        options = {} if pool_size is None else {"pool_size": pool_size}
        store: Store = postgres.PostgresStore(dsn, **options)
    except ImportError:  # a module that imports psycopg only when it is used
        raise ConfigError(missing) from None
    except StoreError as exc:  # psycopg missing, or the store refuses its settings
        raise ConfigError(f"--store {store_name(dsn)}: {exc}") from None
    return store


async def close_store(store: object) -> None:
    """Give back what the store holds (a connection, a pool): ``aclose()`` or ``close()``,
    awaited when it is a coroutine; nothing for a store that has neither."""
    for name in ("aclose", "close"):
        closing = getattr(store, name, None)
        if callable(closing):
            result = closing()
            if inspect.isawaitable(result):
                await result
            return
