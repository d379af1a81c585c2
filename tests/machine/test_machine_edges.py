"""The machine reads the edge rule from ``phaseflow.spec.edges.check_edge``.

A boundary's scan keeps one inlined fast path (an edge that only its ``when`` decides is
checked without the call); these properties hold it, and the model-request path, to
``check_edge`` on random phases, guards and states: same edge, same verdict, same missing
keys, same guard errors.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.machine import PhaseMachine, State
from phaseflow.machine.results import guard_error
from phaseflow.spec.edges import READY, check_edge, decided_by_when
from phaseflow.spec.model import Phase, Preparation, SetEffect, Transition, Workflow

KEYS = ["a", "b", "c"]
#: ``when``s and entry guards; the ``'x'`` comparisons raise a type error on numbers
GUARDS = [None, "state.a", "not state.b", "state.c > 1", "state.c < 'x'", "turn >= 0",
          "state.a and state.c", "state.b == null", "visits.p0 > 5", "state.a + 'x'"]
VALUES = st.sampled_from([None, 0, 1, 2, 3, True, False, "s"])


@st.composite
def workflows(draw: Any) -> Workflow:
    targets = []
    for name in ("p1", "p2", "p3"):
        requires = draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
        prepare = ([Preparation("prep", SetEffect({"a": 1}), ["a"])]
                   if draw(st.booleans()) else [])
        targets.append(Phase(name, guard=draw(st.sampled_from(GUARDS)), requires=requires,
                             prepare=prepare))
    edges = [
        Transition(draw(st.sampled_from(["p0", "p1", "p2", "p3", "nowhere"])),
                   draw(st.sampled_from(GUARDS)),
                   trigger=draw(st.sampled_from(["auto", "auto", "model"])))
        for _ in range(draw(st.integers(0, 5)))
    ]
    phases = [Phase("p0", transitions=edges), *targets]
    return Workflow(name="edges", initial="p0", phases={p.name: p for p in phases},
                    machine_factory=PhaseMachine.from_workflow)


def _expected(wf: Workflow, m: PhaseMachine, s: State, trigger: str,
              target: str | None = None) -> tuple[Any, list[Any]]:
    """The first edge of ``p0`` (of ``trigger``, to ``target`` if given) that is not closed,
    by ``check_edge`` alone, and the guard errors met before it."""
    phase = wf.phases["p0"]
    ctx = m.guard_context()
    errors = []
    for number, t in enumerate(phase.transitions):
        if t.trigger != trigger or (target is not None and t.to != target):
            continue
        dest = wf.phases.get(t.to)
        status = check_edge(t.when, dest, s, ctx)
        if status.error is not None:
            errors.append(guard_error(phase, number, dest, status.error, m.turn))
        if trigger == "model" and status.stopped_by == "when":
            continue
        if status.verdict != "closed" or trigger == "model":
            return (number, t.to, status), errors
    return None, errors


@settings(max_examples=400, deadline=None)
@given(wf=workflows(), values=st.dictionaries(st.sampled_from(KEYS), VALUES))
def test_the_boundary_scan_is_check_edge(wf: Workflow, values: dict[str, Any]) -> None:
    m = wf.machine()
    s = State(values)
    info = m._index.info("p0")
    assert info is not None
    for edge in info.auto:
        assert edge.by_when == decided_by_when(edge.target)
    errors: list[Any] = []
    found = m._scan(info, s, m.guard_context(), errors)
    expected, expected_errors = _expected(wf, m, s, "auto")
    if expected is None:
        assert found is None
    else:
        assert found is not None
        edge, status = found
        assert (edge.number, edge.to, status) == expected
        if status.verdict == "ready":
            assert status is READY
    assert errors == expected_errors
    # the public members agree with the scan
    evaluated = m.evaluate_for_transition(s)
    if expected is None:
        assert evaluated is None
    else:
        number, to, status = expected
        assert (evaluated.target, evaluated.index) == (to, number)  # type: ignore[union-attr]
        assert getattr(evaluated, "missing", ()) == status.missing


@settings(max_examples=300, deadline=None)
@given(wf=workflows(), values=st.dictionaries(st.sampled_from(KEYS), VALUES),
       target=st.sampled_from(["p0", "p1", "p2", "p3", "nowhere"]))
def test_a_model_request_is_check_edge(wf: Workflow, values: dict[str, Any],
                                       target: str) -> None:
    m = wf.machine()
    s = State(values)
    expected, expected_errors = _expected(wf, m, s, "model", target)
    ready = target in wf.phases and expected is not None and expected[2].verdict == "ready"
    assert m.request(target, s) == ready
    r = m.take_request_sync(target, s, turn=0)
    if target not in wf.phases or expected is None or expected[2].verdict == "closed":
        assert r is None and m.current == "p0"
        assert list(m.trace) == (expected_errors if target in wf.phases else [])
    elif ready:
        assert r is not None and m.current == target
