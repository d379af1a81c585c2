"""The worker of the durability tests: one process that opens a session from a durable
store and does one thing with it (send a message, recover, resolve an approval), the way
a host's worker would - and that can be made to kill itself with SIGKILL at an exact
point, so a test can stop it where a crash would hurt most.

A kill point is named ``PHASEFLOW_TEST_KILL_AT=<point>:<n>`` (or ``WorkerSpec.kill``):
the worker kills itself at the ``n``-th time it reaches ``point`` in this process.

- ``before:<event type>`` / ``after:<event type>``: right before / after a store commit
  that carries an event of that type (``*``: any commit). ``before:tool_call`` and
  ``after:tool_call`` bracket the commit that checkpoints a tool group and admits its
  calls (one commit: nothing is stored between the two).
- ``tool-enter`` (admitted, the tool function entered, its effect not begun),
  ``tool-start`` (the effect begun: its ``start`` line written), ``tool-middle``,
  ``tool-end`` (the effect done, its ``end`` line written, the function not returned:
  the result is not committed).
- ``hook``: inside the ``on_enter`` ``call`` effect of a phase, during a turn boundary.
- ``provider``: while the model's reply streams.
- ``awaiting``: the turn paused for an approval (the host waits for its human).

Every tool and hook appends one line per start and per end to the effects log
(``start|end TOOL IDEMPOTENCY_KEY PID``), with ``O_APPEND`` writes so lines from several
processes never mix. Run by hand: ``python tests/support/durability/worker.py --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import phaseflow
from phaseflow.providers import ScriptedProvider
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.session import Agent
from phaseflow.stores import SQLiteStore, StoreError
from phaseflow.stores.base import Lease, QueuedMessage, SessionRecord, SessionSummary, StoredEvent
from phaseflow.tools import ToolContext, tool

WORKFLOW = """\
phaseflow: 1
name: durable
initial: a
state:
  n: {type: integer}
  paid: {type: integer}
  done: {type: boolean}
  entered: {type: integer}
tools:
  work: {writes: [n]}
  safe: {idempotent: true}
  pay: {approval: always, writes: [paid]}
  finish: {writes: [done]}
phases:
  a:
    # no hook: b's boundaries are quiet (committed with their group's results), a's not
    goal: Work in a.
    tools: [work, safe, pay, finish]
    transitions:
      - to: end
        when: state.done
      - to: b
        when: state.n % 2 == 1
  b:
    goal: Work in b.
    tools: [work, safe, pay, finish]
    on_enter:
      - call: entered
        with: {phase: b}
    transitions:
      - to: end
        when: state.done
      - to: a
        when: state.n % 2 == 0
  end:
    goal: Say goodbye.
    terminal: true
"""

#: the effects of these tools must never run twice; the others may (same key)
NON_IDEMPOTENT = ("work", "pay", "finish")
IDEMPOTENT = ("safe",)


_WORKFLOW = phaseflow.load_workflow_text(WORKFLOW)


def workflow() -> Any:
    return _WORKFLOW


def script(turns: int, *, approval_every: int = 3) -> list[object]:
    """The model's replies for ``turns`` user turns: every turn calls ``work`` (its
    number, so the phase flips and an ``on_enter`` hook runs) and the idempotent
    ``safe``; every ``approval_every``-th turn also calls ``pay`` (approval: always);
    the last turn calls ``finish`` too, which ends in the terminal phase (one more,
    final, request)."""
    replies: list[object] = []
    for t in range(turns):
        calls: list[dict[str, Any]] = [{"work": {"i": t + 1}}, {"safe": {}}]
        if approval_every and t % approval_every == approval_every - 1:
            calls.insert(0, {"pay": {"amount": t + 1}})
        if t == turns - 1:
            calls.append({"finish": {}})
        replies.append({"text": f"working on {t + 1}", "calls": calls})
        replies.append(f"done {t + 1}")
    replies.append("goodbye")  # the terminal phase's final request
    return replies


@dataclass(frozen=True)
class WorkerSpec:
    """One worker run. ``action``: ``send`` (``text``), ``recover``, ``resolve``
    (``decision``) or ``hold`` (send, and keep the tool running until ``release``
    exists: a worker whose lease another one takes over)."""

    store: str
    session: str
    log: str
    action: str
    text: str = ""
    decision: str = "approve"
    kill: str | None = None
    kills_log: str = ""
    result: str = ""
    lease: float = 30.0
    force: bool = True
    worker: str | None = None
    turns: int = 5
    approval_every: int = 3
    slow: float = 0.0
    wait_approval: float = 0.0
    release: str = ""
    #: a file the worker creates as it starts its work (after the process start-up)
    ready: str = ""
    #: seconds a refused sender waits before it stores its message (widens the window
    #: in which the holder of the turn checks its queue for the last time)
    delay_enqueue: float = 0.0


class Killer:
    """Kills this process at the ``n``-th time a point is reached."""

    def __init__(self, spec: str | None, note: str) -> None:
        self.point, self.n = "", 0
        if spec:
            point, _, n = spec.rpartition(":")
            self.point, self.n = point, int(n)
        self.note = note
        self.seen: dict[str, int] = {}

    def hit(self, point: str) -> None:
        count = self.seen.get(point, 0) + 1
        self.seen[point] = count
        if point == self.point and count == self.n:
            if self.note:
                _append(self.note, f"{point}:{count}")
            os.kill(os.getpid(), signal.SIGKILL)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def open_store(url: str) -> Any:
    """``pg:DSN`` or ``postgresql://...`` (PostgresStore), else a SQLite path."""
    if url.startswith(("pg:", "postgresql://", "postgres://")):
        from phaseflow.stores.postgres import PostgresStore

        return PostgresStore(url.removeprefix("pg:"))
    return SQLiteStore(url.removeprefix("sqlite:"),
                       synchronous=os.environ.get("PHASEFLOW_TEST_SQLITE_SYNC", "FULL"))


async def close_store(store: Any) -> None:
    """Close a store (SQLite: at once; Postgres: its pool, awaited)."""
    inner = getattr(store, "inner", store)
    close = getattr(inner, "close", None)
    if close is not None:
        result = close()
        if asyncio.iscoroutine(result):
            await result


class KillingStore:
    """The real store, with kill points right before and after each commit."""

    def __init__(self, inner: Any, killer: Killer, delay_enqueue: float = 0.0,
                 marker: str = "", trace: str = "") -> None:
        self.inner = inner
        self.trace = trace
        self.killer = killer
        self.delay_enqueue = delay_enqueue
        self.marker = marker
        #: while set, renewing a lease fails as if the store could not be reached
        self.cut_off = False

    async def commit(self, record: SessionRecord, events: Sequence[Mapping[str, Any]], *,
                     expected_version: int, lease: Lease | None = None,
                     consumed: int = 0, release: bool = False,
                     keep_turn: bool = False) -> tuple[int, ...]:
        types = ["*", *dict.fromkeys(str(e.get("type")) for e in events)]
        for t in types:
            self.killer.hit(f"before:{t}")
        seqs: tuple[int, ...] = await self.inner.commit(
            record, events, expected_version=expected_version, lease=lease,
            consumed=consumed, release=release, keep_turn=keep_turn)
        if self.trace:
            _append(self.trace, ",".join(types[1:]))
        for t in types:
            self.killer.hit(f"after:{t}")
        return seqs

    async def load(self, session_id: str) -> SessionRecord | None:
        return await self.inner.load(session_id)  # type: ignore[no-any-return]

    async def turn_record(self, session_id: str, turn: int) -> SessionRecord | None:
        return await self.inner.turn_record(session_id, turn)  # type: ignore[no-any-return]

    async def acquire(self, session_id: str, owner: str, ttl: float, now: float, *,
                      force: bool = False, replacing: Lease | None = None) -> Lease | None:
        if self.cut_off:  # a held worker renews nothing (see build_agent's effect)
            raise StoreError("cut off from the store (a held worker)")
        return await self.inner.acquire(session_id, owner, ttl, now,  # type: ignore[no-any-return]
                                        force=force, replacing=replacing)

    async def release(self, lease: Lease) -> None:
        await self.inner.release(lease)

    async def lease(self, session_id: str) -> Lease | None:
        return await self.inner.lease(session_id)  # type: ignore[no-any-return]

    async def enqueue(self, session_id: str, data: Mapping[str, Any]) -> int:
        if self.delay_enqueue:
            if self.marker:
                _append(self.marker, "enqueuing")
            await asyncio.sleep(self.delay_enqueue)
        self.killer.hit("enqueue")
        return await self.inner.enqueue(session_id, data)  # type: ignore[no-any-return]

    async def queued(self, session_id: str) -> tuple[QueuedMessage, ...]:
        return await self.inner.queued(session_id)  # type: ignore[no-any-return]

    async def version(self, session_id: str) -> int:
        return await self.inner.version(session_id)  # type: ignore[no-any-return]

    async def events(self, session_id: str, after: int = 0) -> tuple[StoredEvent, ...]:
        return await self.inner.events(session_id, after)  # type: ignore[no-any-return]

    async def sessions(self) -> tuple[SessionSummary, ...]:
        return await self.inner.sessions()  # type: ignore[no-any-return]

    async def delete(self, session_id: str) -> bool:
        return await self.inner.delete(session_id)  # type: ignore[no-any-return]

    async def put_capture(self, data: bytes, *, session_id: str | None = None) -> str:
        return await self.inner.put_capture(  # type: ignore[no-any-return]
            data, session_id=session_id)

    async def read_capture(self, reference: str, offset: int, limit: int
                           ) -> tuple[bytes, int] | None:
        return await self.inner.read_capture(  # type: ignore[no-any-return]
            reference, offset, limit)

    async def get_capture(self, reference: str) -> bytes | None:
        return await self.inner.get_capture(reference)  # type: ignore[no-any-return]


class KillingProvider:
    """The scripted model, with a kill point while its reply streams."""

    def __init__(self, inner: ScriptedProvider, killer: Killer) -> None:
        self.inner = inner
        self.killer = killer
        self.model = "scripted"

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        first = True
        async for item in self.inner.stream(request):
            yield item
            if first:
                first = False
                self.killer.hit("provider")


def build_agent(spec: WorkerSpec, killer: Killer, store: Any = None) -> tuple[Agent, Any]:
    """The agent every worker of a test builds the same way: its tools and hook write
    the effects log and carry the kill points."""
    log, slow = spec.log, spec.slow

    async def effect(name: str, key: str) -> None:
        killer.hit("tool-enter")
        _append(log, f"start {name} {key} {os.getpid()}")
        killer.hit("tool-start")
        if spec.release:
            # held: this worker is cut off from the store until released (its lease
            # is not renewed meanwhile, so another worker can take the session over)
            store.cut_off = True
            try:
                while not os.path.exists(spec.release):
                    await asyncio.sleep(0.005)
            finally:
                store.cut_off = False
        elif slow:
            await asyncio.sleep(slow)
        killer.hit("tool-middle")
        _append(log, f"end {name} {key} {os.getpid()}")
        killer.hit("tool-end")

    @tool
    async def work(i: int, ctx: ToolContext) -> dict[str, Any]:
        """Do the turn's work (writes n)."""
        await effect("work", ctx.idempotency_key)
        return {"n": i}

    @tool
    async def safe(ctx: ToolContext) -> str:
        """Something safe to repeat."""
        await effect("safe", ctx.idempotency_key)
        return "ok"

    @tool
    async def pay(amount: int, ctx: ToolContext) -> dict[str, Any]:
        """Pay (needs approval)."""
        await effect("pay", ctx.idempotency_key)
        return {"paid": amount}

    @tool
    async def finish(ctx: ToolContext) -> dict[str, Any]:
        """End the conversation."""
        await effect("finish", ctx.idempotency_key)
        return {"done": True}

    async def entered(context: Any = None, phase: str = "", **_: Any) -> dict[str, Any]:
        _append(log, f"start hook:{phase} - {os.getpid()}")
        killer.hit("hook")
        _append(log, f"end hook:{phase} - {os.getpid()}")
        return {}

    store = KillingStore(open_store(spec.store) if store is None else store, killer,
                         spec.delay_enqueue, f"{spec.log}.enqueuing", spec.ready)
    provider = KillingProvider(ScriptedProvider(script(spec.turns,
                                                       approval_every=spec.approval_every)),
                               killer)
    agent = Agent(workflow(), provider, tools=[work, safe, pay, finish],
                  hooks={"entered": entered}, store=store, lease=spec.lease,
                  worker=spec.worker)
    return agent, store


async def _act(spec: WorkerSpec, killer: Killer) -> dict[str, Any]:
    agent, store = build_agent(spec, killer)
    try:
        return await _act_with(agent, spec, killer)
    finally:
        await close_store(store)


async def _act_with(agent: Agent, spec: WorkerSpec, killer: Killer) -> dict[str, Any]:
    session = await agent.session(spec.session)
    if spec.force and spec.action not in ("hold", "recover"):
        await session.recover(force=True)
    if spec.action in ("send", "hold"):
        async for _e in session.send(spec.text):
            pass
    elif spec.action == "recover":
        await session.recover(force=spec.force)
    elif spec.action == "resolve":
        pending = session.pending_approval
        if pending is not None:
            async for _e in session.resolve(pending.call_id, spec.decision,
                                            reason="decided by the test"):
                pass
    else:
        raise SystemExit(f"unknown action {spec.action!r}")
    if session.status == "awaiting_approval":
        killer.hit("awaiting")
        if spec.wait_approval:
            await asyncio.sleep(spec.wait_approval)  # the host waits for its human
    return {"status": session.status, "phase": session.phase, "turn": session.turn}


def warm_up() -> None:
    """One conversation in memory, so that the fork server has run every code path once
    (lazy imports, compiled schemas) and a forked worker starts warm."""
    from phaseflow.stores import MemoryStore

    async def go() -> None:
        spec = WorkerSpec("", "warm", os.devnull, "send", turns=1)
        agent, _ = build_agent(spec, Killer(None, ""), store=MemoryStore())
        session = await agent.session("warm")
        async for _e in session.send("hello"):
            pass
        await session.recover()
    asyncio.run(go())


def run(spec: WorkerSpec) -> None:
    """The worker's body (a fresh process: a subprocess or a fork of a clean server).
    Writes ``{"ok": ..., "error": ..., ...}`` to ``spec.result`` when it is given."""
    killer = Killer(spec.kill or os.environ.get("PHASEFLOW_TEST_KILL_AT"), spec.kills_log)
    started = time.time()
    if spec.ready:  # the driver's timed kill counts from here
        _append(spec.ready, str(os.getpid()))
    try:
        outcome = asyncio.run(_act(spec, killer))
        outcome["ok"] = True
    except Exception as exc:  # reported to the driver, which decides what is wrong
        outcome = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    outcome["seconds"] = time.time() - started
    if spec.result == "-":
        print(json.dumps(outcome), flush=True)
    elif spec.result:
        with open(spec.result, "w") as f:
            json.dump(outcome, f)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one durability-test worker")
    parser.add_argument("store", help="a SQLite path or a postgresql:// DSN")
    parser.add_argument("session")
    parser.add_argument("log", help="the effects log")
    parser.add_argument("action", choices=["send", "recover", "resolve", "hold"])
    parser.add_argument("text", nargs="?", default="")
    parser.add_argument("--kill", default=None, help="POINT:N (or PHASEFLOW_TEST_KILL_AT)")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--no-force", action="store_true")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--result", default="")
    a = parser.parse_args(argv)
    run(WorkerSpec(a.store, a.session, a.log, a.action, text=a.text, kill=a.kill,
                   lease=a.lease, force=not a.no_force, turns=a.turns, slow=a.slow,
                   result=a.result or "-"))
    return 0


warm_up()

if __name__ == "__main__":
    sys.exit(main())
