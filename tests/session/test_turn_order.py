"""The exactly-once order under the lease, walked as data: the plan of
:mod:`phaseflow.session.turn_order` is sent scripted answers (no store, runner or event
loop), and the commands it yields are the order a real driver performs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from phaseflow.session.core import ResolutionRefused
from phaseflow.session.events import ErrorEvent
from phaseflow.session.refusals import SessionBusy, SessionFinished
from phaseflow.session.turn_order import (
    CommitEvents,
    CommitNotes,
    Hold,
    Holder,
    LetGo,
    Message,
    Now,
    Plan,
    ReadHolder,
    ReadQueue,
    ReadVersion,
    ResumeLeft,
    Run,
    StoreMessage,
    TakeLease,
    taken_into_turn,
    turn_order,
)
from phaseflow.session.values import Core, Interrupt, PhaseView, Resolve, Send, Status
from phaseflow.stores.base import Lease, QueuedMessage
from phaseflow.turn.execution import ApprovalDecision
from phaseflow.turn.messages import TextPart

VIEW = PhaseView("intake")


def lease(version: int = 3) -> Lease:
    return Lease("s", "me", 1, 100.0, version=version)


def send(text: str = "hello") -> Send:
    return Send((TextPart(text),), VIEW)


def queued(i: int, text: str, kind: str = "follow_up") -> QueuedMessage:
    return QueuedMessage(i, {"content": [{"type": "text", "text": text}], "kind": kind})


@dataclass
class World:
    """What a driver would answer: the store's lease, queue and version, and the
    session's values (a ``Run`` ends the turn: idle, the lease let go with the last
    commit, unless ``keeps_lease``)."""

    leases: list[Lease | None] = field(default_factory=lambda: [lease()])
    holder: Holder = field(default_factory=lambda: Holder(None, False))
    queues: list[tuple[QueuedMessage, ...]] = field(default_factory=list)
    status: Status = "idle"
    version: int = 3
    stored: int = 3
    released: bool = False
    keeps_lease: bool = False
    fail_on_run: BaseException | None = None
    after_run: Status = "idle"

    def now(self) -> Now:
        phase = "done" if self.status == "finished" else "intake"
        return Now(replace(Core("s"), status=self.status), phase, self.version,
                   self.released)

    def answer(self, command: Any) -> Any:
        if isinstance(command, TakeLease):
            return self.leases.pop(0) if self.leases else None
        if isinstance(command, ReadHolder):
            return self.holder
        if isinstance(command, ReadQueue):
            return self.queues.pop(0) if self.queues else ()
        if isinstance(command, ReadVersion):
            return self.stored
        if isinstance(command, Hold):
            if command.reopen:
                self.version = self.stored
            self.released = False
            return None
        if isinstance(command, Run):
            if self.fail_on_run is not None:
                raise self.fail_on_run
            if not command.feed:
                self.status = self.after_run
                self.released = not self.keeps_lease
            return None
        if isinstance(command, LetGo):
            self.released = False
        return None


def walk(plan: Plan, world: World) -> list[Any]:
    """Every command the plan yields, answered by ``world``, in order; an exception a
    command raises is thrown into the plan (as the driver does)."""
    seen: list[Any] = []
    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            command = plan.send(answer) if failure is None else plan.throw(failure)
        except StopIteration:
            return seen
        seen.append(command)
        answer, failure = None, None
        try:
            answer = world.answer(command)
        except Exception as exc:
            failure = exc


def names(commands: list[Any]) -> list[str]:
    return [type(c).__name__ for c in commands]


def test_a_message_runs_under_the_lease_then_the_queue_is_looked_at_and_the_lease_let_go(
) -> None:
    world = World()
    first = send()
    commands = walk(turn_order(first, world.now, busy="queue"), world)
    assert commands == [TakeLease(), Hold(lease(), reopen=False), CommitNotes(), Run(first),
                        LetGo(lease()), ReadQueue()]


def test_another_workers_commit_since_is_caught_up_before_anything_runs() -> None:
    world = World(leases=[lease(version=5)], stored=5)  # this process last saw 3
    commands = walk(turn_order(send(), world.now, busy="queue"), world)
    assert commands[1] == Hold(lease(version=5), reopen=True)
    # a store that cannot say the version with the lease: one read, then the same rule
    world = World(leases=[lease(version=-1)], stored=3)
    commands = walk(turn_order(send(), world.now, busy="queue"), world)
    assert commands[1:3] == [ReadVersion(), Hold(lease(version=-1), reopen=False)]


def test_without_the_lease_a_message_is_stored_for_the_holder_and_the_lease_tried_again(
) -> None:
    held = Lease("s", "other", 4, 200.0)
    world = World(leases=[None, None], holder=Holder(held, gone=False))
    first = send()
    commands = walk(turn_order(first, world.now, busy="queue"), world)
    assert commands == [TakeLease(), ReadHolder(), StoreMessage(first), TakeLease()]


def test_a_freed_turn_after_storing_the_message_is_taken_and_the_queue_drained() -> None:
    world = World(leases=[None, lease()], holder=Holder(None, False),
                  queues=[(queued(7, "hi"),)], keeps_lease=True)
    commands = walk(turn_order(send(), world.now, busy="steer"), world)
    assert names(commands) == ["TakeLease", "ReadHolder", "StoreMessage", "TakeLease",
                               "Hold", "CommitNotes", "ReadQueue", "Run", "ReadQueue",
                               "LetGo", "ReadQueue"]
    run = commands[7]
    assert run == Run(Message((TextPart("hi"),)), consumed=7,
                      queued=({"content": [{"type": "text", "text": "hi"}],
                               "kind": "follow_up"},))


def test_busy_reject_refuses_and_stores_nothing() -> None:
    world = World(leases=[None], holder=Holder(Lease("s", "other", 4, 200.0), False))
    plan = turn_order(send(), world.now, busy="reject")
    with pytest.raises(SessionBusy, match="another worker is running its turn"):
        walk(plan, world)
    assert world.leases == []  # no second try: nothing was stored for the holder


def test_anything_but_a_message_is_refused_without_the_lease() -> None:
    world = World(leases=[None])
    with pytest.raises(SessionBusy):
        walk(turn_order(None, world.now, busy="queue"), world)


def test_a_holder_that_is_gone_is_replaced_at_once() -> None:
    held = Lease("s", "dead", 4, 200.0)
    world = World(leases=[None, lease()], holder=Holder(held, gone=True))
    commands = walk(turn_order(send(), world.now, busy="queue"), world)
    assert commands[:3] == [TakeLease(), ReadHolder(), TakeLease(replacing=held)]
    assert "StoreMessage" not in names(commands)


def test_an_interrupt_forces_the_lease_from_a_live_holder() -> None:
    world = World(leases=[None, lease()], holder=Holder(Lease("s", "other", 4, 200.0), False))
    first = Interrupt((TextPart("stop"),), VIEW, 1.0)
    commands = walk(turn_order(first, world.now, busy="interrupt"), world)
    assert commands[:3] == [TakeLease(), ReadHolder(), TakeLease(force=True)]
    assert Run(first) in commands


def test_a_turn_a_stopped_worker_left_is_finished_first_and_a_message_queued_before_it(
) -> None:
    world = World(status="running")
    first = send()
    commands = walk(turn_order(first, world.now, busy="queue"), world)
    assert commands[2:5] == [CommitNotes(), Run(first, feed=True), Run(ResumeLeft())]
    assert Run(first) not in commands  # the resumed turn's end sends what is queued


def test_a_failing_turn_still_lets_the_lease_go_and_the_failure_reaches_the_caller(
) -> None:
    world = World(fail_on_run=RuntimeError("model down"))
    plan = turn_order(send(), world.now, busy="queue")
    seen: list[Any] = []
    with pytest.raises(RuntimeError, match="model down"):
        answer: Any = None
        failure: BaseException | None = None
        while True:
            command = plan.send(answer) if failure is None else plan.throw(failure)
            seen.append(command)
            answer, failure = None, None
            try:
                answer = world.answer(command)
            except Exception as exc:
                failure = exc
    assert names(seen)[-2:] == ["Run", "LetGo"]


def test_a_decision_with_no_pending_approval_is_refused_under_the_lease_and_let_go(
) -> None:
    world = World()
    seen: list[Any] = []
    plan = turn_order(Resolve("call_1", ApprovalDecision.APPROVE), world.now, busy="queue")
    with pytest.raises(ResolutionRefused, match="no approval is pending"):
        command = next(plan)
        while True:
            seen.append(command)
            command = plan.send(world.answer(command))
    assert names(seen) == ["TakeLease", "Hold", "LetGo"]


def test_a_message_to_a_finished_session_is_refused_under_the_lease() -> None:
    world = World(status="finished")
    with pytest.raises(SessionFinished, match="has finished \\(phase 'done' is terminal\\)"):
        walk(turn_order(send(), world.now, busy="queue"), world)


def test_the_queue_drains_steering_first_each_kind_in_order() -> None:
    world = World(keeps_lease=True, queues=[(
        queued(1, "a"), queued(2, "steer me", "steering"), queued(3, "b"))])
    commands = walk(turn_order(send(), world.now, busy="queue"), world)
    drained = next(c for c in commands if isinstance(c, Run) and c.consumed)
    assert isinstance(drained.input, Message)
    texts = [p.text for p in drained.input.content if isinstance(p, TextPart)]
    assert texts[0] == "steer me" and texts.index("a") < texts.index("b")
    assert drained.consumed == 3


def test_messages_queued_for_a_session_that_finished_are_recorded_unanswered() -> None:
    world = World(keeps_lease=True, after_run="finished",
                  queues=[(queued(4, "too late"),)])
    commands = walk(turn_order(send(), world.now, busy="queue"), world)
    recorded = [c for c in commands if isinstance(c, CommitEvents)]
    assert len(recorded) == 1 and recorded[0].consumed == 4
    (event,) = recorded[0].events
    assert isinstance(event, ErrorEvent) and event.code == "session_finished"
    assert "too late" in event.message
    # let go, then one more look: a message stored after the last one is recorded too
    assert names(commands)[-2:] == ["LetGo", "ReadQueue"]


def test_a_running_turn_takes_the_stored_queue_up_to_its_last_steering_message() -> None:
    """Between two model requests the holder takes what other workers stored, in order,
    up to the last steering message (the store's queue is consumed in order); with no
    steering message it takes nothing (the drain sends the queue when the turn ends)."""
    f1, s2, f3 = queued(1, "a"), queued(2, "b", "steering"), queued(3, "c")
    assert taken_into_turn((f1, s2, f3)) == (f1, s2)
    assert taken_into_turn((s2,)) == (s2,)
    assert taken_into_turn((f1, f3)) == ()
    assert taken_into_turn(()) == ()
