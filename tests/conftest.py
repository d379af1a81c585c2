"""Fixtures every test directory may use: the real ``phaseflow`` command in a subprocess,
a private PostgreSQL cluster, and the fake OpenAI-compatible server. What they hand a
test (its types, its helpers) lives in ``tests/support``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_openai_server import FakeOpenAIServer
from tests.support.phaseflow_cli import RunCli, run_phaseflow


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A private PostgreSQL cluster on loopback, once per test session (see
    ``tests/stores/conftest.py`` for when it is skipped and when it must run)."""
    from tests.support.store_backends import start_postgres

    yield from start_postgres()


@pytest.fixture
def phaseflow_cli() -> RunCli:
    return run_phaseflow


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started :class:`FakeOpenAIServer`, stopped after the test (the provider tests',
    and ``phaseflow run``'s against an OpenAI-compatible server)."""
    with FakeOpenAIServer() as server:
        yield server
