"""The oracle property: on generated workflows and generated state sequences, phaseflow's
``PhaseMachine`` and the pytransitions machine built by the adapter agree after every step
(phase, state, history, visits, counters, and the pure "could we move?" answers).

Workflows are generated as plain data, then built either in code with the model classes or
as YAML text through ``load_workflow`` (which must report no errors). Guards come from a
small grammar over integer, boolean and string state keys plus the machine's counters;
effects ``set``/``unset`` the guarded keys. No ``call`` effects (the unit tests cover
them); preparations (``set`` only) in a separate property.

Every case also drives a third engine: the same workflow with an ``async def`` no-op
``call`` (one that really suspends) added to every phase's ``on_enter`` and ``on_exit``,
through the machine's coroutines only (``advance``, ``take_request``), so their awaiting
paths run; it must do exactly what the sync machine does.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

pytest.importorskip("transitions")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import phaseflow
from phaseflow.interop.transitions import (
    ADVANCE,
    build_machine,
    request,
    request_trigger,
    tracker_of,
    turn_boundary,
)
from phaseflow.machine import PhaseMachine, State
from phaseflow.spec.model import (
    CallEffect,
    Phase,
    Preparation,
    SetEffect,
    Transition,
    UnsetEffect,
    Workflow,
)

INT_KEYS = ("a", "b")
BOOL_KEY = "f"
STR_KEY = "s"
KEYS = (*INT_KEYS, BOOL_KEY, STR_KEY)
UNSET = object()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- generation ------------------------------------------------------------------------------


def values(key: str) -> st.SearchStrategy[Any]:
    """Mostly values of the key's type; sometimes null or another type (type errors)."""
    if key in INT_KEYS:
        typed: st.SearchStrategy[Any] = st.integers(-1, 3)
    elif key == BOOL_KEY:
        typed = st.booleans()
    else:
        typed = st.sampled_from(["x", "y", ""])
    return st.one_of(typed, typed, typed, st.sampled_from([None, "x", 2, True]))


def atoms(phases: list[str]) -> st.SearchStrategy[str]:
    ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
    return st.one_of(
        st.builds(lambda k, o, n: f"state.{k} {o} {n}", st.sampled_from(INT_KEYS), ops,
                  st.integers(-1, 3)),
        st.builds(lambda o: f"state.a {o} state.b", ops),
        st.sampled_from([
            "state.f", "state.f == true", "state.f == false", "state.s == 'x'",
            "state.s != ''", "state.s", "'x' in state.s", "state.a + 1 > state.b",
            "true", "false",
        ]),
        st.builds(lambda k, n: f"state.{k} is {n}", st.sampled_from(KEYS),
                  st.sampled_from(["null", "not null"])),
        st.builds(lambda n: f"turns_in_phase >= {n}", st.integers(1, 3)),
        st.builds(lambda n: f"turn > {n}", st.integers(1, 6)),
        st.builds(lambda n: f"seconds_in_phase >= {n}", st.integers(1, 6)),
        st.builds(lambda p, n: f"visits.{p} >= {n}", st.sampled_from(phases),
                  st.integers(1, 3)),
        st.builds(lambda p: f"phase == '{p}'", st.sampled_from(phases)),
    )


def guards(phases: list[str]) -> st.SearchStrategy[str]:
    return st.recursive(
        atoms(phases),
        lambda inner: st.one_of(
            st.builds(lambda x, y: f"({x}) and ({y})", inner, inner),
            st.builds(lambda x, y: f"({x}) or ({y})", inner, inner),
            st.builds(lambda x: f"not ({x})", inner),
        ),
        max_leaves=4,
    )


def effects() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda k, v: {"set": {k: v}}, st.sampled_from(KEYS),
                  st.one_of(st.integers(-1, 3), st.booleans(), st.sampled_from(["x", "y"]))),
        st.builds(lambda ks: {"unset": ks},
                  st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)),
    )


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


@st.composite
def workflows(draw: st.DrawFn, preparations: bool = False) -> dict[str, Any]:
    """A workflow as plain data (the YAML document's shape); with ``preparations``,
    phases that ``require`` keys may have ``set`` preparations (which may or may not
    produce them)."""
    n = draw(st.integers(1, 8))
    names = [f"p{i}" for i in range(n)]
    phases: dict[str, Any] = {}
    for name in names:
        spec: dict[str, Any] = {"goal": f"Phase {name}."}
        terminal = draw(st.integers(0, 5)) == 0
        if terminal:
            spec["terminal"] = True
        else:
            spec["transitions"] = draw(st.lists(
                st.fixed_dictionaries(
                    {"to": st.sampled_from(names)},
                    optional={
                        "when": guards(names),
                        "trigger": st.sampled_from(["auto", "auto", "model"]),
                    },
                ),
                max_size=4,
            ))
        if draw(st.integers(0, 3)) == 0:
            # entry guards see the *current* phase's context: ask about it often
            came_from = st.builds(lambda p, o: f"phase {o} '{p}'", st.sampled_from(names),
                                  st.sampled_from(["==", "!="]))
            spec["guard"] = draw(st.one_of(guards(names), came_from))
        if draw(st.integers(0, 3)) == 0:
            spec["requires"] = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2,
                                             unique=True))
        if preparations and spec.get("requires") and draw(st.booleans()):
            spec["prepare"] = [
                {"name": f"prep{j}", "produces": produces, "set": values_}
                for j, (produces, values_) in enumerate(draw(st.lists(
                    st.tuples(
                        st.lists(st.sampled_from(spec["requires"]), max_size=2, unique=True),
                        st.dictionaries(st.sampled_from(KEYS), st.one_of(
                            st.integers(-1, 3), st.booleans(), st.sampled_from(["x", "y"])),
                            min_size=1, max_size=2),
                    ),
                    min_size=1, max_size=2,
                )))
            ]
        if draw(st.integers(0, 3)) == 0:
            spec["clear_on_enter"] = draw(st.lists(st.sampled_from(KEYS), min_size=1,
                                                   max_size=2, unique=True))
        for hook in ("on_enter", "on_exit"):
            if draw(st.booleans()):
                spec[hook] = draw(st.lists(effects(), min_size=1, max_size=2))
        phases[name] = spec
    doc: dict[str, Any] = {"phaseflow": 1, "name": "generated", "initial": "p0"}
    if draw(st.booleans()):
        doc["state"] = {
            "a": {"type": "any", "default": draw(st.integers(-1, 3))},
            "b": {"type": "any"},
            "f": {"type": "any", "default": draw(st.booleans())},
            "s": {"type": "any"},
        }
    doc["phases"] = phases
    return doc


async def _tick(ctx: Any) -> None:
    """An async no-op that really suspends."""
    await asyncio.sleep(0)


TICKS: Mapping[str, Callable[..., Any]] = {"tick": _tick}


def with_ticks(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with a ``call: tick`` added to every phase's ``on_enter`` and ``on_exit``."""
    doc = copy.deepcopy(doc)
    for spec in doc["phases"].values():
        for hook in ("on_enter", "on_exit"):
            spec[hook] = [*spec.get(hook, ()), {"call": "tick"}]
    return doc


def _effect(spec: dict[str, Any]) -> SetEffect | UnsetEffect | CallEffect:
    if "call" in spec:
        return CallEffect(spec["call"])
    return SetEffect(spec["set"]) if "set" in spec else UnsetEffect(tuple(spec["unset"]))


def build_in_code(
    doc: dict[str, Any], registry: Mapping[str, Callable[..., Any]] | None = None
) -> Workflow:
    from phaseflow.spec.model import StateKey

    phases = {}
    for name, spec in doc["phases"].items():
        phases[name] = Phase(
            name,
            goal=spec["goal"],
            requires=spec.get("requires", ()),
            guard=spec.get("guard"),
            on_enter=[_effect(e) for e in spec.get("on_enter", ())],
            on_exit=[_effect(e) for e in spec.get("on_exit", ())],
            clear_on_enter=spec.get("clear_on_enter", ()),
            prepare=[
                Preparation(p["name"], SetEffect(p["set"]), produces=p["produces"])
                for p in spec.get("prepare", ())
            ],
            terminal=spec.get("terminal", False),
            transitions=[
                Transition(t["to"], t.get("when"), trigger=t.get("trigger", "auto"))
                for t in spec.get("transitions", ())
            ],
        )
    state = {
        k: StateKey(k, "any", has_default="default" in s, default=s.get("default"))
        for k, s in doc.get("state", {}).items()
    }
    return Workflow(name=doc["name"], initial=doc["initial"], phases=phases, state=state,
                    registry=registry or {}, machine_factory=PhaseMachine.from_workflow)


def build_from_yaml(
    doc: dict[str, Any], registry: Mapping[str, Callable[..., Any]] | None = None
) -> Workflow:
    text = yaml.safe_dump(doc, sort_keys=False)
    return phaseflow.load_workflow_text(text, registry)  # raises WorkflowError on any error


@dataclass(frozen=True)
class Update:
    values: dict[str, Any]


@dataclass(frozen=True)
class Wait:
    seconds: int


@dataclass(frozen=True)
class Request:
    target: str


@dataclass(frozen=True)
class Boundary:
    pass


def steps(names: list[str]) -> st.SearchStrategy[list[Any]]:
    update = st.builds(
        Update,
        st.dictionaries(st.sampled_from(KEYS), st.none(), max_size=3).flatmap(
            lambda d: st.fixed_dictionaries(
                {k: st.one_of(values(k), st.just(UNSET)) for k in d}
            )
        ),
    )
    return st.lists(
        st.one_of(
            update, update, update,
            st.builds(Wait, st.integers(1, 4)),
            st.builds(Request, st.sampled_from(names)),
            st.just(Boundary()),
        ),
        max_size=14,
    )


# --- the property ----------------------------------------------------------------------------


def _check_same(machine: PhaseMachine, s1: State, model: Any, where: str) -> None:
    tracker = tracker_of(model)
    assert model.phase == machine.current, where
    assert tracker.state == s1, where
    assert [r.to_phase for r in tracker.history] == [r.to_phase for r in machine.history], where
    assert tuple(tracker.history) == machine.history, where
    assert dict(tracker.visits) == dict(machine.visits), where
    assert tracker.turns_in_phase == machine.turns_in_phase, where
    assert tracker.turn == machine.turn, where


def _errors(records: Any) -> list[Any]:
    return [(e.kind, e.phase, e.turn, e.message, e.source) for e in records]


def _same_as_async(machine: PhaseMachine, s1: State, am: PhaseMachine, s3: State,
                   result: Any, async_result: Any, where: str) -> None:
    """The async twin did what the sync machine did (its ticks change nothing)."""
    assert am.current == machine.current, where
    assert am.history == machine.history, where
    assert dict(am.visits) == dict(machine.visits), where
    assert (am.turn, am.turns_in_phase) == (machine.turn, machine.turns_in_phase), where
    # (positions differ in YAML: the ticks add lines)
    assert _errors(am.trace) == _errors(machine.trace), where
    assert s3 == s1, where
    if result is None or async_result is None:
        assert result is async_result, where
    elif hasattr(result, "outcome"):
        assert (async_result.outcome, async_result.target, async_result.missing,
                async_result.preparations) == (result.outcome, result.target, result.missing,
                                               result.preparations), where
        assert _errors(async_result.events) == _errors(result.events), where
    else:
        assert async_result.record == result.record, where
        assert _errors(async_result.events) == _errors(result.events), where


def run_oracle(workflow: Workflow, script: list[Any], async_twin: Workflow) -> None:
    clock = Clock()
    machine = workflow.machine(clock=clock)
    am = async_twin.machine(clock=clock)
    s1 = State(workflow.defaults())
    s3 = State(async_twin.defaults())
    tm = build_machine(workflow, clock=clock)
    model = tm.models[0]
    s2 = tracker_of(model).state
    assert isinstance(s2, State)
    assert s1 == s2
    prepared = any(p.prepare for p in workflow.phases.values())
    turn = 0
    for i, step in enumerate(script):
        where = f"step {i}: {step!r}"
        if isinstance(step, Request):
            pure = machine.request(step.target, s1)
            assert model.may_trigger(request_trigger(step.target)) == pure, where
            taken = machine.take_request_sync(step.target, s1, turn=turn)
            assert request(model, step.target, turn=turn) == (taken is not None), where
            assert am.request(step.target, s3) == pure, where
            async_taken = asyncio.run(am.take_request(step.target, s3, turn=turn))
            _same_as_async(machine, s1, am, s3, taken, async_taken, where)
            if not prepared:
                assert (taken is not None) == pure, where
        else:
            if isinstance(step, Update):
                for k, v in step.values.items():
                    for s in (s1, s2, s3):
                        if v is UNSET:
                            s.unset(k)
                        else:
                            s.set(k, v)
            elif isinstance(step, Wait):
                clock.now += step.seconds
            ready = machine.evaluate(s1)
            assert model.may_trigger(ADVANCE) == (ready is not None), where
            turn += 1
            result = machine.advance_sync(s1, turn=turn)
            _same_as_async(machine, s1, am, s3, result,
                           asyncio.run(am.advance(s3, turn=turn)), where)
            moved = turn_boundary(model, turn)
            assert moved == result.transitioned, where
            tracker = tracker_of(model)
            assert tracker.preparations == result.preparations, where
            if result.blocked:
                assert tracker.blocked == (result.target, result.missing), where
            else:
                assert tracker.blocked is None, where
            if not prepared:
                assert not result.blocked, where  # no preparations: never blocked
        _check_same(machine, s1, model, where)


SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data())
def test_oracle_workflows_built_in_code(data: st.DataObject) -> None:
    doc = data.draw(workflows(), label="workflow")
    workflow = build_in_code(doc)
    PhaseMachine.from_workflow(workflow).validate()
    script = data.draw(steps(list(doc["phases"])), label="steps")
    run_oracle(workflow, script, build_in_code(with_ticks(doc), TICKS))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_oracle_workflows_loaded_from_yaml(data: st.DataObject) -> None:
    doc = data.draw(workflows(), label="workflow")
    workflow = build_from_yaml(doc)
    script = data.draw(steps(list(doc["phases"])), label="steps")
    run_oracle(workflow, script, build_from_yaml(with_ticks(doc), TICKS))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_oracle_with_preparations(data: st.DataObject) -> None:
    """Beyond the brief's oracle: ``set`` preparations, so Blocked boundaries and prepared
    model requests are compared too (the adapter runs preparations in ``turn_boundary`` and
    ``request``)."""
    doc = data.draw(workflows(preparations=True), label="workflow")
    build = build_in_code if data.draw(st.booleans(), label="in code") else build_from_yaml
    workflow = build(doc)
    script = data.draw(steps(list(doc["phases"])), label="steps")
    run_oracle(workflow, script, build(with_ticks(doc), TICKS))
