"""Host callables cannot change the state behind the writer's back: ``ctx.state`` is
read-only all the way down, a view handed back is stored as a plain copy, and guards and
templates cannot change it either."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from phaseflow.machine import EffectContext, State
from phaseflow.spec.model import CallEffect, Phase, Transition
from tests.support.machines import workflow


def _mutators(ctx: EffectContext) -> None:
    order = ctx.state["order"]
    refused: list[Callable[[], Any]] = [
        lambda: order["items"].append(9),  # type: ignore[attr-defined]
        lambda: order["items"].__setitem__(0, 9),
        lambda: order.__setitem__("x", 1),
        lambda: order.update({"x": 1}),  # type: ignore[attr-defined]
        lambda: order["meta"].clear(),  # type: ignore[attr-defined]
        lambda: order["items"].pop(),  # type: ignore[attr-defined]
        lambda: order["items"][1].append(1),  # a list inside the list
        lambda: order["items"][0:2][1].append(1),  # through a slice
        lambda: next(iter(ctx.state.values()))["items"].append(1),
        lambda: next(v for _, v in ctx.state.items())["meta"].__setitem__("k", 2),
    ]
    for attempt in refused:
        with pytest.raises((TypeError, AttributeError)):
            attempt()
    # a copy is the callable's own to change
    order["items"].copy().append(1)  # type: ignore[attr-defined]
    ctx.state.copy()["order"]["items"].append(1)  # type: ignore[attr-defined]


def test_ctx_state_is_read_only_all_the_way_down() -> None:
    seen: list[Any] = []

    def look(ctx: EffectContext) -> None:
        order = ctx.state["order"]
        seen.append((order == {"items": [1, [2]], "meta": {"k": 1}}, len(order["items"]),
                     order["items"][1] == [2], [2] in order["items"],
                     order.get("meta") == {"k": 1}, order.get("nope", 5), "meta" in order,
                     json.dumps(order.copy())))

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("mutate"), CallEffect("look")])
    m = workflow([a, b], registry={"mutate": _mutators, "look": look}).machine()
    s = State({"go": True, "order": {"items": [1, [2]], "meta": {"k": 1}}})
    r = m.advance_sync(s, turn=1)
    assert r.events == ()
    assert s["order"] == {"items": [1, [2]], "meta": {"k": 1}}
    assert [c.key for c in s.changes] == []
    assert seen == [(True, 2, True, True, True, 5, True,
                     '{"items": [1, [2]], "meta": {"k": 1}}')]


def test_a_view_handed_back_is_stored_as_a_plain_copy() -> None:
    def echo(ctx: EffectContext) -> dict[str, Any]:
        return {"copy": ctx.state["order"]}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("echo")])
    m = workflow([a, b], registry={"echo": echo}).machine()
    s = State({"go": True, "order": {"items": [1]}})
    assert m.advance_sync(s, turn=1).events == ()
    assert type(s["copy"]) is dict and type(s["copy"]["items"]) is list
    assert s["copy"] == s["order"] and s["copy"]["items"] is not s["order"]["items"]


def test_guards_and_templates_cannot_change_the_state() -> None:
    import phaseflow

    wf = phaseflow.load_workflow_text("""
phaseflow: 1
name: ro
initial: a
state:
  order: {type: object}
phases:
  a:
    goal: g
    instructions: "{{ state.order.items.append(1) }}{{ state.order.update({'x': 1}) }}"
    transitions: [{to: b, when: "len(state.order['items']) > 5"}]
  b: {goal: h, terminal: true}
""")
    m = wf.machine()
    s = State({"order": {"items": [1]}})
    m.advance_sync(s, turn=1)
    m.render_instructions(s)
    assert s["order"] == {"items": [1]} and m.current == "a"
