"""Many worker processes on one store at once: several sending to the same session
(one runs the turn, the others' messages are queued for it), many on many sessions, and
a worker whose lease was taken over, which must be fenced.

Zero lost updates (every message answered exactly once, in some order), zero forks
(one chain of events and history per session), zero double runs (the effects log).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from tests.support.durability.checks import (
    check_chain,
    check_effects,
    check_state,
    final,
    read_log,
    user_texts,
)
from tests.support.durability.driver import Running, read, run_worker, start
from tests.support.durability.worker import WorkerSpec


def _spec(store_url: str, sid: str, tmp_path: Path, name: str, **kw: object) -> WorkerSpec:
    spec = WorkerSpec(store_url, sid, str(tmp_path / f"{sid}.log"), "send",
                      result=str(tmp_path / f"{sid}-{name}.result"), force=False,
                      worker=f"w-{name}", approval_every=0)
    return replace(spec, **kw)  # type: ignore[arg-type]


def _messages_in(texts: list[str]) -> list[str]:
    """The user's messages as sent: a turn's message is the queued ones joined."""
    return [part for t in texts for part in t.split("\n\n")]


def _check_session(store_url: str, sid: str, log: str, sent: set[str]) -> dict[str, int]:
    f = final(store_url, sid)
    statuses = check_chain(f)
    check_state(f)
    started = [e["message"] for e in f.events if e["type"] == "turn_started"]
    got = _messages_in(started)
    stuck = read(store_url, sid).queued
    assert not stuck, f"messages left in the session's queue, never answered: {stuck}"
    assert sorted(got) == sorted(sent), f"messages answered {got}, sent {sorted(sent)}"
    users = _messages_in(user_texts(f.history))
    assert sorted(users) == sorted(sent)
    finished = [e for e in f.events if e["type"] == "turn_finished"]
    assert len(finished) == len(started), "a turn that never finished"
    assert f.status in ("idle", "finished"), f.status
    return check_effects(f, read_log(log), sid, statuses)


def _run_all(specs: list[WorkerSpec]) -> list[dict[str, object]]:
    running = [start(s) for s in specs]
    results = []
    for r in running:
        out = r.wait(120)
        assert out.exitcode == 0 and out.result is not None, out
        results.append(dict(out.result))
    return results


def test_processes_sending_to_one_session_at_once(store_url: str, sid: str,
                                                  tmp_path: Path) -> None:
    """Six processes send to one new session at the same moment: every message is
    answered exactly once (some joined into one turn, as queued messages are), in one
    chain, every tool effect once."""
    n = 6
    sent = {f"from worker {i}" for i in range(n)}
    specs = [_spec(store_url, sid, tmp_path, str(i), text=f"from worker {i}", turns=n,
                   slow=0.01) for i in range(n)]
    results = _run_all(specs)
    assert all(r["ok"] for r in results), results
    _check_session(store_url, sid, specs[0].log, sent)


def test_processes_on_many_sessions(store_url: str, tmp_path: Path) -> None:
    """Twelve processes, three per session on four sessions, all at once, on one store:
    each session whole, nothing of one in another."""
    sessions = [f"many-{k}-{time.time_ns()}" for k in range(4)]
    specs = [_spec(store_url, s, tmp_path, f"{k}-{i}", text=f"{s} message {i}", turns=3)
             for k, s in enumerate(sessions) for i in range(3)]
    results = _run_all(specs)
    assert all(r["ok"] for r in results), results
    for s in sessions:
        _check_session(store_url, s, str(tmp_path / f"{s}.log"),
                       {f"{s} message {i}" for i in range(3)})


def test_rounds_of_concurrent_senders(store_url: str, sid: str, tmp_path: Path) -> None:
    """Three rounds of four processes sending to one session at once (the later
    rounds find a session with history, and maybe a turn still running)."""
    sent: set[str] = set()
    log = ""
    rounds = int(os.environ.get("PHASEFLOW_CONCURRENT_ROUNDS", "3"))
    for r in range(rounds):
        specs = [_spec(store_url, sid, tmp_path, f"{r}-{i}", text=f"round {r} worker {i}",
                       turns=4 * rounds) for i in range(4)]
        sent |= {s.text for s in specs}
        log = specs[0].log
        results = _run_all(specs)
        assert all(x["ok"] for x in results), results
    _check_session(store_url, sid, log, sent)


def test_a_message_queued_as_the_turn_ends_is_answered(store_url: str, sid: str,
                                                       tmp_path: Path) -> None:
    """Worker B finds the turn taken by A and stores its message for A - but only
    after A has looked at its queue for the last time and let the turn go. The message
    must still be answered (by B, which finds the turn free), not left in the queue."""
    release = str(tmp_path / "release")
    log = str(tmp_path / f"{sid}.log")
    a = start(_spec(store_url, sid, tmp_path, "a", action="hold", text="message A",
                    release=release, turns=3))
    _wait_for(lambda: any(x.kind == "start" for x in read_log(log)), "A's tool to start")
    b = start(_spec(store_url, sid, tmp_path, "b", text="message B", turns=3,
                    delay_enqueue=1.0))
    _wait_for(lambda: os.path.exists(f"{log}.enqueuing"),
              "B to find the turn taken and wait to store its message")
    Path(release).touch()
    out_a = a.wait(60)
    assert out_a.result is not None and out_a.result["ok"], out_a
    out_b = b.wait(60)
    assert out_b.result is not None and out_b.result["ok"], out_b
    _check_session(store_url, sid, log, {"message A", "message B"})


def _wait_for(predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_worker_whose_lease_was_taken_over_is_fenced(store_url: str, sid: str,
                                                       tmp_path: Path) -> None:
    """Worker A runs a tool that hangs; an operator's ``recover(force=True)`` in
    another process takes the session and finishes the turn (the admitted call: outcome
    unknown, not run again). When A's tool returns, A's commit raises StoreFenced and
    nothing A writes lands; the session goes on."""
    release = str(tmp_path / "release")
    a = start(_spec(store_url, sid, tmp_path, "a", action="hold", text="message 1",
                    release=release, turns=3))
    log = str(tmp_path / f"{sid}.log")
    _wait_for(lambda: any(x.kind == "start" and x.tool == "work" for x in read_log(log)),
              "worker A's tool to start")
    out = run_worker(_spec(store_url, sid, tmp_path, "b", action="recover", force=True,
                           turns=3))
    assert out.result is not None and out.result["ok"], out
    before = final(store_url, sid)
    assert before.status == "idle"
    Path(release).touch()
    out_a = a.wait(60)
    assert out_a.result is not None and out_a.result["error"] == "StoreFenced", out_a
    after = final(store_url, sid)
    assert after.seqs == before.seqs and after.history == before.history
    assert dict(after.state) == dict(before.state)
    works = [x for x in read_log(log) if x.tool == "work"]
    assert [x.kind for x in works] == ["start", "end"]  # once, by A, never again
    # the session goes on in a third process
    out = run_worker(_spec(store_url, sid, tmp_path, "c", text="message 2", turns=3,
                           force=False))
    assert out.result is not None and out.result["ok"], out
    _check_session(store_url, sid, log, {"message 1", "message 2"})


def _hold_until_expired(store_url: str, sid: str, tmp_path: Path, a_lease: float,
                        **b: object) -> tuple[Running, Running | None]:
    """Worker A's tools hang until A's lease has expired and worker B (a recovery,
    without force: refused while A's lease lasts) has taken the session over; B's spec
    gets ``b``. With a ``release`` for B, B is left running (its re-run of the
    idempotent call hangs too) and returned."""
    a = start(_spec(store_url, sid, tmp_path, "a", action="hold", text="message 1",
                    release=str(tmp_path / "release-a"), turns=3, lease=a_lease))
    log = str(tmp_path / f"{sid}.log")
    _wait_for(lambda: _safe_started(log) == 1, "worker A's tools to start")
    spec = _spec(store_url, sid, tmp_path, "b", action="recover", force=False, turns=3, **b)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        running = start(spec)
        _wait_for(lambda r=running: not r.process.is_alive() or _safe_started(log) == 2,
                  "B to take the session or be refused")
        if _safe_started(log) == 2 or running.process.is_alive():
            if spec.release:
                return a, running
            out = running.wait(60)
            assert out.result is not None and out.result["ok"], out
            return a, None
        out = running.wait(60)
        assert out.result is not None and out.result["error"] == "SessionBusy", out
    raise AssertionError("B never took the session over")


def _safe_started(log: str) -> int:
    """How many processes started the idempotent call (A, then B's re-run of it)."""
    return len({x.pid for x in read_log(log) if x.tool == "safe" and x.kind == "start"})


def test_a_worker_whose_lease_expired_and_was_taken_is_fenced(
        store_url: str, sid: str, tmp_path: Path) -> None:
    """Worker A's lease (0.3 s) expires while its tool hangs; B takes the session (no
    force: only once the lease has expired) and is still running the turn when A's
    tool returns. A's late commit raises StoreFenced; nothing A writes lands."""
    log = str(tmp_path / f"{sid}.log")
    release_b = str(tmp_path / "release-b")
    a, b = _hold_until_expired(store_url, sid, tmp_path, 0.3, release=release_b)
    assert b is not None
    before = final(store_url, sid)
    Path(tmp_path / "release-a").touch()
    out_a = a.wait(60)
    assert out_a.result is not None and out_a.result["error"] == "StoreFenced", out_a
    after = final(store_url, sid)
    assert after.seqs == before.seqs and after.history == before.history
    Path(release_b).touch()
    out_b = b.wait(60)
    assert out_b.result is not None and out_b.result["ok"], out_b
    works = [x for x in read_log(log) if x.tool == "work" and x.kind == "start"]
    assert len(works) == 1  # A's, never again
    _check_session(store_url, sid, log, {"message 1"})


def test_a_worker_whose_lease_expired_while_another_finished_the_turn_is_refused(
        store_url: str, sid: str, tmp_path: Path) -> None:
    """A's lease (0.3 s) expires while its tool hangs; B takes the session over,
    finishes the turn and lets it go. A's late commit is refused (StoreConflict: A may
    renew the free lease, but the session's version moved on); nothing A writes lands;
    A lets the session go, so a message sent next is answered at once."""
    lease = 0.3
    log = str(tmp_path / f"{sid}.log")
    a, _ = _hold_until_expired(store_url, sid, tmp_path, lease, lease=lease)
    before = final(store_url, sid)
    assert before.status == "idle"
    Path(tmp_path / "release-a").touch()
    out_a = a.wait(60)
    assert out_a.result is not None, out_a
    assert out_a.result["error"] in ("StoreConflict", "StoreFenced"), out_a
    after = final(store_url, sid)
    assert after.seqs == before.seqs and after.history == before.history
    out = run_worker(_spec(store_url, sid, tmp_path, "c", text="message 2", turns=3,
                           lease=lease))
    assert out.result is not None and out.result["ok"], out
    assert read(store_url, sid).queued == []
    _check_session(store_url, sid, log, {"message 1", "message 2"})


def test_messages_queued_for_a_worker_that_was_killed_are_answered_by_recovery(
        store_url: str, sid: str, tmp_path: Path) -> None:
    """A runs a turn; B and C find it busy and store their messages for A; A is killed
    (SIGKILL) in its tool. The recovery, in a fourth process, finishes A's turn (its
    call: outcome unknown) and then answers B's and C's messages - each once."""
    release = str(tmp_path / "never")
    log = str(tmp_path / f"{sid}.log")
    a = start(_spec(store_url, sid, tmp_path, "a", action="hold", text="message A",
                    release=release, turns=4))
    _wait_for(lambda: any(x.kind == "start" for x in read_log(log)), "A's tool to start")
    results = _run_all([_spec(store_url, sid, tmp_path, n, text=f"message {n}", turns=4)
                        for n in ("B", "C")])
    assert all(r["ok"] for r in results), results
    assert sorted(read(store_url, sid).queued) == ["message B", "message C"]
    a.kill()
    assert a.wait(30).killed
    out = run_worker(_spec(store_url, sid, tmp_path, "d", action="recover", force=True,
                           turns=4))
    assert out.result is not None and out.result["ok"], out
    effects = _check_session(store_url, sid, log, {"message A", "message B", "message C"})
    assert effects["unknown_outcomes"] >= 1
