"""A writer process for the several-processes test: ``python -m tests.support.store_cas_writer
KIND TARGET SESSION COUNT NAME`` adds COUNT turns to SESSION (load, commit with the version
it read, retry on conflict) and prints how many commits it tried."""

from __future__ import annotations

import asyncio
import sys

from phaseflow.stores import SQLiteStore, Store, StoreConflict
from tests.support.store_sessions import renumber


async def main(kind: str, target: str, sid: str, count: int, name: str) -> int:
    store: Store
    if kind == "sqlite":
        store = SQLiteStore(target)
    else:
        from phaseflow.stores.postgres import PostgresStore

        store = PostgresStore(target)
    tries = 0
    for _ in range(count):
        while True:
            tries += 1
            record = await store.load(sid)
            assert record is not None
            try:
                await store.commit(
                    renumber(record, record.version + 1, turn=record.turn + 1),
                    [{"type": "add", "by": name}], expected_version=record.version)
                break
            except StoreConflict:
                await asyncio.sleep(0)
    close = store.close()  # type: ignore[attr-defined]
    if asyncio.iscoroutine(close):
        await close
    return tries


if __name__ == "__main__":
    kind, target, sid, count, name = sys.argv[1:6]
    print(asyncio.run(main(kind, target, sid, int(count), name)))
