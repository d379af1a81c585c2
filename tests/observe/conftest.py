"""The ``traced`` fixture: see ``tests/support/otlp_memory.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.otlp_memory import Traced, traced_in_memory


@pytest.fixture
def traced() -> Iterator[Traced]:
    yield from traced_in_memory()
