"""What a finished conversation must show, however often its workers were killed: read
from the store (the session reopened, its events) and from the effects log the tools
append to. Each check fails with what it saw."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phaseflow.turn.messages import AssistantMessage, ToolResultMessage, UserMessage

from .worker import (
    IDEMPOTENT,
    NON_IDEMPOTENT,
    Killer,
    WorkerSpec,
    build_agent,
    close_store,
    workflow,
)


@dataclass(frozen=True)
class LogLine:
    kind: str  # start | end
    tool: str
    key: str
    pid: int


def read_log(path: str) -> list[LogLine]:
    out = []
    try:
        with open(path) as f:
            for line in f:
                kind, tool, key, pid = line.split()
                out.append(LogLine(kind, tool, key, int(pid)))
    except FileNotFoundError:
        pass
    return out


@dataclass(frozen=True)
class Final:
    """The session as the store gives it back at the end."""

    status: str
    phase: str
    state: Mapping[str, Any]
    history: tuple[Any, ...]
    events: tuple[Mapping[str, Any], ...]
    seqs: tuple[int, ...]
    stored_state: Mapping[str, Any]


async def _final(store_url: str, session_id: str) -> Final:
    agent, store = build_agent(WorkerSpec(store_url, session_id, "/dev/null", "read"),
                               Killer(None, ""))
    try:
        session = await agent.session(session_id)
        stored = await store.events(session_id)
        record = await store.load(session_id)
    finally:
        await close_store(store)
    return Final(session.status, session.phase, dict(session.state), session.history,
                 tuple(e.data for e in stored), tuple(e.seq for e in stored),
                 dict(record.state) if record is not None else {})


def final(store_url: str, session_id: str) -> Final:
    return asyncio.run(_final(store_url, session_id))


def user_texts(history: Iterable[Any]) -> list[str]:
    out = []
    for m in history:
        if isinstance(m, UserMessage):
            c = m.content
            out.append(c if isinstance(c, str) else "".join(getattr(p, "text", "") for p in c))
    return out


def check_chain(f: Final) -> dict[str, str]:
    """One chain: events numbered 1..N without a gap; every call in the history has
    exactly one result, after it; the events tell the same calls and results. Returns
    each call's result status (from the events), by call id."""
    assert f.seqs == tuple(range(1, len(f.seqs) + 1)), f"event seqs with gaps: {f.seqs}"
    calls: list[str] = []
    results: Counter[str] = Counter()
    open_calls: set[str] = set()
    for m in f.history:
        if isinstance(m, AssistantMessage):
            assert not open_calls, f"a request was sent with calls without results: {open_calls}"
            for c in m.tool_calls:
                calls.append(c.id)
                open_calls.add(c.id)
        elif isinstance(m, ToolResultMessage):
            assert m.call_id in open_calls, f"a result for no open call: {m.call_id}"
            open_calls.discard(m.call_id)
            results[m.call_id] += 1
        elif isinstance(m, UserMessage):
            assert not open_calls, f"a user message while calls are open: {open_calls}"
    assert not open_calls, f"calls without a result at the end: {open_calls}"
    assert len(calls) == len(set(calls)), f"a call id twice in the history: {calls}"
    assert all(results[c] == 1 for c in calls), f"results per call: {results}"
    event_calls = [e["call_id"] for e in f.events if e["type"] == "tool_call"]
    assert event_calls == calls, f"tool_call events {event_calls} != history calls {calls}"
    statuses: dict[str, str] = {}
    for e in f.events:
        if e["type"] == "tool_result":
            assert e["call_id"] not in statuses, f"two tool_result events for {e['call_id']}"
            statuses[e["call_id"]] = e["status"]
    assert set(statuses) == set(calls), f"tool_result events for {set(statuses)} != {calls}"
    return statuses


def check_messages(f: Final, sent: list[str]) -> None:
    """Every message the client sent is in the history exactly once, in order."""
    users = user_texts(f.history)
    assert users == sent, f"user messages in the history {users} != sent {sent}"
    started = [e["message"] for e in f.events if e["type"] == "turn_started"]
    assert started == sent, f"turn_started events {started} != sent {sent}"


def check_state(f: Final) -> None:
    """The state the session reopened with is what its state_changed events imply over
    the workflow's defaults; its phase is what its phase_changed events imply."""
    wf = workflow()
    state: dict[str, Any] = dict(wf.defaults())
    phase = wf.initial
    for e in f.events:
        if e["type"] == "state_changed":
            for k in e["keys"]:
                v = e["new"].get(k)
                if v is None:
                    state.pop(k, None)
                else:
                    state[k] = v
        elif e["type"] == "phase_changed":
            assert e["from_phase"] == phase, f"a phase change from {e['from_phase']} in {phase}"
            phase = e["to_phase"]
    assert state == dict(f.state), f"replayed state {state} != session state {dict(f.state)}"
    assert dict(f.stored_state) == dict(f.state)
    assert phase == f.phase, f"replayed phase {phase} != session phase {f.phase}"


def check_effects(f: Final, log: list[LogLine], session_id: str,
                  statuses: Mapping[str, str]) -> dict[str, int]:
    """No effect of a non-idempotent tool ran twice (its key starts at most once); an
    idempotent one may have run again, with the same key; every effect belongs to a
    call of the history; a call whose result is ok ran to its end; a rejected call
    never ran. Returns counts for the report."""
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    tool_of: dict[str, str] = {}
    for line in log:
        if line.tool.startswith("hook:"):
            continue
        (starts if line.kind == "start" else ends)[line.key] += 1
        assert tool_of.setdefault(line.key, line.tool) == line.tool, f"a key for two tools: {line}"
    prefix = f"{session_id}:"
    calls = set(statuses)
    for key, n in starts.items():
        assert key.startswith(prefix), f"an effect with a foreign key: {key}"
        call_id = key[len(prefix):]
        assert call_id in calls, f"an effect ran for a call the history does not have: {key}"
        tool = tool_of[key]
        if tool in NON_IDEMPOTENT:
            assert n == 1, f"{tool} ran {n} times with key {key}"
        else:
            assert tool in IDEMPOTENT
        status = statuses[call_id]
        # ok, an error of its own, or "outcome unknown, not run again" (interrupted)
        assert status in ("ok", "error", "unknown"), (
            f"{tool} ran but its result is {status}: {key}")
    for call_id, status in statuses.items():
        key = prefix + call_id
        if status == "ok":
            assert ends[key] >= 1, f"call {call_id} is ok but its effect never ended"
        if status == "rejected":
            assert starts[key] == 0
    reruns = sum(n - 1 for k, n in starts.items() if n > 1)
    unknown = sum(1 for s in statuses.values() if s == "unknown")
    hooks = sum(1 for x in log if x.tool.startswith("hook:") and x.kind == "start")
    entered = sum(1 for e in f.events if e["type"] == "phase_changed"
                  and e["to_phase"] == "b")  # (a has no on_enter hook)
    # an on_enter effect is at least once: a worker killed during the boundary left it
    # uncommitted, and the next one ran the boundary again
    assert hooks >= entered, f"{entered} phases entered, {hooks} on_enter effects ran"
    return {"effects": sum(starts.values()), "idempotent_reruns": reruns,
            "unknown_outcomes": unknown, "hook_runs": hooks, "hook_reruns": hooks - entered}


def check_all(store_url: str, session_id: str, log_path: str, sent: list[str]
              ) -> dict[str, int]:
    f = final(store_url, session_id)
    statuses = check_chain(f)
    check_messages(f, sent)
    check_state(f)
    return check_effects(f, read_log(log_path), session_id, statuses)
