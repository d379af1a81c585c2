"""Effects: set/unset/call through the writer, sync and async callables, failures."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from phaseflow.machine import MODEL_REQUEST, TRACE_LIMIT, EffectContext, ErrorRecord, State
from phaseflow.spec.model import CallEffect, Phase, SetEffect, Transition
from tests.support.machines import FakeClock, workflow


def _wf(on_enter: list[Any], registry: Mapping[str, Any]) -> Any:
    return workflow([Phase("a", transitions=[Transition("b", "state.go")]),
                     Phase("b", on_enter=on_enter)], registry=registry, name="fx")


def test_sync_call_gets_context_and_args_and_its_mapping_is_merged() -> None:
    seen: list[Any] = []

    def hook(ctx: EffectContext, **kw: Any) -> dict[str, Any]:
        seen.append((ctx.phase, ctx.turn, ctx.workflow, dict(ctx.state), kw))
        return {"out": kw["n"] + 1}

    m = _wf([CallEffect("hook", {"n": 1})], {"hook": hook}).machine()
    s = State({"go": True})
    r = asyncio.run(m.advance(s, turn=3))
    assert r.transitioned and r.events == ()
    assert seen == [("b", 3, "fx", {"go": True}, {"n": 1})]
    assert s["out"] == 2
    assert [c.key for c in s.changes] == ["out"]


def test_context_state_is_read_only() -> None:
    def hook(ctx: EffectContext) -> None:
        ctx.state["x"] = 1  # type: ignore[index]

    def hook2(ctx: EffectContext) -> None:
        ctx.state.set("x", 1)  # type: ignore[attr-defined]

    m = _wf([CallEffect("hook"), CallEffect("hook2")], {"hook": hook, "hook2": hook2}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert "x" not in s
    assert [e.kind for e in r.events] == ["effect_error", "effect_error"]
    assert all(isinstance(e, ErrorRecord) for e in r.events) and m.trace == r.events
    assert r.events[0].format().startswith("[effect_error] b on_enter[0]: call 'hook' raised")


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_async_call_is_awaited(mode: str) -> None:
    async def hook(ctx: EffectContext, **kw: Any) -> dict[str, Any]:
        if mode == "async":
            await asyncio.sleep(0)  # really suspends
        return {"done": True}

    m = _wf([CallEffect("hook")], {"hook": hook}).machine()
    s = State({"go": True})
    r = asyncio.run(m.advance(s, turn=1))
    assert r.transitioned and r.events == () and s["done"] is True


def test_async_call_that_does_not_suspend_works_in_advance_sync() -> None:
    async def hook(ctx: EffectContext) -> dict[str, Any]:
        return {"done": 1}

    m = _wf([CallEffect("hook")], {"hook": hook}).machine()
    s = State({"go": True})
    assert m.advance_sync(s, turn=1).events == () and s["done"] == 1


def test_async_call_that_suspends_in_advance_sync_is_an_event() -> None:
    async def hook(ctx: EffectContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"done": 1}

    m = _wf([CallEffect("hook"), SetEffect({"after": 1})], {"hook": hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert r.transitioned and "done" not in s and s["after"] == 1
    assert "suspended" in r.events[0].message


def test_non_mapping_return_is_ignored() -> None:
    m = _wf([CallEffect("hook")], {"hook": lambda ctx: [1, 2]}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert r.events == () and s.changes == ()


def test_failing_call_is_an_event_and_the_rest_still_runs() -> None:
    def boom(ctx: EffectContext) -> None:
        raise RuntimeError("backend down")

    m = _wf([CallEffect("boom"), SetEffect({"after": 1}), CallEffect("missing")],
            {"boom": boom}).machine(clock=FakeClock())
    s = State({"go": True})
    r = asyncio.run(m.advance(s, turn=2))
    assert r.transitioned and m.current == "b" and s["after"] == 1
    assert [(e.kind, e.phase, e.turn, e.source) for e in r.events] == [
        ("effect_error", "b", 2, "on_enter[0]"), ("effect_error", "b", 2, "on_enter[2]")]
    assert "RuntimeError: backend down" in r.events[0].message
    assert "no callable registered for call 'missing'" in r.events[1].message
    assert r.transition is not None and r.transition.events == r.events
    assert not r.transition.ok
    assert m.trace == r.events
    assert "[effect_error] b on_enter[0]" in r.events[0].format()


def test_failing_async_call_is_an_event() -> None:
    async def boom(ctx: EffectContext) -> None:
        await asyncio.sleep(0)
        raise ValueError("nope")

    m = _wf([CallEffect("boom"), SetEffect({"after": 1})], {"boom": boom}).machine()
    s = State({"go": True})
    r = asyncio.run(m.advance(s, turn=1))
    assert r.transitioned and s["after"] == 1 and "ValueError: nope" in r.events[0].message


def test_failing_writer_is_an_event() -> None:
    class Refusing:
        def set(self, key: str, value: Any) -> None:
            raise PermissionError(key)

        def unset(self, key: str) -> None:
            raise PermissionError(key)

    wf = workflow([Phase("a", transitions=[Transition("b")]),
                   Phase("b", clear_on_enter=["k"], on_enter=[SetEffect({"x": 1})])])
    m = wf.machine()
    r = m.advance_sync({}, Refusing(), turn=1)
    assert r.transitioned
    assert [e.source for e in r.events] == ["clear_on_enter", "on_enter[0]"]


def test_trace_is_bounded() -> None:
    def boom(ctx: EffectContext) -> None:
        raise RuntimeError

    wf = workflow([Phase("a", on_enter=[CallEffect("boom")], transitions=[Transition("a")])],
                  registry={"boom": boom})
    m = wf.machine()
    for t in range(TRACE_LIMIT + 20):
        m.advance_sync({}, turn=t + 1)
    assert len(m.trace) == TRACE_LIMIT
    assert m.trace[-1].turn == TRACE_LIMIT + 20


def test_call_args_are_not_shared_with_the_workflow() -> None:
    def grab(ctx: EffectContext, items: list[int]) -> None:
        items.append(9)

    wf = _wf([CallEffect("grab", {"items": [1]})], {"grab": grab})
    wf.machine().advance_sync(State({"go": 1}), turn=1)
    seen: list[Any] = []
    wf2 = _wf([CallEffect("grab", {"items": [1]})],
              {"grab": lambda ctx, items: seen.append(list(items))})
    wf2.machine().advance_sync(State({"go": 1}), turn=1)
    assert seen == [[1]]
    assert list(wf.phases["b"].on_enter[0].args["items"]) == [1]  # type: ignore[union-attr]


def test_callable_objects_and_partials() -> None:
    import functools

    class Hook:
        async def __call__(self, ctx: EffectContext, v: int) -> dict[str, Any]:
            await asyncio.sleep(0)
            return {"obj": v}

    async def base(ctx: EffectContext, v: int, w: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"part": v + w}

    m = _wf([CallEffect("obj", {"v": 1}), CallEffect("part", {"v": 2})],
            {"obj": Hook(), "part": functools.partial(base, w=1)}).machine()
    s = State({"go": 1})
    r = asyncio.run(m.advance(s, turn=1))
    assert r.events == () and s["obj"] == 1 and s["part"] == 3


def test_transcript_reaches_the_callable() -> None:
    got: list[Any] = []
    m = _wf([CallEffect("h")], {"h": lambda ctx: got.append(ctx.transcript)}).machine()
    m.transition_sync("b", State(), turn=1, trigger=MODEL_REQUEST, transcript=["hello"])
    assert got == [["hello"]]
