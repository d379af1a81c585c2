"""Which due timers a worker fires, decided without I/O (:mod:`phaseflow.session.firing`):
a page of due sessions, as the store reads it, and the plan made of it - the sessions
fired, at most as many as the free slots, in the index's order; those passed over and
why; the damaged ones named; where the next page starts - and when the next page is
read (once half of the slots are free)."""

from __future__ import annotations

import pytest

from phaseflow.session.firing import (
    FINISHED,
    IN_FLIGHT,
    LEASED,
    OTHER_WORKFLOW,
    WAITING,
    holders,
    plan_page,
    to_read,
)
from phaseflow.stores.base import DueSession, Lease, SessionRecord
from phaseflow.turn.continuation import Continuation
from phaseflow.turn.execution import TurnExecution

NOW = 1000.0


def due(sid: str, at: float = 10.0, *, status: str = "idle", workflow: str = "waiter",
        lease: Lease | None = None) -> DueSession:
    record = SessionRecord(sid, workflow, "hash", 3, status, "wait", 1, TurnExecution(),
                           Continuation(), {"phase": "wait"}, {},
                           {"status": status, "turn": 1})
    return DueSession(sid, at, record, lease)


def damaged(sid: str, at: float = 10.0) -> DueSession:
    return DueSession(sid, at, None, problem=f"session {sid!r}: the stored snapshot is "
                      "malformed")


def fired(plan: object) -> list[str]:
    return [d.session_id for d in plan.fire]  # type: ignore[attr-defined]


def test_a_page_is_fired_in_order_up_to_the_free_slots() -> None:
    page = tuple(due(f"s{k}", 10.0 + k) for k in range(5))
    plan = plan_page(page, asked=5, slots=3, now=NOW)
    assert fired(plan) == ["s0", "s1", "s2"]
    # the slots ran out inside the page: the next page starts after the last one fired
    assert (plan.after, plan.more) == ((12.0, "s2"), True)
    assert plan.skipped == () and plan.damaged == ()


def test_a_short_page_ends_the_sweep_and_a_full_one_does_not() -> None:
    page = (due("a", 1.0), due("b", 2.0))
    short = plan_page(page, asked=3, slots=3, now=NOW)
    assert fired(short) == ["a", "b"] and (short.after, short.more) == (None, False)
    full = plan_page(page, asked=2, slots=2, now=NOW)
    assert fired(full) == ["a", "b"] and (full.after, full.more) == ((2.0, "b"), True)
    empty = plan_page((), asked=64, slots=64, now=NOW)
    assert (empty.fire, empty.after, empty.more) == ((), None, False)


def test_sessions_that_cannot_fire_now_are_passed_over_with_the_reason() -> None:
    other = Lease("held", "worker-b", 4, NOW + 30)
    expired = Lease("expired", "worker-b", 4, NOW - 1)
    page = (due("running-here"), due("held", lease=other), due("expired", lease=expired),
            due("asking", status="awaiting_approval"), due("done", status="finished"),
            due("foreign", workflow="other"), due("left", status="running"), due("free"))
    plan = plan_page(page, asked=8, slots=8, now=NOW, in_flight={"running-here"},
                     workflows={"waiter"})
    assert fired(plan) == ["expired", "left", "free"]
    assert plan.skipped == (("running-here", IN_FLIGHT), ("held", LEASED),
                            ("asking", WAITING), ("done", FINISHED),
                            ("foreign", OTHER_WORKFLOW))
    # passed over, they still move the page on: the next page starts after them
    assert (plan.after, plan.more) == ((10.0, "free"), True)


def test_a_lease_of_a_stopped_holder_does_not_keep_its_session_from_firing() -> None:
    held = Lease("s", "host:4242:ab:tok", 7, NOW + 30)
    page = (due("s", lease=held),)
    assert holders(page, NOW) == {"host:4242:ab:tok"}
    assert plan_page(page, asked=1, slots=1, now=NOW).skipped == (("s", LEASED),)
    taken = plan_page(page, asked=1, slots=1, now=NOW, gone={"host:4242:ab:tok"})
    assert fired(taken) == ["s"]
    # an expired lease is nobody's: no holder to ask about
    assert holders((due("s", lease=Lease("s", "x", 1, NOW - 5)),), NOW) == frozenset()


def test_a_damaged_session_is_named_and_the_others_of_its_page_fire() -> None:
    page = (due("a", 1.0), damaged("broken", 2.0), due("c", 3.0))
    plan = plan_page(page, asked=3, slots=3, now=NOW)
    assert fired(plan) == ["a", "c"]
    assert plan.damaged == (("broken", "session 'broken': the stored snapshot is "
                                       "malformed"),)


@pytest.mark.parametrize(("running", "concurrency", "read"), [
    (0, 64, 64), (31, 64, 33), (32, 64, 32), (33, 64, 0), (64, 64, 0),
    (0, 1, 1), (1, 1, 0), (1, 3, 2), (2, 3, 0),
])
def test_the_next_page_is_read_once_half_of_the_slots_are_free(
        running: int, concurrency: int, read: int) -> None:
    assert to_read(running, concurrency) == read
