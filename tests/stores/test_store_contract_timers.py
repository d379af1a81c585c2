"""The store contract of timers, the same tests for every store (memory, SQLite,
PostgreSQL): a commit stores the session's next timer with it, the due ones are found
by the index of deadlines (soonest first, up to a limit), a commit with no timer ahead
takes the session out of it, a deletion too; and an older store gets the table."""

from __future__ import annotations

import dataclasses

from tests.support.store_backends import Backend
from tests.support.store_sessions import renumber, seed


def test_due_timers_are_found_soonest_first_and_leave_with_their_commit(
        store: Backend) -> None:
    async def body() -> None:
        writer, reader = await store.open(), await store.open()
        for k, due in enumerate((300.0, 100.0, 200.0, None)):
            first = await seed(writer, f"s{k}")
            await writer.commit(renumber(first, 2, next_timer_at=due), [],
                                expected_version=1)
        assert await reader.due_timers(50.0, 10) == ()
        assert await reader.due_timers(250.0, 10) == (("s1", 100.0), ("s2", 200.0))
        assert await reader.due_timers(1e9, 2) == (("s1", 100.0), ("s2", 200.0))
        loaded = await reader.load("s0")
        assert loaded is not None and loaded.next_timer_at == 300.0
        # the next commit says no timer ahead (it fired): the session leaves the index
        await writer.commit(dataclasses.replace(loaded, version=3, next_timer_at=None), [],
                            expected_version=2)
        assert [sid for sid, _ in await reader.due_timers(1e9, 10)] == ["s1", "s2"]
        again = await reader.load("s0")
        assert again is not None and again.next_timer_at is None
        assert await writer.delete("s1")
        assert await reader.due_timers(1e9, 10) == (("s2", 200.0),)
    store.run(body)


def test_a_store_of_schema_version_3_gets_the_timers_table(durable: Backend) -> None:
    async def body() -> None:
        first = await seed(await durable.open(), "old")
        await durable.sql("DROP TABLE timers")
        await durable.sql("UPDATE phaseflow_schema SET version = 3")
        store = await durable.open()
        assert await store.due_timers(1e9, 10) == ()  # (a store migrates on first use)
        assert await durable.sql("SELECT version FROM phaseflow_schema") == [(4,)]
        await store.commit(renumber(first, 2, next_timer_at=5.0), [], expected_version=1)
        assert await store.due_timers(10.0, 10) == (("old", 5.0),)
    durable.run(body)
