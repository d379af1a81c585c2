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


def test_due_sessions_are_read_a_page_at_a_time_with_their_records(store: Backend) -> None:
    """One read gives a page of due sessions with what opening each gives (its record,
    equal to a load's) and its lease: soonest first, up to the limit, the next page
    after the last one's key, of the workflows asked for."""
    async def body() -> None:
        writer, reader = await store.open(), await store.open()
        for k, due in enumerate((300.0, 100.0, 200.0, None, 150.0)):
            first = await seed(writer, f"s{k}")
            await writer.commit(renumber(first, 2, next_timer_at=due), [],
                                expected_version=1)
        other = await seed(writer, "x")  # another workflow's due session
        await writer.commit(renumber(other, 2, next_timer_at=120.0, workflow="other",
                                     machine={**other.machine, "workflow": "other"}), [],
                            expected_version=1)
        lease = await writer.acquire("s2", "worker-a", 30.0, 1000.0)
        assert lease is not None
        assert await reader.due_sessions(50.0, 10) == ()
        page = await reader.due_sessions(250.0, 10, workflows=("chat",))
        assert [(d.session_id, d.due_at) for d in page] == [
            ("s1", 100.0), ("s4", 150.0), ("s2", 200.0)]
        for d in page:
            assert d.record == await reader.load(d.session_id) and d.problem is None
        held = page[2].lease
        assert held is not None and (held.owner, held.epoch, held.expires) == (
            "worker-a", lease.epoch, 1030.0)
        assert page[0].lease is None
        # keyset pages: each starts after the last one of the previous page
        first_page = await reader.due_sessions(1e9, 2, workflows=["chat"])
        assert [d.session_id for d in first_page] == ["s1", "s4"]
        second = await reader.due_sessions(1e9, 2, after=first_page[-1].key,
                                           workflows=["chat"])
        assert [d.session_id for d in second] == ["s2", "s0"]
        assert await reader.due_sessions(1e9, 2, after=second[-1].key,
                                         workflows=["chat"]) == ()
        # any workflow, or none asked for
        assert [d.session_id for d in await reader.due_sessions(1e9, 10)] == [
            "s1", "x", "s4", "s2", "s0"]
        assert await reader.due_sessions(1e9, 10, workflows=()) == ()
        assert await reader.due_sessions(1e9, 0) == ()
    store.run(body)


def test_a_damaged_due_session_is_named_and_hides_no_other(durable: Backend) -> None:
    async def body() -> None:
        writer = await durable.open()
        for k, due in enumerate((10.0, 20.0, 30.0)):
            first = await seed(writer, f"s{k}")
            await writer.commit(renumber(first, 2, next_timer_at=due), [],
                                expected_version=1)
        await durable.sql("UPDATE sessions SET snapshot = %s WHERE id = %s",
                          ('{"not": "a snapshot"', "s1"))
        page = await (await durable.open()).due_sessions(1e9, 10)
        assert [(d.session_id, d.record is None) for d in page] == [
            ("s0", False), ("s1", True), ("s2", False)]
        assert page[1].problem is not None and "'s1'" in page[1].problem
        assert page[0].problem is None and page[2].problem is None
    durable.run(body)
