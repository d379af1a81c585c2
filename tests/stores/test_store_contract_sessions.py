"""The store contract, the same tests for every store (memory, SQLite, Postgres): a
store keeps a session exactly (a reopened session is the one that was stored, any JSON
contents come back unchanged), consumes queued messages in the commit that takes them,
stores captures once, deletes a session with everything it owns, lists the newest first."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.stores import StoreConflict
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
