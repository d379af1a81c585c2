"""The store contract, the same tests for every store (memory, SQLite, Postgres): a
store writes only with a compare-and-set on the version; of concurrent writers exactly
one wins, and a loser writes nothing."""

from __future__ import annotations

import asyncio

import pytest

from phaseflow.stores import StoreConflict
from tests.support.store_backends import Backend
from tests.support.store_sessions import (
    renumber,
    seed,
)


def test_a_stale_writer_conflicts_and_writes_nothing(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        first = await seed(s, "s")
        second = renumber(first, 2, turn=7)
        assert await s.commit(second, [{"type": "note"}], expected_version=1) == (2,)
        for expected in (0, 1, 3):
            with pytest.raises(StoreConflict, match="'s'"):
                await s.commit(renumber(first, expected + 1, turn=99),
                               [{"type": "lost"}], expected_version=expected)
        with pytest.raises(StoreConflict, match="by one"):
            await s.commit(renumber(first, 9), [], expected_version=2)
        fresh = await store.open()
        assert await fresh.load("s") == second
        assert await fresh.version("s") == 2
        assert await fresh.version("unknown") == 0
        assert [e.data["type"] for e in await fresh.events("s")] == ["note", "note"]
    store.run(body)


def test_of_concurrent_writers_exactly_one_wins(store: Backend) -> None:
    async def body() -> None:
        writers = [await store.open() for _ in range(5)]
        base = await seed(writers[0], "race")
        for version in (2, 3):
            outcomes = await asyncio.gather(*(
                w.commit(renumber(base, version, turn=k), [{"type": "w", "k": k}],
                         expected_version=version - 1)
                for k, w in enumerate(writers)), return_exceptions=True)
            won = [k for k, o in enumerate(outcomes) if not isinstance(o, BaseException)]
            assert len(won) == 1, outcomes
            assert all(isinstance(o, StoreConflict) for k, o in enumerate(outcomes)
                       if k not in won)
            loaded = await (await store.open()).load("race")
            assert loaded is not None and (loaded.version, loaded.turn) == (version, won[0])
        assert len(await writers[0].events("race")) == 1 + 2
    store.run(body)


def test_concurrent_read_modify_write_loops_lose_no_update(store: Backend) -> None:
    """Four writers each add ten turns, retrying on conflict: all forty land, once."""
    async def body() -> None:
        writers = [await store.open() for _ in range(4)]
        await seed(writers[0], "counter", events=0)

        async def add(k: int, w: object) -> int:
            tries = 0
            for _ in range(10):
                while True:
                    tries += 1
                    record = await w.load("counter")  # type: ignore[attr-defined]
                    try:
                        await w.commit(  # type: ignore[attr-defined]
                            renumber(record, record.version + 1, turn=record.turn + 1),
                            [{"type": "add", "k": k}], expected_version=record.version)
                        break
                    except StoreConflict:
                        await asyncio.sleep(0)
            return tries

        await asyncio.gather(*(add(k, w) for k, w in enumerate(writers)))
        record = await (await store.open()).load("counter")
        assert record is not None and record.version == 41
        events = await writers[0].events("counter")
        assert [e.seq for e in events] == list(range(1, 41))
        assert sorted(e.data["k"] for e in events) == sorted(list(range(4)) * 10)
    store.run(body)
