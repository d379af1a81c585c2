"""Running workers as separate processes, and reading what they left in the store.

Workers are forked from a clean fork server (``multiprocessing``'s ``forkserver``: a
process that imported phaseflow and the worker module once and did nothing else), so
every worker is a new process with nothing of the previous one in memory - as after a
crash - but starts in milliseconds instead of the second a fresh interpreter takes on
this machine. A worker is killed with SIGKILL (by itself at a kill point, or by the
driver after a random delay) and the next one starts from whatever the store holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from . import worker as worker_module
from .worker import Killer, WorkerSpec, build_agent, close_store

_CTX: Any = None


def _context() -> Any:
    global _CTX
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        # Python 3.11's fork server imports its preload modules before it takes the
        # parent's sys.path: the package root of this module goes in through PYTHONPATH
        # (the server inherits the environment), so the worker module (warmed up at
        # import) is preloaded under the very name the parent knows it by.
        root = str(Path(worker_module.__file__).resolve().parents[
            worker_module.__name__.count(".")])
        before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, before) if p)
        try:
            ctx.set_forkserver_preload([worker_module.__name__])
            forkserver.ensure_running()
        finally:  # the other tests' subprocesses get the environment they had
            if before is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = before
        _CTX = ctx
    return _CTX


@dataclass(frozen=True)
class Outcome:
    """How one worker run ended: ``killed`` (by which point: ``timer`` when the driver
    killed it) or finished with ``result`` (the worker's own report)."""

    killed: bool
    point: str | None
    result: Mapping[str, Any] | None
    exitcode: int | None
    #: commits the worker made before a timed kill (its trace)
    commits: int = 0


class Running:
    """A started worker process."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.process = _context().Process(target=worker_module.run, args=(spec,))
        self.process.start()

    def kill(self) -> None:
        if self.process.is_alive() and self.process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)

    def wait(self, timeout: float = 60.0) -> Outcome:
        self.process.join(timeout)
        if self.process.is_alive():
            self.kill()
            self.process.join()
            raise AssertionError(f"worker {self.spec.action} {self.spec.text!r} hung "
                                 f"for {timeout} s")
        return _outcome(self.spec, self.process.exitcode, timed=False)


def _outcome(spec: WorkerSpec, exitcode: int | None, *, timed: bool) -> Outcome:
    result = None
    if spec.result and os.path.exists(spec.result):
        text = Path(spec.result).read_text()
        result = json.loads(text) if text else None
        os.unlink(spec.result)
    killed = exitcode == -signal.SIGKILL
    point = None
    if killed:
        point = "timer" if timed else "point"
    return Outcome(killed, point, result, exitcode)


def start(spec: WorkerSpec) -> Running:
    return Running(spec)


def run_worker(spec: WorkerSpec, kill_after: float | None = None,
               timeout: float = 60.0) -> Outcome:
    """Run one worker to its end, or SIGKILL it ``kill_after`` seconds after it began
    its work (the process start-up not counted)."""
    if kill_after is not None and spec.result:
        spec = replace(spec, ready=spec.result + ".ready")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spec.ready)
    running = Running(spec)
    if kill_after is not None:
        while not os.path.exists(spec.ready) and running.process.is_alive():
            time.sleep(0.001)
        running.process.join(kill_after)
        if running.process.is_alive():
            running.kill()
            running.process.join()
            out = _outcome(spec, running.process.exitcode, timed=True)
            commits = max(0, len(Path(spec.ready).read_text().splitlines()) - 1) if (
                os.path.exists(spec.ready)) else 0
            return replace(out, commits=commits)
    return running.wait(timeout)


# --- what the store holds ---------------------------------------------------------------


@dataclass
class Seen:
    """The session as a client reads it from the store between two workers."""

    status: str
    started: list[str]
    queued: list[str]
    pending: str | None
    group: Mapping[str, Any] | None
    version: int


def _spec_for_reading(store: str, session: str, log: str) -> WorkerSpec:
    return WorkerSpec(store, session, log, "read")


async def _read(store_url: str, session_id: str, log: str) -> Seen:
    _agent, store = build_agent(_spec_for_reading(store_url, session_id, log), Killer(None, ""))
    try:
        record = await store.load(session_id)
        events = await store.events(session_id)
        queued = await store.queued(session_id)
    finally:
        await close_store(store)
    from phaseflow.turn.messages import content_from_json

    started = [str(e.data.get("message")) for e in events if e.data.get("type") == "turn_started"]
    texts = []
    for q in queued:
        c = content_from_json(q.data.get("content"))
        texts.append(c if isinstance(c, str) else str(c))
    if record is None:
        return Seen("new", started, texts, None, None, 0)
    group = record.core.get("group") if isinstance(record.core, Mapping) else None
    pending = record.execution.pending_approval
    return Seen(record.status, started, texts,
                pending.call_id if pending is not None else None, group, record.version)


def read(store_url: str, session_id: str, log: str = os.devnull) -> Seen:
    return asyncio.run(_read(store_url, session_id, log))


# --- the kill driver ---------------------------------------------------------------------

#: the deterministic kill points (see worker.py); n is drawn per run
POINTS: tuple[tuple[str, int], ...] = (
    ("before:turn_started", 1), ("after:turn_started", 1),
    ("before:tool_call", 1), ("after:tool_call", 1),            # checkpoint + admission
    ("tool-enter", 3), ("tool-start", 3), ("tool-middle", 3), ("tool-end", 3),
    ("before:tool_result", 1), ("after:tool_result", 1),        # the group's results
    ("hook", 1),                                                # the boundary's effect
    ("before:state_changed", 1), ("after:state_changed", 1),
    ("before:phase_changed", 1), ("after:phase_changed", 1),
    ("provider", 3),
    ("before:approval_requested", 1), ("after:approval_requested", 1), ("awaiting", 1),
    ("before:approval_resolved", 1), ("after:approval_resolved", 1),
    ("before:turn_finished", 2), ("after:turn_finished", 2),
    ("before:*", 8), ("after:*", 8),
)


@dataclass
class KillStats:
    runs: int = 0
    kills: int = 0
    by_point: dict[str, int] = field(default_factory=dict)
    conversations: int = 0
    resends: int = 0

    def add(self, other: KillStats) -> None:
        self.runs += other.runs
        self.kills += other.kills
        self.conversations += other.conversations
        self.resends += other.resends
        for k, v in other.by_point.items():
            self.by_point[k] = self.by_point.get(k, 0) + v


class RandomKills:
    """Each worker: with probability ``timed`` a SIGKILL from the driver after a random
    delay (up to the time a worker's work has recently taken, so that the kill lands
    while it works, however fast this machine is), otherwise a kill point drawn from
    :data:`POINTS` (its occurrence drawn too)."""

    def __init__(self, rng: random.Random, timed: float = 0.35) -> None:
        self.rng, self.timed = rng, timed
        self.durations: list[float] = [0.05]

    def choose(self, spec: WorkerSpec) -> tuple[str | None, float | None]:
        if self.rng.random() < self.timed:
            recent = sorted(self.durations[-20:])
            return None, self.rng.uniform(0.0, recent[len(recent) // 2] * 1.1)
        point, most = self.rng.choice(POINTS)
        return f"{point}:{self.rng.randint(1, most)}", None

    def fired(self, point: str) -> None:
        pass

    def finished(self, seconds: float) -> None:
        self.durations.append(seconds)


class EveryPoint:
    """Each worker gets the first kill point (its first occurrence) that has not fired
    yet, in turn, until every point of :data:`POINTS` has killed a worker."""

    def __init__(self) -> None:
        self.left = [p for p, _ in POINTS]
        self.turn = 0

    def choose(self, spec: WorkerSpec) -> tuple[str | None, float | None]:
        if not self.left:
            return None, None
        point = self.left[self.turn % len(self.left)]
        self.turn += 1
        return f"{point}:1", None

    def fired(self, point: str) -> None:
        if point in self.left:
            self.left.remove(point)

    def finished(self, seconds: float) -> None:
        pass


def drive_conversation(base: WorkerSpec, messages: list[str], rng: random.Random,
                       kills: RandomKills | EveryPoint, *, max_runs: int = 400) -> KillStats:
    """Bring the scripted conversation to its end as a client would, through workers
    that are killed at random points: after each worker the client reads the store;
    it recovers an interrupted turn, resolves a pending approval (a new process), and
    sends the next message - again when its ``turn_started`` is not in the store (the
    process that took it died before committing it)."""
    stats = KillStats(conversations=1)
    streak = 0
    attempted: set[str] = set()
    for _ in range(max_runs):
        seen = read(base.store, base.session, base.log)
        check_seen(seen, messages)
        if seen.status == "running" or seen.queued:
            spec = replace(base, action="recover")
        elif seen.status == "awaiting_approval":
            spec = replace(base, action="resolve",
                           decision=rng.choice(("approve", "approve", "reject")))
        elif len(seen.started) == len(messages):
            return stats
        elif seen.status == "finished":
            raise AssertionError(f"finished before every message was sent: {seen}")
        else:
            text = messages[len(seen.started)]
            if text in attempted:
                stats.resends += 1
            attempted.add(text)
            spec = replace(base, action="send", text=text)
        kill, kill_after = (None, None) if streak >= 4 else kills.choose(spec)
        spec = replace(spec, kill=kill)
        outcome = run_worker(spec, kill_after)
        stats.runs += 1
        if outcome.killed:
            streak += 1
            stats.kills += 1
            name = (f"timer after {outcome.commits} commits" if outcome.point == "timer"
                    else (kill or "?").rpartition(":")[0])
            kills.fired(name)
            stats.by_point[name] = stats.by_point.get(name, 0) + 1
        else:
            streak = 0
            if outcome.result is not None:
                kills.finished(float(outcome.result.get("seconds", 0.05)))
            if outcome.exitcode != 0 or (outcome.result is not None
                                         and not outcome.result.get("ok")):
                raise AssertionError(f"worker {spec.action} failed: {outcome}")
    raise AssertionError(f"the conversation did not end within {max_runs} workers")


def check_seen(seen: Seen, messages: list[str]) -> None:
    """What must hold after every worker, killed or not: the turns started are the
    messages in order, never one twice; a stored tool group is either admitted (the
    checkpoint and the admission are one commit) or waiting for a human."""
    assert seen.started == messages[:len(seen.started)], (
        f"turns started with {seen.started}, the client sent {messages}")
    group = seen.group
    if group is not None and not group.get("admitted"):
        assert seen.status == "awaiting_approval", (
            f"a tool group stored neither admitted nor waiting for approval: {group}")
