"""The stores the durability tests run against: SQLite always; Postgres too, through
the ``postgres_dsn`` fixture of ``tests/stores`` (a private cluster on loopback) when
this checkout has it, or a DSN in ``PHASEFLOW_TEST_POSTGRES``."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.support.durability.worker import open_store


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store every worker process opens by its URL: a SQLite file, or a Postgres DSN
    (sessions with ids of their own, so tests never meet)."""
    if request.param == "sqlite":
        return str(tmp_path / "sessions.db")
    dsn = os.environ.get("PHASEFLOW_TEST_POSTGRES")
    if not dsn:
        try:
            dsn = str(request.getfixturevalue("postgres_dsn"))
        except pytest.FixtureLookupError:
            pytest.skip("no Postgres here (no tests/stores fixture, no "
                        "PHASEFLOW_TEST_POSTGRES)")
    try:
        from phaseflow.stores.postgres import PostgresStore  # type: ignore # noqa: F401
    except ImportError:
        pytest.skip("this phaseflow has no PostgresStore")
    url = f"pg:{dsn}"  # what the workers open as a PostgresStore
    assert type(open_store(url)).__name__ == "PostgresStore"
    return url


@pytest.fixture
def sid() -> str:
    """A session id no other test (or earlier run on a shared database) used."""
    return f"d-{uuid.uuid4().hex[:12]}"
