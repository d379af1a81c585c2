"""Host callables that call back into the machine: a re-entrant move is refused and the
outer one completes, a second task on a busy machine is refused, reading is allowed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phaseflow.errors import PhaseflowError
from phaseflow.machine import EffectContext, PhaseMachine, ReentrantCallError, State
from phaseflow.spec.model import CallEffect, Phase, Transition
from tests.support.machines import make_call, ok_call, positions_workflow, workflow

REENTRANT = {
    "goto_sync": lambda m, s: m.goto_sync("c", s, turn=9),
    "advance_sync": lambda m, s: m.advance_sync(s, turn=9),
    "transition_sync": lambda m, s: m.transition_sync("c", s, turn=9, trigger=None),
    "take_request_sync": lambda m, s: m.take_request_sync("c", s, turn=9),
    "prepare_target_sync": lambda m, s: m.prepare_target_sync("c", s),
    "begin_boundary": lambda m, s: m.begin_boundary(9),
    "goto": lambda m, s: asyncio.run(m.goto("c", s, turn=9)),
    "advance": lambda m, s: asyncio.run(m.advance(s, turn=9)),
    "transition": lambda m, s: asyncio.run(m.transition("c", s, turn=9, trigger=None)),
    "take_request": lambda m, s: asyncio.run(m.take_request("c", s, turn=9)),
    "prepare_target": lambda m, s: asyncio.run(m.prepare_target("c", s)),
}


@pytest.mark.parametrize("where", ["on_exit", "on_enter", "prepare"])
@pytest.mark.parametrize("call", sorted(REENTRANT))
def test_a_reentrant_call_is_refused_and_the_outer_move_completes(call: str, where: str) -> None:
    box: dict[str, PhaseMachine] = {}
    caught: list[BaseException] = []

    def back(ctx: EffectContext) -> None:
        try:
            REENTRANT[call](box["m"], ctx.state)
        except BaseException as exc:
            caught.append(exc)
            raise

    a, b = positions_workflow(where, "back")
    c = Phase("c")
    b = Phase(b.name, on_enter=b.on_enter, requires=b.requires, prepare=b.prepare,
              transitions=[Transition("c", "state.go", trigger="model")])
    m = workflow([a, b, c], registry={"back": back, "ok": ok_call, "make": make_call}).machine()
    box["m"] = m
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert len(caught) == 1 and isinstance(caught[0], ReentrantCallError)
    assert isinstance(caught[0], PhaseflowError) and call in str(caught[0])
    assert r.events[0].message.startswith("call 'back' raised ReentrantCallError")
    assert m.turn == 1 and m.turns_in_phase in (0, 1)
    if where == "prepare":
        # the first failing preparation stops the others: the target stays blocked
        assert r.blocked and m.current == "a" and m.history == ()
        assert r.events[0].kind == "preparation_failed"
    else:
        assert r.transitioned and r.phase == m.current == "b"
        assert [h.to_phase for h in m.history] == ["b"]
    # the machine is not left busy: a host's own move works
    assert m.goto_sync("c", s, turn=2) is not None and m.current == "c"


def test_a_second_task_on_a_busy_machine_is_refused() -> None:
    gate = asyncio.Event()

    async def wait(ctx: EffectContext) -> None:
        await gate.wait()

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("wait")])
    m = workflow([a, b], registry={"wait": wait}).machine()
    s = State({"go": True})

    async def main() -> None:
        first = asyncio.create_task(m.advance(s, turn=1))
        await asyncio.sleep(0)
        with pytest.raises(ReentrantCallError):
            await m.advance(s, turn=2)
        gate.set()
        assert (await first).transitioned

    asyncio.run(main())
    assert [h.to_phase for h in m.history] == ["b"] and m.turn == 1


def test_reading_the_machine_from_a_callable_is_allowed() -> None:
    seen: list[Any] = []

    def look(ctx: EffectContext) -> None:
        m = box["m"]
        seen.append((m.current, m.evaluate(ctx.state), m.request("a", ctx.state)))

    box: dict[str, PhaseMachine] = {}
    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("look")])
    m = box["m"] = workflow([a, b], registry={"look": look}).machine()
    assert m.advance_sync(State({"go": True}), turn=1).events == ()
    assert seen == [("b", None, False)]
