"""Host callables cannot break the machine: exceptions that cannot be printed, writes
behind the writer's back, values that are not JSON, calls back into the machine."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.expr.describe import MESSAGE_LIMIT, describe_exception
from phaseflow.machine import EffectContext, PhaseMachine, ReentrantCallError, State
from phaseflow.spec.model import CallEffect, Phase, Preparation, SetEffect, Transition
from tests.support.machines import workflow

# --- exceptions that cannot be printed ---------------------------------------------------


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


def _positions_workflow(where: str, hook: str, also: str = "ok") -> Any:
    """``a -> b`` with ``hook`` in ``where`` (on_exit of a, on_enter of b, or a
    preparation of b), followed by a harmless ``also`` call."""
    effects = [CallEffect(hook), CallEffect(also)]
    a = Phase("a", transitions=[Transition("b", "state.go")],
              on_exit=effects if where == "on_exit" else [])
    b = Phase("b", on_enter=effects if where == "on_enter" else [],
              requires=["made"] if where == "prepare" else [],
              prepare=[Preparation("p", CallEffect(hook), ("made",)),
                       Preparation("q", CallEffect("make"), ("made",))]
              if where == "prepare" else [])
    return a, b


def _ok(ctx: EffectContext) -> dict[str, Any]:
    return {"ok_ran": True}


def _make(ctx: EffectContext) -> dict[str, Any]:
    return {"made": 1}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("where", ["on_exit", "on_enter", "prepare"])
@pytest.mark.parametrize("cls", HOSTILE, ids=lambda c: c.__qualname__)
def test_an_unprintable_exception_is_an_error_record(
    cls: type[Exception], where: str, mode: str
) -> None:
    hook = _raiser(cls) if mode == "sync" else _araiser(cls)
    a, b = _positions_workflow(where, "bad")
    m = workflow([a, b], registry={"bad": hook, "ok": _ok, "make": _make}).machine()
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
    m = workflow([a, b], registry={"ok": _ok}).machine()
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
    a, b = _positions_workflow(where, "bad")
    b = Phase(b.name, on_enter=b.on_enter, requires=b.requires, prepare=b.prepare,
              transitions=[Transition("a", "state.back")])
    hook = _raiser(cls) if mode == "sync" else _araiser(cls)
    m = workflow([a, b], registry={"bad": hook, "ok": _ok, "make": _make}).machine()
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


# --- ctx.state is deeply read-only -------------------------------------------------------


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


# --- what a callable returns must be JSON ------------------------------------------------


class Obj:
    pass


NOT_JSON: list[Any] = [
    {1, 2}, frozenset({1}), b"bytes", bytearray(b"x"), math.nan, math.inf, -math.inf, Obj(),
    complex(1, 2), {"k": {1}}, {1: "int key"}, {(1, 2): "tuple key"}, [1, [math.nan]],
    {"deep": [[[[{"x": object()}]]]]}, 10**5000, Obj,
]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", [*NOT_JSON, _nested(150)],
                         ids=lambda v: type(v).__name__)
def test_a_value_that_is_not_json_is_refused_and_the_other_keys_are_kept(bad: Any) -> None:
    def hook(ctx: EffectContext) -> dict[Any, Any]:
        return {"before": 1, "bad": bad, "after": (1, 2)}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert r.transitioned and "bad" not in s
    assert s["before"] == 1 and s["after"] == [1, 2]  # a tuple is stored as a list
    assert len(r.events) == 1 and r.events[0].kind == "effect_error"
    assert "'bad'" in r.events[0].message and "not JSON" in r.events[0].message
    json.dumps(s.to_dict(), allow_nan=False)


def test_a_non_string_key_is_refused() -> None:
    def hook(ctx: EffectContext) -> dict[Any, Any]:
        return {1: "one", "two": 2}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1)
    assert s["two"] == 2 and 1 not in s.to_dict()
    assert [e.kind for e in r.events] == ["effect_error"]
    assert "key of type int" in r.events[0].message


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


json_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                        st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(json_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=8)
bad_leaves = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, b"x", 1j]),
                       st.sets(st.integers(), max_size=2), st.builds(Obj))
maybe_bad = st.recursive(st.one_of(json_leaves, bad_leaves), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=3)),
    max_leaves=8)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    if isinstance(value, dict):
        return all(type(k) is str and _is_json(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    return True


@settings(max_examples=80, deadline=None)
@given(returned=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), maybe_bad, max_size=4),
       mode=st.sampled_from(["sync", "async"]))
def test_the_state_stays_json_and_every_refused_key_is_reported(
    returned: dict[str, Any], mode: str
) -> None:
    async def ahook(ctx: EffectContext) -> dict[str, Any]:
        return returned

    def hook(ctx: EffectContext) -> dict[str, Any]:
        return returned

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": ahook if mode == "async" else hook}).machine()
    s = State({"go": True})
    r = m.advance_sync(s, turn=1) if mode == "sync" else asyncio.run(m.advance(s, turn=1))
    json.dumps(s.to_dict(), allow_nan=False)
    refused = {k for k, v in returned.items() if not _is_json(v)}
    assert {k for k in returned if k in s} == set(returned) - refused
    assert len(r.events) == len(refused)
    for key in refused:
        assert any(f"'{key}'" in e.message for e in r.events)


@settings(max_examples=50, deadline=None)
@given(value=json_values)
def test_json_values_are_kept_with_tuples_as_lists(value: Any) -> None:
    def hook(ctx: EffectContext) -> dict[str, Any]:
        return {"v": value}

    a = Phase("a", transitions=[Transition("b", "state.go")])
    b = Phase("b", on_enter=[CallEffect("hook")])
    m = workflow([a, b], registry={"hook": hook}).machine()
    s = State({"go": True})
    assert m.advance_sync(s, turn=1).events == ()
    assert json.loads(json.dumps(s["v"])) == json.loads(json.dumps(value))


@pytest.mark.parametrize("bad", NOT_JSON[:12], ids=lambda v: type(v).__name__)
def test_a_set_effect_built_in_code_must_be_json(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"not JSON|must be a string"):
        SetEffect({"k": bad} if not isinstance(bad, dict) else bad)


def test_a_set_effect_normalises_tuples() -> None:
    assert SetEffect({"k": (1, (2,))}).values == {"k": [1, [2]]}


def test_a_yaml_set_of_nan_is_pf103() -> None:
    import phaseflow

    with pytest.raises(phaseflow.WorkflowError) as caught:
        phaseflow.load_workflow_text("""
phaseflow: 1
name: nan
initial: a
phases:
  a:
    goal: g
    on_enter:
      - set: {x: .nan}
    transitions: [{to: b}]
  b: {goal: h, terminal: true}
""")
    (d,) = caught.value.diagnostics
    assert d.code == "PF103" and "not JSON" in d.message and d.line == 9


# --- calls back into the machine ----------------------------------------------------------

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

    a, b = _positions_workflow(where, "back")
    c = Phase("c")
    b = Phase(b.name, on_enter=b.on_enter, requires=b.requires, prepare=b.prepare,
              transitions=[Transition("c", "state.go", trigger="model")])
    m = workflow([a, b, c], registry={"back": back, "ok": _ok, "make": _make}).machine()
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
