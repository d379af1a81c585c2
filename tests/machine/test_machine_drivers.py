"""The two drivers of a move (phaseflow.machine.drivers) and what the machine's coroutines
and their ``*_sync`` twins make of the same callables.

Every move is written once, as steps that yield each host callable to run; the sync
driver calls it, the async driver calls and awaits it. These tests hold the drivers to
that contract, then run each move of the machine in both flavours with callables that
return awaitables.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import pytest

from phaseflow.machine import BoundaryResult, EffectContext, PhaseMachine, State
from phaseflow.machine.drivers import Call, Suspended, run_async, run_sync
from phaseflow.spec.model import CallEffect, Phase, Preparation, SetEffect, Transition
from tests.support.machines import FakeClock, workflow

Driver = Callable[[Any], Any]


def _sync(plan: Any) -> Any:
    return run_sync(plan)


def _async(plan: Any) -> Any:
    return asyncio.run(run_async(plan))


DRIVERS = pytest.mark.parametrize("drive", [_sync, _async], ids=["sync", "async"])


@DRIVERS
def test_a_plan_that_is_already_its_answer_is_returned(drive: Driver) -> None:
    assert drive(7) == 7 and drive(None) is None


@DRIVERS
def test_steps_are_sent_each_result_and_give_their_last_yield(drive: Driver) -> None:
    seen: list[Any] = []

    def steps() -> Generator[Any, Any, None]:
        seen.append((yield Call(lambda ctx, **kw: (ctx, kw), "c1", {"a": 1})))
        seen.append((yield Call(lambda ctx: ctx * 2, 21, {})))
        yield "answer"
        seen.append("finished")  # the driver lets the steps end after their answer

    assert drive(steps()) == "answer"
    assert seen == [("c1", {"a": 1}), 42, "finished"]


@DRIVERS
def test_a_part_gives_its_return_value(drive: Driver) -> None:
    def part() -> Generator[Call, Any, int]:
        got: int = yield Call(lambda ctx: ctx + 1, 1, {})
        return got * 10

    assert drive(part()) == 20


@DRIVERS
def test_an_exception_is_thrown_in_at_its_yield(drive: Driver) -> None:
    def boom(ctx: object) -> None:
        raise LookupError("no")

    def steps() -> Generator[Any, Any, None]:
        try:
            yield Call(boom, None, {})
        except LookupError as exc:
            yield f"caught {exc}"

    assert drive(steps()) == "caught no"


@DRIVERS
def test_a_base_exception_runs_the_steps_finally_and_propagates(drive: Driver) -> None:
    cleaned: list[str] = []

    def stop(ctx: object) -> None:
        raise KeyboardInterrupt

    def steps() -> Generator[Any, Any, None]:
        try:
            yield Call(stop, None, {})
            yield "not reached"
        except Exception:  # pragma: no cover - a BaseException is not caught here
            yield "wrong"
        finally:
            cleaned.append("finally")

    with pytest.raises(KeyboardInterrupt):
        drive(steps())
    assert cleaned == ["finally"]


async def _suspends(value: Any) -> Any:
    await asyncio.sleep(0)
    return value


async def _returns(value: Any) -> Any:
    return value


def test_the_sync_driver_runs_an_awaitable_that_never_suspends() -> None:
    def steps() -> Generator[Any, Any, None]:
        yield (yield Call(lambda ctx: _returns(ctx), "done", {}))

    assert run_sync(steps()) == "done"


def test_the_sync_driver_throws_suspended_in_for_one_that_suspends() -> None:
    def steps() -> Generator[Any, Any, None]:
        try:
            yield Call(lambda ctx: _suspends(ctx), "done", {})
        except Suspended:
            yield "suspended"

    assert run_sync(steps()) == "suspended"


def test_the_async_driver_awaits_an_awaitable_that_suspends() -> None:
    def steps() -> Generator[Any, Any, None]:
        yield (yield Call(lambda ctx: _suspends(ctx), "done", {}))

    assert asyncio.run(run_async(steps())) == "done"


# -- the machine's moves, both flavours, with callables that return awaitables -------------

def _machine(fn: Callable[..., Any]) -> PhaseMachine:
    """a -> b on ``state.go`` (auto) or by the model's request; b prepares ``ready`` and
    runs ``fn`` on exit of a and on entering b."""
    a = Phase("a", on_exit=[CallEffect("fn", {"where": "exit"})],
              transitions=[Transition("b", "state.go"), Transition("b", None, trigger="model")])
    b = Phase("b", requires=["ready"], on_enter=[CallEffect("fn", {"where": "enter"})],
              prepare=[Preparation("get_ready", CallEffect("fn", {"where": "prepare"}),
                                   ("ready",))],
              transitions=[Transition("a", "state.back")])
    return workflow([a, b], registry={"fn": fn}).machine(clock=FakeClock())


def _lazy(ctx: EffectContext, where: str) -> Any:
    """Not an ``async def``: returns an awaitable that suspends once."""
    return _suspends({where: True, "ready": True} if where == "prepare" else {where: True})


MOVES = ["advance", "take_request", "transition", "goto", "prepare_target"]


def _move(m: PhaseMachine, name: str, s: State, flavour: str) -> Any:
    if name == "advance":
        call: Any = (m.advance_sync(s, turn=1) if flavour == "sync"
                     else m.advance(s, turn=1))
    elif name == "take_request":
        call = (m.take_request_sync("b", s, turn=1) if flavour == "sync"
                else m.take_request("b", s, turn=1))
    elif name == "transition":
        from phaseflow.machine import MODEL_REQUEST
        call = (m.transition_sync("b", s, turn=1, trigger=MODEL_REQUEST) if flavour == "sync"
                else m.transition("b", s, turn=1, trigger=MODEL_REQUEST))
    elif name == "goto":
        call = m.goto_sync("b", s, turn=1) if flavour == "sync" else m.goto("b", s, turn=1)
    else:
        call = (m.prepare_target_sync("b", s) if flavour == "sync"
                else m.prepare_target("b", s))
    return asyncio.run(call) if flavour == "async" else call


@pytest.mark.parametrize("name", MOVES)
def test_every_coroutine_awaits_what_a_plain_callable_returns(name: str) -> None:
    m = _machine(_lazy)
    s = State({"go": True})
    _move(m, name, s, "async")
    assert m.trace == ()
    expected = ({"prepare"} if name == "prepare_target"
                else {"exit", "enter"} | ({"prepare"} if name in ("advance", "take_request")
                                          else set()))
    assert {k for k in ("exit", "enter", "prepare") if s.get(k)} == expected


@pytest.mark.parametrize("name", MOVES)
def test_every_sync_twin_reports_what_suspends_and_moves_alike(name: str) -> None:
    m = _machine(_lazy)
    s = State({"go": True, "ready": True})  # nothing to prepare in a move that moves
    if name == "prepare_target":
        s = State({"go": True})
    _move(m, name, s, "sync")
    assert all("is async and suspended outside an event loop" in e.message for e in m.trace)
    assert m.trace and not any(s.get(k) for k in ("exit", "enter", "prepare"))
    assert m.current == ("a" if name == "prepare_target" else "b")


@pytest.mark.parametrize("name", MOVES)
def test_both_flavours_agree_when_every_callable_is_plain(name: str) -> None:
    def fn(ctx: EffectContext, where: str) -> dict[str, Any]:
        return {where: ctx.turn, "ready": True} if where == "prepare" else {where: ctx.turn}

    outcomes = []
    for flavour in ("sync", "async"):
        m = _machine(fn)
        s = State({"go": True})
        result = _move(m, name, s, flavour)
        outcomes.append((dict(s), m.current, m.history, m.trace, m.visits,
                         result if isinstance(result, bool) or result is None
                         else (getattr(result, "events", None),)))
    assert outcomes[0] == outcomes[1]


def test_a_boundary_that_stays_answers_without_steps() -> None:
    from phaseflow.machine.plan import plan_boundary

    m = workflow([Phase("a", on_exit=[SetEffect({"x": 1})],
                        transitions=[Transition("b", "state.go")]), Phase("b")]).machine()
    answer = plan_boundary(m, State({}), None, 1, True, "advance")
    assert isinstance(answer, BoundaryResult) and answer.stayed
