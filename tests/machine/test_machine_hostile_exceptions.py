"""Host callables cannot break the machine with exceptions: ones that cannot be printed,
writes that raise them, interrupts and cancellations that propagate and leave the machine
consistent, and any exception from any position, which never escapes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.expr.describe import MESSAGE_LIMIT, describe_exception
from phaseflow.machine import EffectContext, State
from phaseflow.spec.model import CallEffect, Phase, SetEffect, Transition
from tests.support.machines import make_call, ok_call, positions_workflow, workflow


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class StrNotText(Exception):
    def __str__(self) -> Any:
        return 42


class StrHuge(Exception):
    def __str__(self) -> str:
        return "x" * 1_000_000


class StrSubclassText(Exception):
    class Text(str):
        def __format__(self, spec: str) -> str:
            raise RuntimeError("no format")

        def __getitem__(self, index: Any) -> Any:
            raise RuntimeError("no slicing")

    def __str__(self) -> str:
        return self.Text("sneaky")


class ReprRaises(Exception):
    def __str__(self) -> str:
        raise ValueError

    def __repr__(self) -> str:
        raise ValueError


class _NameRaises(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


class NameRaises(Exception, metaclass=_NameRaises):
    def __str__(self) -> str:
        raise RuntimeError


HOSTILE = [StrRaises, StrNotText, StrHuge, StrSubclassText, ReprRaises, NameRaises]


@pytest.mark.parametrize("cls", HOSTILE, ids=lambda c: c.__qualname__)
def test_describer_never_fails_and_is_bounded(cls: type[Exception]) -> None:
    text = describe_exception(cls())
    assert type(text) is str and 0 < len(text) <= MESSAGE_LIMIT


def _raiser(cls: type[BaseException]) -> Callable[..., Any]:
    def hook(ctx: EffectContext, **kw: Any) -> Any:
        raise cls()

    return hook


def _araiser(cls: type[BaseException]) -> Callable[..., Any]:
    async def hook(ctx: EffectContext, **kw: Any) -> Any:
        await asyncio.sleep(0)
        raise cls()

    return hook


class RaisingWriter:
    """A writer whose set/unset raise an exception that cannot be printed."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def set(self, key: str, value: Any) -> None:
        raise StrRaises()

    def unset(self, key: str) -> None:
        raise StrNotText()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("where", ["on_exit", "on_enter", "prepare"])
@pytest.mark.parametrize("cls", HOSTILE, ids=lambda c: c.__qualname__)
def test_an_unprintable_exception_is_an_error_record(
    cls: type[Exception], where: str, mode: str
) -> None:
    hook = _raiser(cls) if mode == "sync" else _araiser(cls)
    a, b = positions_workflow(where, "bad")
    m = workflow([a, b], registry={"bad": hook, "ok": ok_call, "make": make_call}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1) if mode == "sync" else asyncio.run(m.advance(s, turn=1))
    assert r.events and all(len(e.message) <= 600 for e in r.events)
    assert "call 'bad' raised" in r.events[0].message
    if where == "prepare":
        assert r.blocked and r.events[0].kind == "preparation_failed" and m.current == "a"
    else:
        assert r.transitioned and m.current == "b" and s.get("ok_ran") is True
        assert r.events[0].kind == "effect_error"
    assert m.trace[-len(r.events):] == r.events


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_writer_raising_unprintable_exceptions_is_recorded(mode: str) -> None:
    a = Phase("a", transitions=[Transition("b", "state.go")],
              on_exit=[SetEffect({"x": 1}), CallEffect("ok")])
    b = Phase("b", clear_on_enter=["x"], on_enter=[SetEffect({"y": [1]})])
    m = workflow([a, b], registry={"ok": ok_call}).machine()
    s = {"go": True}
    w = RaisingWriter(s)
    r = m.advance_sync(s, w, turn=1) if mode == "sync" else asyncio.run(
        m.advance(s, w, turn=1))
    assert r.transitioned and m.current == "b" and len(r.events) == 4
    assert {e.source for e in r.events} == {"on_exit[0]", "on_exit[1]", "clear_on_enter",
                                            "on_enter[0]"}
    assert all(e.message.startswith(("StrRaises", "StrNotText", "call 'ok' raised StrRaises"))
               for e in r.events)


class Interrupting(BaseException):
    """Not an Exception: a request to stop, like KeyboardInterrupt."""


@pytest.mark.parametrize("cls", [KeyboardInterrupt, SystemExit, Interrupting])
def test_a_base_exception_propagates_and_leaves_the_machine_consistent(
    cls: type[BaseException],
) -> None:
    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("stop")], transitions=[Transition("a", "state.back")])
    m = workflow([a, b], registry={"stop": _raiser(cls)}).machine()
    with pytest.raises(cls):
        m.advance_sync(State({"go": True}), turn=1)
    assert m.current == "b" and [h.to_phase for h in m.history] == ["b"]
    assert m.visits["b"] == 1
    # the machine is not left busy
    assert m.advance_sync(State({"back": True}), turn=2).transitioned


def test_cancelling_an_awaiting_callable_propagates() -> None:
    started = asyncio.Event()

    async def slow(ctx: EffectContext) -> None:
        started.set()
        await asyncio.sleep(10)

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("slow")])
    m = workflow([a, b], registry={"slow": slow}).machine()

    async def main() -> None:
        task = asyncio.create_task(m.advance(State({"go": True}), turn=1))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert m.current == "b" and [h.to_phase for h in m.history] == ["b"]


exception_classes = st.builds(
    lambda base, str_kind: type(
        "Hostile", (base,), {"__str__": str_kind}
    ),
    st.sampled_from([Exception, ValueError, RuntimeError, LookupError, OSError,
                     ArithmeticError, TypeError]),
    st.sampled_from([
        lambda self: (_ for _ in ()).throw(RuntimeError("raise")),
        lambda self: 7,
        lambda self: None,
        lambda self: "y" * 100_000,
        lambda self: "",
        lambda self: str(self.missing),  # AttributeError inside __str__
    ]),
)


@settings(max_examples=60, deadline=None)
@given(cls=exception_classes, where=st.sampled_from(["on_exit", "on_enter", "prepare"]),
       mode=st.sampled_from(["sync", "async"]), turns=st.integers(1, 4))
def test_any_exception_from_any_position_never_escapes(
    cls: type[Exception], where: str, mode: str, turns: int
) -> None:
    a, b = positions_workflow(where, "bad")
    b = Phase(b.name, on_enter=b.on_enter, requires=b.requires, prepare=b.prepare,
              transitions=[Transition("a", "state.back")])
    hook = _raiser(cls) if mode == "sync" else _araiser(cls)
    m = workflow([a, b], registry={"bad": hook, "ok": ok_call, "make": make_call}).machine()
    s = State({"go": True, "back": True})
    for turn in range(1, turns + 1):
        before = m.current
        r = m.advance_sync(s, turn=turn) if mode == "sync" else asyncio.run(
            m.advance(s, turn=turn))
        # phase, history and the result agree
        assert r.phase == m.current
        if r.transitioned:
            assert r.from_phase == before and m.history[-1].to_phase == m.current
        else:
            assert m.current == before
        assert all(type(e.message) is str and len(e.message) <= 600 for e in r.events)
    entered = [h.to_phase for h in m.history]
    assert all(x != y for x, y in zip(["a", *entered], entered, strict=False))


def test_a_mapping_whose_items_raise_is_an_error_record() -> None:
    class Broken(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise StrRaises()

        def __iter__(self) -> Any:
            return iter(["k"])

        def __len__(self) -> int:
            return 1

    def hook(ctx: EffectContext) -> dict[str, Any]:
        return {"inner": Broken(), "fine": 1}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert s["fine"] == 1 and "inner" not in s
    assert "cannot be read" in r.events[0].message
