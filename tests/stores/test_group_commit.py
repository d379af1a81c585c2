"""SQLite's group commit: commits that wait for the store's thread together (several
sessions' turns at once) share one transaction, so one wait for the disk, and each stays
all or nothing: a refused one is rolled back alone and the others land."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from phaseflow.stores import SQLiteStore, StoreConflict
from tests.support.store_sessions import renumber, seed


def test_commits_waiting_together_share_one_transaction_and_fail_alone(
        tmp_path: Path) -> None:
    async def body() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        first = await seed(store, "s0")
        transactions: list[str] = []
        conn = store._connection()  # opened: the trace sees only what follows
        conn.set_trace_callback(
            lambda sql: transactions.append(sql) if sql.startswith("COMMIT") else None)
        # hold the store's thread, so that every commit below waits for it together
        busy = threading.Event()
        store._executor.submit(busy.wait)
        records = [renumber(first, 1, session_id=f"n{k}") for k in range(6)]
        commits = [asyncio.ensure_future(store.commit(r, [{"type": "note"}],
                                                      expected_version=0))
                   for r in records]
        # a commit of s0 that expects a version it does not have: refused, alone
        stale = asyncio.ensure_future(store.commit(renumber(first, 3), [{"type": "x"}],
                                                   expected_version=2))
        await asyncio.sleep(0.05)
        busy.set()
        landed = await asyncio.gather(*commits)
        with pytest.raises(StoreConflict):
            await stale
        assert len(transactions) == 1  # seven commits, one transaction, one sync
        assert all(len(seqs) == 1 for seqs in landed)
        for r in records:
            assert await store.load(r.session_id) == r
        assert (await store.load("s0")) == first  # the refused one left nothing behind
        assert await store.version("s0") == 1
        store.close()
    asyncio.run(body())


def test_a_commit_given_up_before_its_turn_is_not_written(tmp_path: Path) -> None:
    async def body() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        first = await seed(store, "s0")
        busy = threading.Event()
        store._executor.submit(busy.wait)
        gone = asyncio.ensure_future(store.commit(renumber(first, 1, session_id="gone"),
                                                  [], expected_version=0))
        kept = asyncio.ensure_future(store.commit(renumber(first, 1, session_id="kept"),
                                                  [], expected_version=0))
        await asyncio.sleep(0.05)
        gone.cancel()
        await asyncio.sleep(0.01)  # the cancel reaches the waiting commit
        busy.set()
        await kept
        assert await store.load("gone") is None
        assert await store.load("kept") is not None
        store.close()
    asyncio.run(body())
