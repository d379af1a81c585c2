"""advance: one turn boundary, preparations, blocked results, at most one transition."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phaseflow.machine import BoundaryResult, EffectContext, GuardTrigger, State
from phaseflow.spec.model import CallEffect, Phase, Preparation, SetEffect, Transition
from tests.support.machines import FakeClock, calls_of, refund_desk, workflow

MODE = ["async"]


@pytest.fixture(autouse=True, params=["async", "sync"])
def _mode(request: pytest.FixtureRequest) -> None:
    MODE[0] = request.param


def _advance(m: Any, s: Any, turn: int) -> BoundaryResult:
    """One boundary through ``advance`` or ``advance_sync`` (every test runs with both)."""
    if MODE[0] == "sync":
        return m.advance_sync(s, turn=turn)  # type: ignore[no-any-return]
    r: BoundaryResult = asyncio.run(m.advance(s, turn=turn))
    return r


def test_stayed() -> None:
    m = refund_desk().machine()
    r = _advance(m, State(), 1)
    assert r.stayed and not r.transitioned and not r.blocked
    assert (r.phase, r.from_phase, r.to_phase, r.turn) == ("greet", "greet", "greet", 1)
    assert r.transition is None and r.target is None


def test_transitioned_with_guard_trigger() -> None:
    m = refund_desk().machine()
    r = _advance(m, State({"customer_id": "C-1"}), 1)
    assert r.transitioned and (r.from_phase, r.to_phase) == ("greet", "locate_order")
    assert r.transition is not None and r.transition.trigger == GuardTrigger(0)
    assert m.history[-1].trigger == GuardTrigger(0)


def test_at_most_one_transition_per_boundary() -> None:
    wf = workflow([Phase("a", transitions=[Transition("b")]),
                   Phase("b", transitions=[Transition("c")]), Phase("c", terminal=True)])
    m = wf.machine()
    assert _advance(m, {}, 1).phase == "b"
    assert _advance(m, {}, 2).phase == "c"
    assert _advance(m, {}, 3).stayed


def test_terminal_never_moves() -> None:
    m = workflow([Phase("a", terminal=True, transitions=[Transition("b")]), Phase("b")]).machine()
    assert _advance(m, {}, 1).stayed and m.current == "a"


def test_blocked_prepares_then_transitions_in_the_same_boundary() -> None:
    wf = refund_desk()
    m = wf.machine()
    s = State({"customer_id": "C-1"})
    _advance(m, s, 1)
    s.set("order_id", "O-9")
    s.set("amount", 120)
    r = _advance(m, s, 2)
    assert r.transitioned and r.phase == "refund" and r.preparations == ("load_policy",)
    assert s["policy"] == {"name": "standard"}
    assert calls_of(wf) == ["fetch_refund_policy"]
    assert r.transition is not None
    assert r.transition.instructions == "Refund 120 for order O-9 under policy\nstandard."


def test_blocked_result_names_target_missing_and_preparations() -> None:
    wf = refund_desk()
    m = wf.machine()
    s = State({"customer_id": "C-1", "amount": 100})
    _advance(m, s, 1)
    r = _advance(m, s, 2)
    assert r.blocked and r.phase == "locate_order"
    assert (r.target, r.missing, r.preparations) == ("refund", ("order_id",), ("load_policy",))
    # the policy is there now: the preparation is not run again while still blocked
    r = _advance(m, s, 3)
    assert r.blocked and r.preparations == () and calls_of(wf) == ["fetch_refund_policy"]


def test_failing_preparation_leaves_the_target_blocked() -> None:
    def boom(ctx: EffectContext) -> dict[str, Any]:
        raise RuntimeError("policy service down")

    wf = refund_desk(registry={"fetch_refund_policy": boom})
    m = wf.machine()
    s = State({"customer_id": "C-1", "amount": 100, "order_id": "O"})
    _advance(m, s, 1)
    r = _advance(m, s, 2)
    assert r.blocked and r.target == "refund" and r.missing == ("policy",)
    assert [e.kind for e in r.events] == ["preparation_failed"]
    assert r.events[0].source == "prepare: load_policy" and r.events[0].phase == "refund"
    assert m.current == "locate_order"


def test_failing_preparation_stops_the_rest_and_blocks_even_if_keys_appear() -> None:
    def boom(ctx: EffectContext) -> None:
        raise RuntimeError

    wf = workflow(
        [Phase("a", transitions=[Transition("b")]),
         Phase("b", requires=["k"], prepare=[
             Preparation("first", SetEffect({"k": 1}), ["k"]),
             Preparation("second", CallEffect("boom"), ["j"]),
             Preparation("third", SetEffect({"t": 1}), ["t"])])],
        registry={"boom": boom})
    m = wf.machine()
    s = State()
    assert m.prepare_target_sync("b", s) is False
    assert "t" not in s and s["k"] == 1
    assert [e.kind for e in m.trace] == ["preparation_failed"]


def test_prepare_target_returns_whether_requires_are_present() -> None:
    wf = workflow([Phase("a"), Phase("b", requires=["k", "j"], prepare=[
        Preparation("p", SetEffect({"k": 1}), ["k"])])])
    m = wf.machine()
    assert asyncio.run(m.prepare_target("b", State())) is False
    assert asyncio.run(m.prepare_target("b", State({"j": 1}))) is True
    assert asyncio.run(m.prepare_target("nope", State())) is False


def test_preparation_without_produces_always_runs() -> None:
    n: list[int] = []
    wf = workflow([Phase("a", transitions=[Transition("b")]),
                   Phase("b", requires=["k"], prepare=[Preparation("p", CallEffect("h"))])],
                  registry={"h": lambda ctx: n.append(1)})
    m = wf.machine()
    r = _advance(m, State(), turn=1)
    r = _advance(m, State(), turn=2)
    assert r.blocked and n == [1, 1]


def test_second_evaluation_may_pick_another_transition() -> None:
    wf = workflow([
        Phase("a", transitions=[Transition("b", "not state.k"), Transition("c", "state.k == 2")]),
        Phase("b", requires=["j"], prepare=[Preparation("p", SetEffect({"k": 2}), ["k"])]),
        Phase("c"),
    ])
    m = wf.machine()
    r = _advance(m, State(), turn=1)
    assert r.transitioned and r.phase == "c" and r.preparations == ("p",)


def test_second_evaluation_may_find_nothing() -> None:
    wf = workflow([
        Phase("a", transitions=[Transition("b", "not state.k")]),
        Phase("b", requires=["j"], prepare=[Preparation("p", SetEffect({"k": 2}), ["k"])]),
    ])
    r = _advance(wf.machine(), State(), 1)
    assert r.stayed and r.preparations == ("p",)


def test_async_preparation_in_async_advance() -> None:
    async def fetch(ctx: EffectContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"k": ctx.phase}

    wf = workflow([Phase("a", transitions=[Transition("b")]),
                   Phase("b", requires=["k"], prepare=[Preparation("p", CallEffect("f"), ["k"])])],
                  registry={"f": fetch})
    m = wf.machine()
    s = State()
    r = asyncio.run(m.advance(s, turn=1))
    assert r.transitioned and s["k"] == "b"
    m2 = wf.machine()
    assert asyncio.run(m2.prepare_target("b", State())) is True


def test_without_writer_a_plain_dict_is_written() -> None:
    m = refund_desk().machine()
    d: dict[str, Any] = {"customer_id": "C", "amount": 1, "order_id": "O"}
    _advance(m, d, turn=1)
    _advance(m, d, turn=2)
    assert m.current == "refund" and d["policy"] == {"name": "standard"}


def test_read_only_state_needs_a_writer() -> None:
    from types import MappingProxyType

    import pytest

    from phaseflow.errors import ConfigError

    m = workflow([Phase("a", transitions=[Transition("b")]),
                  Phase("b", on_enter=[SetEffect({"x": 1})])]).machine()
    with pytest.raises(ConfigError):
        _advance(m, MappingProxyType({}), turn=1)


def test_turns_in_phase_resets_on_entry_and_counts_boundaries() -> None:
    m = workflow([Phase("a", transitions=[Transition("b", "state.go")]), Phase("b")]).machine(
        clock=FakeClock())
    for t in range(1, 4):
        _advance(m, {}, turn=t)
    assert m.turns_in_phase == 3
    _advance(m, {"go": 1}, turn=4)
    assert m.turns_in_phase == 0 and m.turn == 4
    _advance(m, {}, turn=5)
    assert m.turns_in_phase == 1
