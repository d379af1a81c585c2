"""The stores under test, behind one small interface (``tests/support/store_backends.py``),
so the contract tests are the same tests for every store.

- ``postgres_dsn`` (session-scoped, defined in ``tests/conftest.py``): a private
  PostgreSQL cluster on loopback, started once per test session (see
  ``tests/support/pgserver.py``). Skipped, with the reason, only when no
  PostgreSQL binaries are found and ``PHASEFLOW_PG_BIN`` is unset; a failure when
  ``PHASEFLOW_REQUIRE_POSTGRES=1`` (CI) or when the binaries exist but do not start.
- ``store`` (parametrized: memory, sqlite, postgres) and ``durable`` (sqlite, postgres):
  a :class:`Backend` that opens new store objects on the same data (each Postgres test
  gets a schema of its own through the DSN's ``search_path``), runs coroutines on one
  event loop per test (a Postgres pool belongs to its loop) and closes what it opened;
  ``pg``: the Postgres one alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.store_backends import (
    Backend,
    PostgresBackend,
    open_backend,
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every store, one after the other: the contract is the same."""
    yield from open_backend(request.param, request, tmp_path)


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[Backend]:
    """PostgreSQL alone (what only its store does: pools, schemas, float columns)."""
    backend = PostgresBackend(postgres_dsn)
    try:
        yield backend
    finally:
        backend.finish()


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The stores that encode rows (what can be corrupted, counted, versioned)."""
    yield from open_backend(request.param, request, tmp_path)
