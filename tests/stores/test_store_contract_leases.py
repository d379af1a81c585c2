"""The store contract, the same tests for every store (memory, SQLite, Postgres): leases
renew, expire and fence a writer whose lease was taken over, and behave like a reference
model."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.stores import Lease, StoreFenced
from tests.support.store_backends import Backend
from tests.support.store_sessions import (
    chat_commits,
    renumber,
    seed,
)


def test_leases_renew_expire_and_fence(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        a = await s.acquire("job", "A", ttl=10, now=100)
        assert a == Lease("job", "A", 1, 110)
        assert await s.acquire("job", "B", ttl=10, now=105) is None  # A holds it
        assert await s.lease("job") == a and await s.lease("nobody") is None
        renewed = await s.acquire("job", "A", ttl=10, now=108)
        assert renewed == Lease("job", "A", 1, 118)  # renewed: the same epoch
        assert await s.load("job") is None  # a lease alone is no session
        assert await s.version("job") == 0
        assert [x.session_id for x in await s.sessions()] == []

        first = await seed(s, "job")  # A's session (unfenced: the very first commit)
        second = renumber(first, 2)
        await s.commit(second, [], expected_version=1, lease=renewed)

        b = await s.acquire("job", "B", ttl=10, now=130)  # A's lease expired
        assert b == Lease("job", "B", 2, 140)
        with pytest.raises(StoreFenced, match="'A'"):
            await s.commit(renumber(first, 3), [{"type": "late"}], expected_version=2,
                           lease=renewed)
        c = await s.acquire("job", "C", ttl=10, now=131, force=True)
        assert c == Lease("job", "C", 3, 141)
        with pytest.raises(StoreFenced):
            await s.commit(renumber(first, 3), [], expected_version=2, lease=b)
        assert await s.commit(renumber(first, 3), [{"type": "c"}], expected_version=2,
                              lease=c) == (2,)
        await s.release(b)  # not B's any more: nothing happens
        assert await s.acquire("job", "A", ttl=10, now=132) is None
        await s.release(c)
        assert await s.acquire("job", "A", ttl=10, now=133) == Lease("job", "A", 4, 143)
        again = await store.open()
        assert await again.acquire("job", "A", ttl=5, now=134) == Lease("job", "A", 4, 139)
        assert await again.acquire("job", "A", ttl=5, now=134, force=True) == Lease(
            "job", "A", 5, 139)
        loaded = await again.load("job")
        assert loaded is not None and loaded.version == 3
        assert [e.data["type"] for e in await again.events("job")] == ["note", "c"]
    store.run(body)


def test_a_lease_says_the_version_it_was_taken_at(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        first = await s.acquire("v", "A", ttl=10, now=1)
        assert first is not None and first.version == 0  # never committed
        record = await seed(s, "v")
        await s.commit(renumber(record, 2), [], expected_version=1, lease=first)
        await s.release(first)
        again = await s.acquire("v", "B", ttl=10, now=2)
        assert again is not None and again.version == 2
        renewed = await s.acquire("v", "B", ttl=10, now=3)
        assert renewed is not None and renewed.version == 2
    store.run(body)


def test_a_lease_known_to_be_gone_is_replaced_once(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        dead = await s.acquire("r", "A", ttl=30, now=100)
        assert dead is not None
        # B knows A is gone: it takes A's lease although it has not expired
        b = await s.acquire("r", "B", ttl=30, now=101, replacing=dead)
        assert b == Lease("r", "B", dead.epoch + 1, 131)
        # C read the same dead lease a moment earlier: B holds it now, not A
        assert await s.acquire("r", "C", ttl=30, now=102, replacing=dead) is None
        assert await s.lease("r") == b
        # replacing a lease that is not the session's changes nothing
        stale = Lease("r", "B", dead.epoch, 131)
        assert await s.acquire("r", "C", ttl=30, now=103, replacing=stale) is None
    store.run(body)


def test_of_concurrent_acquirers_exactly_one_gets_the_lease(store: Backend) -> None:
    async def body() -> None:
        workers = [await store.open() for _ in range(5)]
        got = await asyncio.gather(*(w.acquire("hot", f"w{k}", ttl=30, now=10)
                                     for k, w in enumerate(workers)))
        held = [g for g in got if g is not None]
        assert len(held) == 1 and held[0].epoch == 1, got
        forced = await asyncio.gather(*(w.acquire("hot", f"w{k}", ttl=30, now=11, force=True)
                                        for k, w in enumerate(workers)))
        assert sorted(f.epoch for f in forced if f is not None) == [2, 3, 4, 5, 6]
    store.run(body)


def test_a_lease_on_an_unknown_session_fences_its_first_commit(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        recorder = await chat_commits(1, "new")
        record = renumber(recorder.log[-1][0], 1)
        with pytest.raises(StoreFenced):
            await s.commit(record, [], expected_version=0,
                           lease=Lease("new", "A", 1, 1e12))
        assert await s.load("new") is None
        lease = await s.acquire("new", "A", ttl=60, now=1.0)
        assert lease is not None
        await s.commit(record, [], expected_version=0, lease=lease)
        loaded = await (await store.open()).load("new")
        assert loaded is not None and loaded.continuation == record.continuation
    store.run(body)


def test_a_lease_taken_before_the_first_commit_keeps_the_records_times(
        store: Backend, request: pytest.FixtureRequest) -> None:

    async def body() -> None:
        s = await store.open()
        recorder = await chat_commits(1, "timed")
        record = renumber(recorder.log[-1][0], 1, created_at=5.0, updated_at=6.0)
        lease = await s.acquire("timed", "A", ttl=60, now=1000.0)
        await s.commit(record, [], expected_version=0, lease=lease)
        loaded = await (await store.open()).load("timed")
        assert loaded is not None and (loaded.created_at, loaded.updated_at) == (5.0, 6.0)
    store.run(body)


def test_releasing_a_renewed_lease_gives_it_up(store: Backend,
                                               request: pytest.FixtureRequest) -> None:
    """A renewal is the same lease (same owner, same epoch): releasing what the owner
    was given first still gives it up, as SQL stores match owner and epoch."""

    async def body() -> None:
        s = await store.open()
        first = await s.acquire("r", "A", ttl=10, now=0)
        await s.acquire("r", "A", ttl=10, now=5)  # renewed until 15
        assert first is not None
        await s.release(first)
        assert await s.acquire("r", "B", ttl=10, now=6) == Lease("r", "B", 2, 16)
    store.run(body)


_OPS = st.lists(st.tuples(st.sampled_from(["acquire", "force", "release", "commit"]),
                          st.sampled_from(["A", "B", "C"]),
                          st.integers(min_value=0, max_value=8)), max_size=14)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_leases_behave_like_the_reference_model(store: Backend, ops: list[tuple[str, str, int]]
                                                ) -> None:
    """Any sequence of acquire / force / release / fenced commit does on the store what
    a plain model of leases says: the lease changes hands exactly when it is free, expired
    or forced, epochs only grow, a commit passes only with the current lease."""
    async def body() -> None:
        s = await store.shared()
        sid = f"model-{uuid.uuid4().hex}"
        base = await seed(s, sid, events=0)
        holder: tuple[str, int, float] | None = None
        epoch, version, now = 0, 1, 0.0
        mine: dict[str, Lease] = {}
        for op, owner, step in ops:
            now += step
            if op in ("acquire", "force"):
                force = op == "force"
                got = await s.acquire(sid, owner, ttl=5, now=now, force=force)
                live = holder is not None and holder[2] > now
                if live and holder is not None and holder[0] != owner and not force:
                    assert got is None
                    continue
                if force or not (live and holder is not None and holder[0] == owner):
                    epoch += 1
                holder = (owner, epoch, now + 5)
                assert got == Lease(sid, owner, epoch, now + 5)
                mine[owner] = got
            elif op == "release" and owner in mine:
                lease = mine[owner]
                await s.release(lease)
                if holder is not None and (holder[0], holder[1]) == (lease.owner, lease.epoch):
                    holder = None
            elif op == "commit" and owner in mine:
                lease = mine[owner]
                valid = holder is not None and (holder[0], holder[1]) == (lease.owner,
                                                                          lease.epoch)
                try:
                    await s.commit(renumber(base, version + 1), [], expected_version=version,
                                   lease=lease)
                except StoreFenced:
                    assert not valid
                else:
                    assert valid
                    version += 1
            # what the store says about the lease is what the model holds (expired too)
            expected = None if holder is None else Lease(sid, *holder)
            assert await s.lease(sid) == expected
        loaded = await s.load(sid)
        assert loaded is not None and loaded.version == version
    store.run(body)
