"""The store contract of a served deployment, the same tests for every store (memory,
SQLite, PostgreSQL): an ``Idempotency-Key`` claimed once however many claim it at once,
a cancel request read (and removed) by the worker that runs the turn, a session's owner,
and sessions paged from an index, newest first, without a row lost or repeated."""

from __future__ import annotations

import asyncio
import dataclasses

from phaseflow.stores import rules
from phaseflow.stores.base import SessionsPage
from tests.support.store_backends import Backend
from tests.support.store_sessions import seed


def test_a_key_is_claimed_once_even_by_racing_stores(store: Backend) -> None:
    async def body() -> None:
        stores = [await store.open() for _ in range(4)]
        claims = await asyncio.gather(*(
            s.claim_key("s", "k-1", "fp", 100.0, 60.0) for s in stores for _ in range(5)))
        assert claims.count(None) == 1 and claims.count("fp") == 19
        # another request with the key: the first one's fingerprint, to compare
        assert await stores[1].claim_key("s", "k-1", "other", 101.0, 60.0) == "fp"
        # the same key on another session is another key
        assert await stores[2].claim_key("t", "k-1", "other", 101.0, 60.0) is None
        # a claim let go (its request stored nothing) may be claimed again
        await stores[3].drop_key("s", "k-1", "fp")
        assert await stores[0].claim_key("s", "k-1", "fp2", 102.0, 60.0) is None
        # and one older than the ttl is forgotten
        assert await stores[0].claim_key("s", "k-1", "fp3", 200.0, 60.0) is None
        assert await stores[1].claim_key("s", "k-1", "fp4", 201.0, 60.0) == "fp3"
    store.run(body)


def test_a_cancel_request_is_read_once_by_the_holder(store: Backend) -> None:
    async def body() -> None:
        asking, holder = await store.open(), await store.open()
        await asking.request_cancel("s", 50.0)
        await asking.request_cancel("s", 51.0)  # asked again: the latest time
        assert await holder.take_cancels(["x", "s"]) == {"s": 51.0}
        assert await holder.take_cancels(["s"]) == {}
        assert await holder.take_cancels([]) == {}
    store.run(body)


def test_a_cancel_request_of_an_earlier_turn_does_not_apply() -> None:
    assert rules.cancel_applies(100.0, 99.5)
    assert rules.cancel_applies(99.5, 100.0)  # within the clocks' skew
    assert not rules.cancel_applies(90.0, 100.0)


def test_an_owner_is_claimed_once_and_goes_with_the_session(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        await seed(s, "s")
        assert await s.owner("s") is None
        assert await s.claim_owner("s", "ada") == "ada"
        assert await (await store.open()).claim_owner("s", "bob") == "ada"
        await s.claim_key("s", "k", "fp", 1.0, 60.0)
        await s.request_cancel("s", 1.0)
        assert await s.delete("s")
        assert await s.owner("s") is None
        assert await s.take_cancels(["s"]) == {}
        assert await s.claim_key("s", "k", "fp2", 2.0, 60.0) is None
    store.run(body)


def test_sessions_are_paged_newest_first_by_owner_workflow_and_status(
        store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        ids = [f"s{n:02d}" for n in range(12)]
        for n, sid in enumerate(ids):
            record = await seed(s, sid)
            if n % 3 == 0:
                await s.claim_owner(sid, "ada")
            assert record.version == 1
        listed = await s.sessions()
        newest = [x.session_id for x in sorted(
            listed, key=lambda x: (x.updated_at, x.session_id), reverse=True)]

        async def walk(page: SessionsPage) -> list[str]:
            seen: list[str] = []
            while True:
                rows = await s.sessions_page(page)
                seen += [r.session_id for r in rows]
                if len(rows) < page.limit:
                    return seen
                last = rows[-1]
                page = dataclasses.replace(page, before=(last.updated_at, last.session_id))

        assert await walk(SessionsPage(limit=5)) == newest
        assert await walk(SessionsPage(limit=2, owner="ada")) == [
            sid for sid in newest if int(sid[1:]) % 3 == 0]
        assert await walk(SessionsPage(limit=3, owner="bob")) == []
        workflow = listed[0].workflow
        assert await walk(SessionsPage(limit=4, workflow=workflow)) == newest
        assert await walk(SessionsPage(limit=4, workflow="other")) == []
        assert await walk(SessionsPage(limit=4, status=listed[0].status)) == newest
    store.run(body)


def test_a_store_of_schema_version_2_is_migrated(durable: Backend) -> None:
    """A store of version 2 (before request keys, cancels, owners and the paging index):
    opened by this phaseflow, it gets them (and version 4's timers) and the current
    version, and its sessions are paged."""
    async def body() -> None:
        await seed(await durable.open(), "old")
        for table in ("request_keys", "cancels", "owners", "timers"):
            await durable.sql(f"DROP TABLE {table}")
        await durable.sql("DROP INDEX sessions_recent")
        await durable.sql("DROP INDEX sessions_status")
        await durable.sql("UPDATE phaseflow_schema SET version = 2")
        store = await durable.open()
        assert [s.session_id for s in await store.sessions_page(SessionsPage(5))] == ["old"]
        assert await durable.sql("SELECT version FROM phaseflow_schema") == [(4,)]
        assert await store.claim_owner("old", "ada") == "ada"
        assert await store.claim_key("old", "k", "fp", 1.0, 60.0) is None
        if durable.name == "sqlite":
            indexes = await durable.sql("SELECT name FROM sqlite_master WHERE type = 'index'"
                                        " AND name IN ('sessions_recent', 'sessions_status')"
                                        " ORDER BY name")
        else:
            indexes = await durable.sql("SELECT indexname FROM pg_indexes WHERE"
                                        " indexname IN ('sessions_recent', 'sessions_status')"
                                        " AND schemaname = current_schema() ORDER BY 1")
        assert indexes == [("sessions_recent",), ("sessions_status",)]
    durable.run(body)
