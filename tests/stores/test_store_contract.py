"""The store contract, the same tests for every store (memory, SQLite, Postgres).

A store keeps a session exactly (a reopened session is the one that was stored), writes
only with a compare-and-set on the version (of concurrent writers exactly one wins, and
a loser writes nothing), fences a writer whose lease was taken over, consumes queued
messages in the commit that takes them, stores captures once, and commits in a time
that does not grow with the conversation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.stores import Lease, StoreConflict, StoreFenced
from tests.support.store_backends import Backend
from tests.support.store_sessions import (
    chat_commits,
    drain,
    renumber,
    seed,
    support,
    until_approval,
    view,
)

# --- a real session, reopened --------------------------------------------------------


def test_a_reopened_session_is_the_stored_one(store: Backend) -> None:
    async def body() -> None:
        first = await store.open()
        session = await support(first).session("conv-42")
        await until_approval(session)
        assert session.status == "awaiting_approval"
        assert session.pending_approval is not None
        stored = await first.load("conv-42")

        second = await store.open()  # a new connection (memory: the same object)
        again = await support(second).session("conv-42")
        assert view(again) == view(session)
        assert await second.load("conv-42") == stored
        assert [e.to_json() for e in await again.events()] == [
            e.to_json() for e in await session.events()]

        # ... and it goes on from there: the approval resolved after the "restart"
        pending = again.pending_approval
        assert pending is not None
        await drain(again.resolve(pending.call_id, "approve"))
        assert again.state["refund_id"] == "R-77"
        third = await store.open()
        last = await support(third).session("conv-42")
        assert view(last) == view(again)
        assert [e.to_json() for e in await last.events()] == [
            e.to_json() for e in await again.events()]
        summary = [s for s in await third.sessions() if s.session_id == "conv-42"]
        assert [(s.phase, s.status, s.version) for s in summary] == [
            (last.phase, last.status, (await third.load("conv-42")).version)]  # type: ignore[union-attr]
    store.run(body)


def test_every_commit_of_a_real_session_reads_back_as_committed(store: Backend) -> None:
    async def body() -> None:
        recorder = await chat_commits(4)
        target = await store.open()
        for version, (record, events) in enumerate(recorder.log, start=1):
            await target.commit(record, events, expected_version=version - 1)
            assert await (await store.open()).load(record.session_id) == record
        stored = await target.events("chat")
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        assert [dict(e.data) for e in stored] == [
            dict(e) for _, events in recorder.log for e in events]
        assert [dict(e.data) for e in await target.events("chat", after=3)] == [
            dict(e.data) for e in stored[3:]]
    store.run(body)


# --- compare-and-set -----------------------------------------------------------------


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


# --- leases ----------------------------------------------------------------------------


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


# --- the queue ------------------------------------------------------------------------


def test_queued_messages_are_consumed_by_the_commit_that_takes_them(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        first = await seed(s, "q")
        ids = [await s.enqueue("q", {"text": f"m{k}", "n": k}) for k in range(3)]
        other = await s.enqueue("elsewhere", {"text": "not q"})
        assert ids == sorted(ids) and len(set(ids)) == 3 and other > ids[-1]
        assert [(m.id, dict(m.data)) for m in await (await store.open()).queued("q")] == [
            (i, {"text": f"m{k}", "n": k}) for k, i in enumerate(ids)]
        with pytest.raises(StoreConflict):  # a failed commit consumes nothing
            await s.commit(renumber(first, 5), [], expected_version=4, consumed=ids[1])
        assert len(await s.queued("q")) == 3
        await s.commit(renumber(first, 2), [], expected_version=1, consumed=ids[1])
        assert [m.id for m in await (await store.open()).queued("q")] == [ids[2]]
        assert [dict(m.data) for m in await s.queued("elsewhere")] == [{"text": "not q"}]
        assert await s.queued("nobody") == ()
    store.run(body)


# --- delete, captures -----------------------------------------------------------------


def test_delete_removes_the_session_and_everything_it_owns(store: Backend,
                                                           request: pytest.FixtureRequest
                                                           ) -> None:

    async def body() -> None:
        s = await store.open()
        await seed(s, "gone", events=3)
        await seed(s, "kept")
        await s.enqueue("gone", {"text": "later"})
        assert await s.delete("gone") is True
        fresh = await store.open()
        assert await fresh.load("gone") is None
        assert await fresh.events("gone") == ()
        assert await fresh.queued("gone") == ()
        assert [x.session_id for x in await fresh.sessions()] == ["kept"]
        assert await fresh.delete("gone") is False
        again = await seed(fresh, "gone")  # the id can be used again, from version 1
        assert await fresh.load("gone") == again
        assert [e.seq for e in await fresh.events("gone")] == [1]
        await fresh.acquire("leased", "A", ttl=5, now=0)
        assert await fresh.delete("leased") is False  # a lease alone is no session
    store.run(body)


def test_captures_are_stored_once_by_their_hash(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        data = bytes(range(256)) * 40 + b"\x00end"
        ref = await s.put_capture(data)
        assert ref == hashlib.sha256(data).hexdigest()
        assert await s.put_capture(bytearray(data)) == ref  # type: ignore[arg-type]
        assert await (await store.open()).get_capture(ref) == data
        assert await s.get_capture(hashlib.sha256(b"other").hexdigest()) is None
        assert await s.get_capture(await s.put_capture(b"")) == b""
        if store.name != "memory":
            assert await store.sql("SELECT count(*) FROM captures") == [(2,)]
    store.run(body)


def test_sessions_lists_the_newest_first(store: Backend) -> None:
    async def body() -> None:
        s = await store.open()
        for k, sid in enumerate(["a", "b", "c"]):
            first = await seed(s, sid)
            await s.commit(dataclasses.replace(first, version=2, updated_at=float([3, 1, 2][k])),
                           [], expected_version=1)
        listed = await (await store.open()).sessions()
        assert [(x.session_id, x.version, x.updated_at) for x in listed] == [
            ("a", 2, 3.0), ("c", 2, 2.0), ("b", 2, 1.0)]
        assert {x.workflow for x in listed} == {"chat"}
    store.run(body)


# --- any contents -----------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=st.dictionaries(st.text(min_size=1, max_size=10), _JSON, max_size=5),
       event=_JSON, queued=_JSON)
def test_any_json_contents_come_back_unchanged(store: Backend, state: dict[str, Any],
                                               event: Any, queued: Any) -> None:
    """Whatever JSON a session holds (any text but lone surrogates, NUL included; huge
    integers; nesting) is what a new store object reads back."""
    async def body() -> None:
        s = await store.shared()
        sid = f"json-{uuid.uuid4().hex}"
        first = await seed(s, sid, events=0)
        record = dataclasses.replace(first, version=2, state=state)
        await s.commit(record, [{"type": "x", "value": event}], expected_version=1)
        await s.enqueue(sid, {"content": queued})
        fresh = await store.open()
        loaded = await fresh.load(sid)
        assert loaded is not None and dict(loaded.state) == state
        assert [e.data["value"] for e in await fresh.events(sid)] == [event]
        assert [q.data["content"] for q in await fresh.queued(sid)] == [queued]
    store.run(body)


def test_a_lone_surrogate_in_the_state_comes_back_unchanged(
        store: Backend, request: pytest.FixtureRequest) -> None:
    """A model can send "\\ud800" in JSON; Python keeps it as a lone surrogate."""

    async def body() -> None:
        s = await store.open()
        first = await seed(s, "odd")
        record = dataclasses.replace(first, version=2, state={"topic": "a\ud800b"})
        await s.commit(record, [], expected_version=1)
        loaded = await (await store.open()).load("odd")
        assert loaded is not None and loaded.state["topic"] == "a\ud800b"
    store.run(body)


# --- two workers, one session ---------------------------------------------------------

_BUSY = """\
phaseflow: 1
name: busy
initial: talk
tools:
  wait: {}
phases:
  talk:
    goal: Chat.
    tools: [wait]
"""


def test_a_message_for_a_session_another_worker_runs_is_queued_and_run_by_it(
        store: Backend) -> None:
    """Worker B sends while worker A's turn runs: B stores the message (A holds the
    lease); A runs it as its next turn; the stored session has both turns, once."""
    import phaseflow
    from phaseflow.providers import ScriptedProvider
    from phaseflow.session import Agent
    from phaseflow.tools import tool

    async def body() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        @tool
        async def wait() -> str:
            started.set()
            await release.wait()
            return "waited"

        wf = phaseflow.load_workflow_text(_BUSY)
        a = Agent(wf, ScriptedProvider([{"calls": [{"wait": {}}]}, "First done.",
                                        "Second done."]),
                  tools=[wait], store=await store.open(), worker="A")
        b = Agent(wf, ScriptedProvider([]), tools=[wait], store=await store.open(),
                  worker="B")
        session_a = await a.session("shared")
        running = asyncio.ensure_future(drain(session_a.send("first")))
        await started.wait()
        session_b = await b.session("shared")
        assert await drain(session_b.send("second")) == []  # stored for A
        assert len(await (await store.open()).queued("shared")) == 1
        release.set()
        events = await running
        assert [e.reply for e in events if e.type == "turn_finished"] == [
            "First done.", "Second done."]
        reader = await store.open()
        assert await reader.queued("shared") == ()
        final = await Agent(wf, ScriptedProvider([]), tools=[wait], store=reader
                            ).session("shared")
        users = [m.content for m in final.history if type(m).__name__ == "UserMessage"]
        assert users == ["first", "second"]
        assert final.status == "idle" and final.turn == 2
    store.run(body)


def test_messages_queued_while_a_worker_consumes_are_each_taken_once(store: Backend) -> None:
    """Producers on other connections queue while a worker takes what is queued in its
    commits ("consumed up to id N"): every message is taken exactly once, none lost."""
    async def body() -> None:
        worker = await store.open()
        producers = [await store.open() for _ in range(3)]
        first = await seed(worker, "inbox", events=0)
        sent: list[int] = []
        taken: list[int] = []

        async def produce(p: object, k: int) -> None:
            for n in range(12):
                sent.append(await p.enqueue("inbox", {"p": k, "n": n}))  # type: ignore[attr-defined]
                await asyncio.sleep(0)

        async def consume() -> None:
            version = 1
            while len(taken) < 36:
                queued = await worker.queued("inbox")
                if queued:
                    await worker.commit(renumber(first, version + 1), [],
                                        expected_version=version, consumed=queued[-1].id)
                    version += 1
                    taken.extend(q.id for q in queued)
                await asyncio.sleep(0)

        await asyncio.wait_for(asyncio.gather(
            consume(), *(produce(p, k) for k, p in enumerate(producers))), timeout=60)
        assert sorted(taken) == sorted(sent) and len(set(taken)) == 36
        assert await worker.queued("inbox") == ()
    store.run(body)
