"""Timers (an ``auto`` transition with ``after``): the deadline rules, the timer turn's
place in the exactly-once order (walked as data, no I/O), and through the public API
on a real SQLite store: a due timer runs one turn with no user message - the
transition first, ``on_enter`` run, the model told by the session's note - and never a
second time, whoever asks (two agents on one store, a crash between)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from phaseflow import load_workflow_text
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from phaseflow.session.timers import is_due, next_deadline, timer_deadline
from phaseflow.session.turn_order import (
    CommitNotes,
    Hold,
    Holder,
    LetGo,
    Now,
    ReadHolder,
    ReadQueue,
    ResumeLeft,
    Run,
    TakeLease,
    turn_order,
)
from phaseflow.session.values import Core, PhaseView, Send
from phaseflow.stores.base import Lease
from phaseflow.stores.sqlite import SQLiteStore
from phaseflow.turn.messages import UserMessage

WORKFLOW = """
phaseflow: 1
name: waiter
initial: wait
state:
  followed: {type: integer, default: 0}
phases:
  wait:
    goal: Wait for the customer's answer.
    transitions:
      - to: follow_up
        after: 10m
      - to: give_up
        after: 1h
  follow_up:
    goal: Follow up with the customer.
    on_enter:
      - set: {followed: 1}
    transitions:
      - to: done
        when: "state.followed > 5"
  give_up:
    goal: Give up.
    terminal: true
  done:
    goal: Done.
    terminal: true
"""


# --- the rules ------------------------------------------------------------------------


def test_the_deadline_is_the_earliest_after_still_ahead_by_the_wall_clock() -> None:
    phase = load_workflow_text(WORKFLOW).phases["wait"]
    assert timer_deadline(phase, 0.0, 1000.0, False) == 1600.0
    assert timer_deadline(phase, 100.0, 1000.0, False) == 1500.0
    assert timer_deadline(phase, 600.0, 1000.0, False) == 4000.0  # 10m spent: 1h next
    assert timer_deadline(phase, 3600.0, 1000.0, False) is None
    assert timer_deadline(phase, 0.0, 1000.0, True) is None  # finished


def test_a_due_deadline_stays_until_a_boundary_runs_at_or_after_it() -> None:
    phase = load_workflow_text(WORKFLOW).phases["wait"]
    # a commit that runs no boundary (a turn's start, a note, a save) keeps a due timer
    assert next_deadline(1600.0, None, phase, 700.0, 1700.0, False) == 1600.0
    assert next_deadline(1600.0, 1500.0, phase, 700.0, 1700.0, False) == 1600.0
    # a boundary at or after it evaluated the transition: spent, the next one ahead
    assert next_deadline(1600.0, 1600.0, phase, 700.0, 1700.0, False) == 4600.0
    assert next_deadline(1600.0, 1650.0, phase, 700.0, 1700.0, False) == 4600.0
    # not due yet: recomputed (the phase may have changed)
    assert next_deadline(1600.0, None, phase, 100.0, 1000.0, False) == 1500.0
    assert next_deadline(1600.0, None, phase, 700.0, 1700.0, True) is None
    assert is_due(1600.0, 1600.0, "idle") and is_due(1600.0, 1700.0, "failed")
    assert not is_due(1600.0, 1599.0, "idle") and not is_due(None, 1e9, "idle")
    assert not is_due(1600.0, 1700.0, "running")
    assert not is_due(1600.0, 1700.0, "awaiting_approval")


# --- the order, as data -----------------------------------------------------------------


def _lease() -> Lease:
    return Lease("s", "me", 1, 100.0, version=3)


def _walk(first: Send, leases: list[Lease | None], due: bool, status: str = "idle"
          ) -> list[Any]:
    seen: list[Any] = []
    core = Core("s", status=status)  # type: ignore[arg-type]
    plan = turn_order(first, lambda: Now(core, "wait", 3, False, due), busy="queue")
    answer: Any = None
    while True:
        try:
            command = plan.send(answer)
        except StopIteration:
            return seen
        seen.append(command)
        answer = None
        if isinstance(command, TakeLease):
            answer = leases.pop(0) if leases else None
        elif isinstance(command, ReadHolder):
            answer = Holder(None, False)
        elif isinstance(command, ReadQueue):
            answer = ()


def test_a_due_timer_runs_under_the_lease_and_one_spent_meanwhile_does_not() -> None:
    timer = Send("", PhaseView("wait"), timer=True)
    assert _walk(timer, [_lease()], due=True) == [
        TakeLease(),
        Hold(_lease(), reopen=False),
        CommitNotes(),
        Run(timer),
        ReadQueue(),
        LetGo(_lease()),
        ReadQueue(),
    ]
    # caught up, the timer was spent (another worker fired it): no turn
    assert Run(timer) not in _walk(timer, [_lease()], due=False)
    # another worker holds the session: a timer is never queued as a message
    assert _walk(timer, [None], due=True) == [TakeLease(), ReadHolder()]


def test_a_timer_finishes_a_left_turn_and_is_never_fed_to_it_as_a_message() -> None:
    timer = Send("", PhaseView("wait"), timer=True)
    walked = _walk(timer, [_lease()], due=False, status="running")
    assert Run(ResumeLeft()) in walked
    assert Run(timer, feed=True) not in walked and Run(timer) not in walked


# --- through the API, on SQLite ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _agent(
    tmp_path: Path,
    clock: Clock,
    replies: list[Any],
    name: str = "a",
    text: str = WORKFLOW,
    hooks: dict[str, Any] | None = None,
) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider(replies)
    store = SQLiteStore(str(tmp_path / "sessions.db"))
    return Agent(
        load_workflow_text(text, hooks),
        provider,
        store=store,
        clock=clock,
        phase_clock=clock,
        worker=name,
    ), provider


def test_a_due_timer_fires_one_turn_with_the_note_after_the_transition(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        agent, provider = _agent(tmp_path, clock, ["Hello.", "Any news?"])
        session = await agent.session("s")
        assert session.next_timer_at is None  # nothing stored yet
        await session.reply("hi")
        assert session.next_timer_at == clock.now + 600
        assert await session.fire_timer() == ()  # not due
        clock.now += 599
        assert await agent.fire_timers() == 0
        clock.now += 2
        events = await session.fire_timer()
        kinds = [e.type for e in events]
        assert kinds[0] == "turn_started" and "phase_changed" in kinds
        assert kinds.index("phase_changed") < kinds.index("turn_finished")
        assert (session.phase, session.state["followed"], session.turn) == ("follow_up", 1, 2)
        note = provider.requests[-1].history[-1]
        assert "[timer]" in str(note) and "'wait'" in str(note) and "10m" in str(note)
        assert "follow_up" in provider.told()  # the model asked in the new phase
        assert session.next_timer_at is None  # follow_up has no timer
        clock.now += 7200
        assert await session.fire_timer() == ()
        assert await agent.fire_timers() == 0
        assert len(provider.requests) == 2

    asyncio.run(body())


def test_two_agents_on_one_store_fire_each_timer_once(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        first, _ = _agent(tmp_path, clock, ["Hello."] * 6, "w1")
        for k in range(6):
            await (await first.session(f"s{k}")).reply("hi")
        clock.now += 601
        agents = [_agent(tmp_path, clock, ["Any news?"] * 6, f"w{n}")[0] for n in (2, 3)]
        fired = await asyncio.gather(*(a.fire_timers() for a in agents))
        assert sum(fired) == 6
        assert sum(await asyncio.gather(*(a.fire_timers() for a in agents))) == 0
        for k in range(6):
            s = await first.session(f"s{k}")
            assert (s.phase, s.state["followed"], s.turn) == ("follow_up", 1, 2)
            starts = [e for e in await s.events() if e.type == "turn_started"]
            assert len(starts) == 2

    asyncio.run(body())


def test_a_user_message_after_the_deadline_spends_the_timer(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        agent, provider = _agent(tmp_path, clock, ["Hello.", "Sorry, I was away."])
        session = await agent.session("s")
        await session.reply("hi")
        clock.now += 700
        await session.reply("I'm back")  # its boundary takes the timer's transition
        assert session.phase == "follow_up"
        assert await agent.fire_timers() == 0
        assert len(provider.requests) == 2

    asyncio.run(body())


def test_a_timer_due_while_no_process_ran_fires_after_a_restart(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        agent, _ = _agent(tmp_path, clock, ["Hello."])
        await (await agent.session("s")).reply("hi")
        clock.now += 3 * 3600  # both timers due: the first that holds, in order, is taken
        restarted, provider = _agent(tmp_path, clock, ["Any news?"], "w2")
        assert await restarted.fire_timers() == 1
        s = await restarted.session("s")
        assert s.phase == "follow_up" and s.next_timer_at is None
        assert "[timer]" in str(provider.requests[0].history[-1])

    asyncio.run(body())


# --- at a turn's edges: a crash, a turn running, a queue, a fork ---------------------------

#: the waiter whose follow_up phase calls a hook on entering (a test stops it there)
HOOKED = WORKFLOW.replace(
    """      - set: {followed: 1}
""",
    """      - set: {followed: 1}
      - call: entered
""",
)


def _timer_turns(events: tuple[Any, ...]) -> list[Any]:
    return [e for e in events if e.type == "turn_started" and e.note == "timer"]


def test_a_crash_in_the_on_enter_of_a_timer_turn_resumes_with_the_move_first(
    tmp_path: Path,
) -> None:
    """The worker dies in the on_enter of the phase the timer moves to (after the timer
    turn's start was committed, before its first boundary). Another worker finishes that
    turn: the boundary first (never a model request in the phase the timer left), no
    second timer turn, and the note is not queued as a user message."""

    async def body() -> None:
        clock = Clock()
        entered: list[str] = []
        stuck, never = asyncio.Event(), asyncio.Event()

        async def hook(ctx: Any) -> dict[str, Any]:
            entered.append(ctx.phase)
            if len(entered) == 1:
                stuck.set()
                await never.wait()  # the worker dies here
            return {}

        agent, _ = _agent(tmp_path, clock, ["Hello."], text=HOOKED, hooks={"entered": hook})
        session = await agent.session("s")
        await session.reply("hi")
        clock.now += 601
        firing = asyncio.ensure_future(session.fire_timer())
        await stuck.wait()
        firing.cancel()
        await asyncio.gather(firing, return_exceptions=True)
        left = await agent.store.load("s")
        assert left is not None and (left.status, left.phase, left.turn) == ("running", "wait", 2)
        clock.now += 31  # the dead worker's lease has expired
        other, provider = _agent(
            tmp_path,
            clock,
            ["Any news?", "Still there?"],
            "w2",
            text=HOOKED,
            hooks={"entered": hook},
        )
        await other.fire_timers()
        s = await other.session("s")
        assert (s.phase, s.status, s.turn, s.state["followed"]) == ("follow_up", "idle", 2, 1)
        assert len(provider.requests) == 1  # one request, in the phase the timer moved to
        assert "Follow up with the customer" in provider.told()
        assert "Wait for the customer" not in provider.told()
        notes = [m for m in s.history if isinstance(m, UserMessage) and m.note == "timer"]
        assert len(notes) == 1 and [
            m for m in s.history if isinstance(m, UserMessage) and not m.note
        ] == [UserMessage("hi")]
        assert len(_timer_turns(await s.events())) == 1
        assert await other.fire_timers() == 0 and s.next_timer_at is None

    asyncio.run(body())


class Slow(ScriptedProvider):
    """A scripted model whose request ``slow`` (1-based) takes ``seconds`` of the
    clock, and whose request ``hang`` waits until ``released``."""

    def __init__(
        self, replies: list[Any], clock: Clock, slow: int = 0, seconds: float = 0, hang: int = 0
    ) -> None:
        super().__init__(replies)
        self.clock, self.slow, self.seconds, self.hang = clock, slow, seconds, hang
        self.released = asyncio.Event()
        self.hanging = asyncio.Event()
        self.asked = 0

    async def stream(self, request: Any) -> Any:
        self.asked += 1
        if self.asked == self.slow:
            self.clock.now += self.seconds
        if self.asked == self.hang:
            self.hanging.set()
            await self.released.wait()
        async for e in super().stream(request):
            yield e


def _slow_agent(tmp_path: Path, provider: Slow, clock: Clock) -> Agent:
    return Agent(
        load_workflow_text(WORKFLOW),
        provider,
        store=SQLiteStore(str(tmp_path / "sessions.db")),
        clock=clock,
        phase_clock=clock,
        worker="a",
    )


def test_a_deadline_passing_while_a_turn_runs_is_spent_by_its_next_boundary(tmp_path: Path) -> None:
    """The timer falls due while a user's turn runs (its model request is slow): that
    turn's boundary takes the timer's move, and no timer turn follows for it."""

    async def body() -> None:
        clock = Clock()
        provider = Slow(["Hello.", "Let me see."], clock, slow=2, seconds=600)
        agent = _slow_agent(tmp_path, provider, clock)
        session = await agent.session("s")
        await session.reply("hi")
        clock.now += 100
        await session.reply("one question")  # due while its model request runs
        assert session.phase == "follow_up" and session.next_timer_at is None
        assert await agent.fire_timers() == 0 and await session.fire_timer() == ()
        assert _timer_turns(await session.events()) == []
        assert len(provider.requests) == 2

    asyncio.run(body())


def test_the_timer_note_is_its_own_turn_and_queued_messages_stay_the_users(tmp_path: Path) -> None:
    """A message still queued from a cancelled turn is not joined to a timer's note:
    the timer's turn has the note alone (sent as the session's, not the user's), the
    queued message starts the next turn."""

    async def body() -> None:
        clock = Clock()
        provider = Slow(["Hello.", "never", "Any news?", "Sure."], clock, hang=2)
        agent = _slow_agent(tmp_path, provider, clock)
        session = await agent.session("s")
        await session.reply("hi")
        turn = asyncio.ensure_future(session.reply("first"))
        await provider.hanging.wait()
        async for _ in session.send("queued"):  # queued in the turn
            pass
        session.cancel()
        await asyncio.gather(turn, return_exceptions=True)
        assert session.status == "idle"
        clock.now += 601
        events = await session.fire_timer()
        started = [e for e in events if e.type == "turn_started"]
        assert [e.note for e in started] == ["timer", ""]
        assert started[0].message.startswith("[timer]") and started[1].message == "queued"
        users = [m for m in session.history if isinstance(m, UserMessage)]
        assert [(m.note, m.content) for m in users if not m.note] == [
            ("", "hi"),
            ("", "first"),
            ("", "queued"),
        ]
        assert started[0].to_json()["note"] == "timer"
        assert "note" not in started[1].to_json()

    asyncio.run(body())


#: a worker that fires the due timer and is killed (SIGKILL) in the on_enter of the phase
#: the timer moves to, after the timer turn's start was committed
FIRING = """\
import time
from phaseflow import Agent, ScriptedProvider, SQLiteStore, load_workflow_text

def entered(ctx):
    with open({marks!r}, "a", encoding="utf-8") as f:
        f.write(ctx.phase + "\\n")
    time.sleep(120)  # killed here
    return {{}}

start = time.time()
clock = lambda: {now!r} + (time.time() - start)
agent = Agent(load_workflow_text({workflow!r}, {{"entered": entered}}),
              ScriptedProvider(["Any news?"]), store=SQLiteStore({db!r}), clock=clock,
              phase_clock=clock)
agent.fire_timers_sync()
"""


def test_a_worker_killed_in_a_timer_turn_leaves_it_to_finish_once(tmp_path: Path) -> None:
    """A real process fires the due timer and is killed with SIGKILL inside the turn
    (in the on_enter of the phase the timer moves to). Reopened, the timer's turn is
    finished once: the move, then one model request in the new phase; no second timer
    turn, the note in the history once."""
    clock = Clock()
    marks, db = tmp_path / "marks.txt", tmp_path / "sessions.db"

    def entered(ctx: Any) -> dict[str, Any]:
        with marks.open("a", encoding="utf-8") as f:
            f.write(ctx.phase + "\n")
        return {}

    first, _ = _agent(tmp_path, clock, ["Hello."], text=HOOKED, hooks={"entered": entered})
    first.session_sync("s").reply_sync("hi")
    code = FIRING.format(marks=str(marks), now=clock.now + 601, workflow=HOOKED, db=str(db))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (marks.exists() and marks.read_text()) and time.monotonic() < deadline:
            assert child.poll() is None, "the worker ended before the timer's move"
            time.sleep(0.05)
        assert marks.read_text() == "follow_up\n", "the timer's move never started"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    clock.now += 601 + 60  # (the dead worker's lease has expired by now)
    other, provider = _agent(tmp_path, clock, ["Any news?", "Still there?"], "w2",
                             text=HOOKED, hooks={"entered": entered})
    left = other.session_sync("s")
    assert (left.status, left.phase, left.turn) == ("running", "wait", 2)
    other.fire_timers_sync()
    s = other.session_sync("s")
    assert (s.status, s.phase, s.turn, s.state["followed"]) == ("idle", "follow_up", 2, 1)
    assert len(provider.requests) == 1 and "Follow up with the customer" in provider.told()
    assert [m.note for m in s.history if isinstance(m, UserMessage)] == ["", "timer"]
    assert len(_timer_turns(s.events_sync())) == 1
    assert other.fire_timers_sync() == 0 and s.next_timer_at is None


def test_a_forks_deadline_is_as_far_ahead_as_at_the_forked_turns_end(tmp_path: Path
                                                                     ) -> None:
    """A fork's clock starts again from the forked turn's end (its time in the phase is
    that turn's): its timer is due as long after the fork is made as it was after that
    turn ended, and it fires once, in the fork alone."""
    async def body() -> None:
        clock = Clock()
        agent, provider = _agent(tmp_path, clock, ["Hello.", "Any news?", "Any news?"])
        session = await agent.session("s")
        await session.reply("hi")
        assert session.next_timer_at == clock.now + 600
        clock.now += 500  # 100 s before the original's timer
        fork = await session.fork("f", at_turn=1)
        assert fork.next_timer_at == clock.now + 600
        clock.now += 100
        assert await agent.fire_timers() == 1  # the original's, due now
        clock.now += 500
        assert await agent.fire_timers() == 1  # the fork's
        forked = await agent.session("f")
        assert (forked.turn, forked.phase) == (2, "follow_up")
        assert len(provider.requests) == 3  # hi, the original's timer, the fork's
        assert await agent.fire_timers() == 0
    asyncio.run(body())
