"""Building machines: in code, from a workflow, and what validate() rejects."""

from __future__ import annotations

import pytest

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.machine import PhaseMachine
from phaseflow.spec.model import Phase, Transition
from tests.support.machines import FakeClock, chain, refund_desk


def test_in_code_machine_runs_after_add_phase() -> None:
    m = PhaseMachine("a", clock=FakeClock())
    m.add_phase(Phase("a", transitions=[Transition("b", "state.x")]))
    m.add_phase(Phase("b", terminal=True))
    m.validate()
    assert m.current == "a"
    assert m.current_phase is not None and m.current_phase.name == "a"
    r = m.advance_sync({"x": 1}, turn=1)
    assert r.transitioned and m.current == "b"


def test_add_phase_replaces_a_phase_of_the_same_name() -> None:
    m = PhaseMachine("a")
    m.add_phase(Phase("a", goal="old"))
    m.add_phase(Phase("a", goal="new"))
    assert m.current_phase is not None and m.current_phase.goal == "new"
    assert list(m.phases) == ["a"]


def test_add_phase_after_the_index_was_used_is_seen() -> None:
    m = PhaseMachine("a")
    m.add_phase(Phase("a", tools=["x"]))
    assert m.active_tools() == ("x",)
    m.add_phase(Phase("a", tools=["y"]))
    assert m.active_tools() == ("y",)


def test_validate_no_phases() -> None:
    with pytest.raises(ConfigError, match="no phases"):
        PhaseMachine("a").validate()


def test_validate_initial_not_registered() -> None:
    m = PhaseMachine("greet")
    m.add_phase(Phase("greeet"))
    with pytest.raises(ConfigError, match="initial phase 'greet' is not registered"):
        m.validate()


def test_validate_transition_to_unregistered_phase() -> None:
    m = PhaseMachine("a")
    m.add_phase(Phase("a", transitions=[Transition("b"), Transition("zz")]))
    m.add_phase(Phase("b"))
    with pytest.raises(ConfigError, match="transition 1: target 'zz'"):
        m.validate()


def test_config_error_is_a_phaseflow_error() -> None:
    assert issubclass(ConfigError, PhaseflowError)


def test_current_phase_is_none_for_an_unregistered_phase() -> None:
    m = PhaseMachine("nowhere")
    assert m.current_phase is None
    assert m.evaluate_for_transition({}) is None
    assert m.active_tools() is None
    assert m.advance_sync({}, turn=1).stayed


def test_from_workflow_shares_phases_and_index() -> None:
    wf = chain(5)
    a, b = wf.machine(), PhaseMachine.from_workflow(wf)
    assert a._index is b._index
    assert a.current_phase is wf.phases["p0"]
    assert a.workflow is wf


def test_from_workflow_with_unknown_initial_raises() -> None:
    from phaseflow.spec.model import Workflow

    wf = Workflow(name="x", initial="nope", phases={"a": Phase("a")},
                  machine_factory=PhaseMachine.from_workflow)
    with pytest.raises(ConfigError, match="nope"):
        wf.machine()


def test_add_phase_on_a_workflow_machine_does_not_touch_the_workflow() -> None:
    wf = refund_desk()
    m = wf.machine()
    m.add_phase(Phase("greet", goal="changed"))
    assert m.current_phase is not None and m.current_phase.goal == "changed"
    assert wf.phases["greet"].goal != "changed"
    assert wf.machine().current_phase is wf.phases["greet"]


def test_machines_are_independent() -> None:
    wf = chain(3)
    a, b = wf.machine(), wf.machine()
    a.advance_sync({"go": True}, turn=1)
    assert a.current == "p1" and b.current == "p0"
    assert b.history == () and b.visits == {"p0": 1}


def test_add_phase_rejects_non_phases() -> None:
    with pytest.raises(ConfigError):
        PhaseMachine("a").add_phase("a")  # type: ignore[arg-type]


def test_machine_from_a_large_workflow_is_cheap() -> None:
    """Making a machine must not be O(phases): the per-phase entries are filled lazily."""
    wf = chain(1000)
    m = wf.machine()
    assert len(m._index.entries) == 0
    m.advance_sync({"go": True}, turn=1)
    assert len(m._index.entries) <= 3
