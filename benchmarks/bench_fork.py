"""The cost of a fork, and of keeping each turn's end (run by hand:
``python benchmarks/bench_fork.py [--turns 1000] [--rounds 5]``).

**The session.** A real conversation of ``--turns`` turns (default 1,000) of the counting
agent of ``tests/support/forks.py``: every turn a user message, a tool call with its
result, and a text reply (four messages a turn, a state key written, a phase change at
turn 2). It is made once, on a ``MemoryStore`` that records every commit, then replayed
commit by commit (each turn's end kept, as the runner keeps it) into each store under
test: ``MemoryStore``; ``SQLiteStore`` (a file in a temporary folder; replayed with
``synchronous=OFF`` to save time, measured with the default ``FULL``); ``PostgresStore``
on a private cluster (``tests/support/pgserver.py``, ``durable=True``: ``fsync`` and
``synchronous_commit`` on) on loopback.

**Forking** (``--rounds`` times per store and turn): ``session.fork(new_id, at_turn=N)``
of the replayed session, through an ``Agent`` on a store object opened for the
measurement, at N = 1, half the session and its last turn; wall time per fork (median,
min, max), and what it wrote: the rows the new session holds per table, and their bytes
(the ``data``/``snapshot`` text), against the original's (its size).

**Keeping a turn** (``keep_turn``): the cost added to the commit that ends a turn.
``--rounds`` rounds; each replays the recorded conversation's first ``--keep-turns``
turns (default 100) into two fresh sessions, turn by turn interleaved (A's turn t, then
B's, the order swapped every turn), A with ``keep_turn`` at each turn's end and B
without; the time of each turn-ending commit is taken; per store, the median over the
rounds of (A's median) / (B's median), and the bytes of the ``turns`` rows per turn.

Results: ``docs/benchmarks.md`` ("Forking a session").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from phaseflow.stores import MemoryStore, SessionRecord, SQLiteStore, Store  # noqa: E402
from tests.support import forks  # noqa: E402

Log = list[tuple[SessionRecord, tuple[Mapping[str, Any], ...]]]


class Recording(MemoryStore):
    """A memory store that keeps every commit it accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.log: Log = []

    async def commit(self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
                     expected_version: int, **options: Any) -> tuple[int, ...]:
        seqs = await super().commit(record, events, expected_version=expected_version,
                                    **options)
        self.log.append((record, tuple(events)))
        return seqs


async def conversation(turns: int) -> Log:
    store = Recording()
    session = await forks.agent(store, turns).session("orig")
    for i in range(turns):
        await session.reply(f"Message {i}")
    return store.log


def ends_turn(record: SessionRecord, events: Sequence[Mapping[str, Any]]) -> bool:
    return record.status not in ("running", "awaiting_approval") and any(
        e.get("type") == "turn_finished" and e.get("turn") == record.turn for e in events)


async def replay(store: Store, log: Log, sid: str, *, keep: bool = True,
                 upto: int | None = None) -> None:
    for k, (record, events) in enumerate(log if upto is None else log[:upto]):
        await store.commit(replace(record, session_id=sid, version=k + 1), events,
                           expected_version=k, keep_turn=keep and ends_turn(record, events))


# --- the stores ------------------------------------------------------------------------


class Place:
    """One store under test: new store objects on its data, its rows counted."""

    name = ""

    async def open(self, *, fast: bool = False) -> Store:
        raise NotImplementedError

    async def close(self, store: Store) -> None:
        close = getattr(store, "close", None)
        if close is not None:
            done = close()
            if asyncio.iscoroutine(done):
                await done

    async def footprint(self, sid: str) -> dict[str, tuple[int, int]]:
        """Rows and bytes per table of session ``sid``."""
        raise NotImplementedError


class Memory(Place):
    name = "memory"

    def __init__(self) -> None:
        self.store = MemoryStore()

    async def open(self, *, fast: bool = False) -> Store:
        return self.store

    async def close(self, store: Store) -> None:
        return None

    async def footprint(self, sid: str) -> dict[str, tuple[int, int]]:
        entry = self.store._sessions[sid]
        record = entry.record
        assert record is not None
        return {"record": (1, 0), "events": (len(entry.events), 0),
                "turns": (len(entry.turns), 0),
                "history (shared)": (len(record.continuation.messages), 0)}


_TABLES = (("sessions", "id", "length(snapshot)"), ("messages", "session_id", "length(data)"),
           ("marks", "session_id", "length(data)"), ("events", "session_id", "length(data)"),
           ("turns", "session_id", "length(snapshot)"))


class SQLite(Place):
    name = "sqlite"

    def __init__(self, folder: Path) -> None:
        self.path = folder / "fork.db"

    async def open(self, *, fast: bool = False) -> Store:
        return SQLiteStore(self.path, synchronous="OFF" if fast else "FULL")

    async def footprint(self, sid: str) -> dict[str, tuple[int, int]]:
        import sqlite3

        conn = sqlite3.connect(self.path)
        try:
            out: dict[str, tuple[int, int]] = {}
            for table, key, size in _TABLES:
                rows, total = conn.execute(
                    f"SELECT count(*), coalesce(sum({size}), 0) FROM {table} WHERE {key} = ?",
                    (sid,)).fetchone()
                out[table] = (int(rows), int(total))
            return out
        finally:
            conn.close()


class Postgres(Place):
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def open(self, *, fast: bool = False) -> Store:
        from phaseflow.stores.postgres import PostgresStore

        store = PostgresStore(self.dsn)
        await store.open()
        return store

    async def footprint(self, sid: str) -> dict[str, tuple[int, int]]:
        import psycopg

        out: dict[str, tuple[int, int]] = {}
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            for table, key, size in _TABLES:
                cur = await conn.execute(f"SELECT count(*), coalesce(sum({size}), 0) FROM"
                                         f" {table} WHERE {key} = %s", (sid,))
                row = await cur.fetchone()
                assert row is not None
                out[table] = (int(row[0]), int(row[1]))
        return out


# --- measuring ---------------------------------------------------------------------------


def summary(values: Sequence[float], scale: float = 1000.0) -> str:
    ms = sorted(v * scale for v in values)
    return f"{statistics.median(ms):8.2f} ({ms[0]:.2f}-{ms[-1]:.2f})"


def rows_bytes(found: Mapping[str, tuple[int, int]]) -> str:
    return ", ".join(f"{table} {rows}" + (f" rows/{size} B" if size else "")
                     for table, (rows, size) in found.items() if rows)


async def timed(work: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def bench_fork(place: Place, log: Log, turns: int, rounds: int) -> None:
    store = await place.open(fast=True)
    await replay(store, log, "orig")
    await place.close(store)
    size = await place.footprint("orig")
    print(f"\n{place.name}: the session: {rows_bytes(size)}")
    store = await place.open()
    agent = forks.agent(store, 0)
    original = await agent.session("orig")
    for at in sorted({1, turns // 2, turns}):
        times = []
        for r in range(rounds):
            new_id = f"fork-{at}-{r}"

            async def fork(new_id: str = new_id, at: int = at) -> None:
                await original.fork(new_id, at_turn=at)
            times.append(await timed(fork))
        wrote = await place.footprint(f"fork-{at}-0")
        print(f"  fork at turn {at:>5}: {summary(times)} ms; wrote {rows_bytes(wrote)}")
    await place.close(store)


async def bench_keep(place: Place, log: Log, keep_turns: int, rounds: int) -> None:
    upto = next(k + 1 for k, (r, e) in enumerate(log)
                if ends_turn(r, e) and r.turn == keep_turns)
    part = log[:upto]
    ratios, on_all, off_all = [], [], []
    store = await place.open()
    for r in range(rounds):
        a, b = f"keep-on-{r}", f"keep-off-{r}"
        on: list[float] = []
        off: list[float] = []
        for k, (record, events) in enumerate(part):
            pair = ((a, True, on), (b, False, off))
            for sid, keep, into in (pair if record.turn % 2 else pair[::-1]):
                row = replace(record, session_id=sid, version=k + 1)
                ending = ends_turn(record, events)

                async def commit(row: SessionRecord = row, keep: bool = keep,
                                 ending: bool = ending, events: Any = events,
                                 k: int = k) -> None:
                    await store.commit(row, events, expected_version=k,
                                       keep_turn=keep and ending)
                spent = await timed(commit)
                if ending:
                    into.append(spent)
        ratios.append(statistics.median(on) / statistics.median(off))
        on_all += on
        off_all += off
    await place.close(store)
    per_turn = ""
    if place.name != "memory":
        rows, size = (await place.footprint("keep-on-0"))["turns"]
        per_turn = f"; turns rows: {rows} for {keep_turns} turns, {size / rows:.0f} B each"
    print(f"  keep_turn, the commit ending a turn: on {summary(on_all)} ms, off "
          f"{summary(off_all)} ms; on/off per round: median "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}){per_turn}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep-turns", type=int, default=100)
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    args = parser.parse_args()
    print(f"recording a {args.turns}-turn conversation ...", flush=True)
    log = await conversation(args.turns)
    print(f"{len(log)} commits")
    wanted = args.stores.split(",")
    with tempfile.TemporaryDirectory() as folder:
        places: list[Place] = []
        if "memory" in wanted:
            places.append(Memory())
        if "sqlite" in wanted:
            places.append(SQLite(Path(folder)))
        cluster = None
        if "postgres" in wanted:
            from tests.support import pgserver

            cluster = pgserver.start(durable=True)
            places.append(Postgres(cluster.dsn))
        try:
            for place in places:
                await bench_fork(place, log, args.turns, args.rounds)
                await bench_keep(place, log, args.keep_turns, args.rounds)
        finally:
            if cluster is not None:
                cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
