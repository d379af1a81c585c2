"""The stores the durability tests run against: SQLite always; Postgres when the
``postgres_dsn`` fixture of ``tests/stores`` gives one (``PHASEFLOW_TEST_POSTGRES``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _postgres_dsn() -> str | None:
    return os.environ.get("PHASEFLOW_TEST_POSTGRES") or None


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store every worker process opens by its URL: a SQLite file, or a Postgres DSN
    (each test's sessions under ids of its own, so runs never meet)."""
    if request.param == "sqlite":
        yield str(tmp_path / "sessions.db")
        return
    dsn = _postgres_dsn()
    if dsn is None:
        pytest.skip("no Postgres (set PHASEFLOW_TEST_POSTGRES to a DSN)")
    try:
        from phaseflow.stores import PostgresStore  # type: ignore[attr-defined] # noqa: F401
    except ImportError:
        pytest.skip("this phaseflow has no PostgresStore")
    yield dsn


@pytest.fixture
def sid() -> str:
    """A session id no other test (or earlier run on a shared database) used."""
    return f"d-{uuid.uuid4().hex[:12]}"
