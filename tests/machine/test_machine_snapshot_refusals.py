"""What ``PhaseMachine.restore`` refuses: another workflow's snapshot, wrong values, states
no machine reaches, values of other types, misuse; and no snapshot, however hostile, gets
anything out of ``restore`` but a machine or a ``SnapshotError`` that names the field.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.machine import (
    HISTORY_LIMIT,
    SNAPSHOT_VERSION,
    TRACE_LIMIT,
    PhaseMachine,
    SnapshotError,
    State,
)
from phaseflow.spec.model import Phase, Workflow
from tests.support.machines import FakeClock, chain, refund_desk
from tests.support.snapshots import assert_plain_json, bundled, through_json

# --- refusals -------------------------------------------------------------------------------


def _saved() -> dict[str, Any]:
    """A valid snapshot of the refund desk with history, model/guard/programmatic
    triggers and trace events (with and without positions)."""
    wf = bundled("refund-desk")
    clock = FakeClock(100.0)
    m = wf.machine(clock=clock)
    s = State(wf.defaults())
    for i, p in enumerate(["greet", *sorted(wf.phases), "greet"]):
        clock.advance(1.25)
        m.goto_sync(p, s, turn=i + 1)
    s.set("customer_id", "C-1")
    m.advance_sync(s, turn=20)
    saved = through_json(m.snapshot())
    assert saved["history"] and saved["trace"]
    return saved


def _refusal(wf: Workflow, data: Any) -> str:
    with pytest.raises(SnapshotError) as info:
        PhaseMachine.restore(wf, data)
    message = str(info.value)
    assert message.startswith("snapshot") and len(message) < 400
    return message


def test_another_workflows_snapshot_is_refused_naming_it() -> None:
    saved = _saved()
    assert _refusal(chain(3), saved) == (
        "snapshot.workflow: 'refund-desk' is not workflow 'chain'")


def test_only_the_current_phase_must_exist_in_an_edited_workflow() -> None:
    """A conversation resumes against an edited workflow as long as its current phase is
    still there; the past (history, visits, trace) may name phases the edit removed."""
    wf = bundled("refund-desk")
    m = wf.machine(clock=FakeClock())
    m.goto_sync("refund", State(), turn=1)
    fewer = Workflow(name="refund-desk", initial=wf.initial,
                     phases={k: v for k, v in wf.phases.items() if k != "refund"})
    assert _refusal(fewer, m.snapshot()) == (
        "snapshot.phase: 'refund' is not a phase of workflow 'refund-desk'")
    m.goto_sync("greet", State(), turn=2)
    saved = through_json(m.snapshot())
    r = PhaseMachine.restore(fewer, saved, clock=FakeClock(2.0))
    assert r.snapshot() == saved and [h.to_phase for h in r.history] == ["refund", "greet"]
    assert r.guard_context().visits["refund"] == 1
    bad = _saved()
    bad["history"][3]["to"] = "nope"
    assert _refusal(wf, bad) == (
        "snapshot.history[4].from: 'greet' does not follow snapshot.history[3].to ('nope')")


def test_a_machine_built_in_code_restores_into_a_workflow_of_its_phases() -> None:
    m = PhaseMachine("p0", clock=FakeClock(5.0))
    for phase in chain(2).phases.values():
        m.add_phase(phase)
    m.goto_sync("p1", State(), turn=1)
    saved = m.snapshot()
    assert saved["workflow"] is None
    restored = PhaseMachine.restore(chain(2), saved, clock=FakeClock(9.0))
    assert restored.current == "p1"
    assert restored.snapshot() == {**saved, "workflow": "chain"}
    lone = PhaseMachine("a")
    lone.add_phase(Phase("a"))
    assert _refusal(chain(2), lone.snapshot()) == (
        "snapshot.phase: 'a' is not a phase of workflow 'chain'")


def test_too_long_a_history_or_trace_is_refused() -> None:
    saved = _saved()
    wf = bundled("refund-desk")
    long_history = copy.deepcopy(saved)
    record = {"from": saved["phase"], "to": saved["phase"], "turn": 1, "at": 0.0,
              "trigger": {"kind": "model"}, "duration_in_phase": 0.0}
    long_history["history"] = [record] * (HISTORY_LIMIT + 1)
    assert _refusal(wf, long_history) == (
        "snapshot.history: 101 entries, more than the 100 a machine keeps")
    long_history["history"] = [record] * HISTORY_LIMIT
    long_history["visits"][saved["phase"]] = HISTORY_LIMIT  # each record was a visit
    assert len(PhaseMachine.restore(wf, long_history).history) == HISTORY_LIMIT
    long_trace = copy.deepcopy(saved)
    long_trace["trace"] = [saved["trace"][0]] * (TRACE_LIMIT + 1)
    assert _refusal(wf, long_trace).startswith("snapshot.trace: 101 entries")


WRONG_VALUES: list[tuple[tuple[Any, ...], Any, str]] = [
    (("format",), "phaseflow.turn", "snapshot.format: expected 'phaseflow.machine', got "
     "'phaseflow.turn'"),
    (("version",), 3, "snapshot.version: this phaseflow reads versions 1 and 2, got 3"),
    (("version",), True, "snapshot.version: this phaseflow reads versions 1 and 2, got true"),
    (("turn",), True, "snapshot.turn: expected an integer, got true"),
    (("turn",), -1, "snapshot.turn: expected an integer from 0 to 2**63-1, got -1"),
    (("turn",), 10**5000, "snapshot.turn: expected an integer from 0 to 2**63-1, got an "
     "integer of 16610 bits"),
    (("turns_in_phase",), 1.0, "snapshot.turns_in_phase: expected an integer, got 1.0"),
    (("elapsed",), math.nan, "snapshot.elapsed: expected a finite number of seconds up to "
     "2**53, got nan"),
    (("elapsed",), -math.inf, "snapshot.elapsed: expected a finite number of seconds up to "
     "2**53, got -inf"),
    (("elapsed",), -1, "snapshot.elapsed: expected seconds >= 0, got -1"),
    (("elapsed",), 10**400, "snapshot.elapsed: an integer of 1329 bits is out of range"),
    (("elapsed",), "3", "snapshot.elapsed: expected a number of seconds, got '3'"),
    (("visits",), [], "snapshot.visits: expected an object, got an array"),
    (("visits", "greet"), -3, "snapshot.visits['greet']: expected an integer from 1 to "
     "2**63-1, got -3"),
    (("history", 0, "trigger"), {"kind": "guard"}, "snapshot.history[0].trigger: missing "
     "key 'index'"),
    (("history", 0, "trigger", "kind"), "timer", "snapshot.history[0].trigger.kind: "
     "expected 'guard', 'model' or 'programmatic', got 'timer'"),
    (("history", 1, "from"), "x" * 5000, "snapshot.history[1].from: "
     f"{'x' * 60!r}... (5000 chars) does not follow snapshot.history[0].to ('greet')"),
    (("history", 1, "from"), 5, "snapshot.history[1].from: expected a phase name, got 5"),
    (("trace", 0, "kind"), "oops", "snapshot.trace[0].kind: expected one of effect_error, "
     "guard_error, preparation_failed, template_error, got 'oops'"),
    (("trace", 0, "position"), {"path": "x", "line": 1}, "snapshot.trace[0].position: "
     "missing key 'column'"),
    (("trace", 0, "position"), {"path": "x", "line": -1, "column": 0},
     "snapshot.trace[0].position.line: expected an integer from 0 to 2**63-1, got -1"),
    (("trace", 0, "phase"), ["nope"], "snapshot.trace[0].phase: expected a phase name, "
     "got an array"),
    (("trace", 0, "turn"), -1, "snapshot.trace[0].turn: expected an integer from 0 to "
     "2**63-1, got -1"),
    (("history", 0, "duration_in_phase"), -0.5, "snapshot.history[0].duration_in_phase: "
     "expected seconds >= 0, got -0.5"),
    (("history", 0, "at"), math.inf, "snapshot.history[0].at: expected a finite number of "
     "seconds up to 2**53, got inf"),
    (("history", 0, "turn"), 2**63, "snapshot.history[0].turn: expected an integer from 0 "
     "to 2**63-1, got 9223372036854775808"),
    (("history", 0, "trigger"), {"kind": "guard", "index": -1}, "snapshot.history[0]"
     ".trigger.index: expected an integer from 0 to 2**63-1, got -1"),
]


@pytest.mark.parametrize(("path", "value", "message"), WRONG_VALUES,
                         ids=[f"{i}-{'.'.join(map(str, c[0]))}"
                              for i, c in enumerate(WRONG_VALUES)])
def test_wrong_values_are_refused_naming_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    saved = _saved()
    node: Any = saved
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    assert _refusal(bundled("refund-desk"), saved) == message


def test_missing_and_extra_keys_are_refused() -> None:
    saved = _saved()
    del saved["trace"]
    assert _refusal(bundled("refund-desk"), saved) == "snapshot: missing key 'trace'"
    saved = _saved()
    saved["history"][2]["note"] = 1
    assert _refusal(bundled("refund-desk"), saved) == (
        "snapshot.history[2]: unexpected key 'note'")


def test_a_broken_chain_of_records_is_refused() -> None:
    saved = _saved()
    saved["history"][2]["from"] = saved["history"][2]["to"] = "greet"
    if saved["history"][1]["to"] != "greet":
        assert "does not follow snapshot.history[1].to" in _refusal(
            bundled("refund-desk"), saved)
    saved = _saved()
    others = sorted(set(bundled("refund-desk").phases) - {saved["phase"]})
    saved["phase"] = others[0]
    assert _refusal(bundled("refund-desk"), saved).startswith(
        f"snapshot.phase: {others[0]!r} is not where snapshot.history[")


def test_deep_nesting_is_refused_without_recursing() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    saved = _saved()
    saved["history"][0] = deep
    assert _refusal(bundled("refund-desk"), saved) == (
        "snapshot.history[0]: expected an object, got an array")
    assert _refusal(bundled("refund-desk"), deep) == "snapshot: expected an object, got an array"


def test_the_error_is_a_phaseflow_error() -> None:
    assert issubclass(SnapshotError, PhaseflowError)


# --- states no machine reaches, values of other types, misuse --------------------------------


def test_states_no_machine_reaches_are_refused() -> None:
    wf = bundled("refund-desk")
    saved = _saved()
    phase = saved["phase"]
    cases = [
        ({"visits": {}}, f"snapshot.phase: {phase!r} is current but was never entered (it is "
         "not in snapshot.visits)"),
        ({"visits": {**saved["visits"], phase: 0}}, f"snapshot.visits[{phase!r}]: expected an "
         "integer from 1 to 2**63-1, got 0"),
        ({"visits": {**saved["visits"], phase: 1}}, f"snapshot.history[8].to: 3 kept records "
         f"enter {phase!r}, more than snapshot.visits[{phase!r}] (1)"),
    ]
    kept = next(saved["history"][k:] for k in range(len(saved["history"]))
                if saved["history"][k]["from"] not in {phase} | {
                    r["to"] for r in saved["history"][k:]})
    first = kept[0]["from"]
    cases.append(({"history": kept, "visits": {k: v for k, v in saved["visits"].items()
                                               if k != first}},
                  f"snapshot.history[0].from: {first!r} was current but was never entered "
                  "(it is not in snapshot.visits)"))
    for change, message in cases:
        assert _refusal(wf, saved | change) == message


def test_turn_numbers_are_the_hosts_and_are_kept_as_given() -> None:
    """A machine records the turn numbers it is told, in any order: such states are
    reachable, so restore keeps them."""
    wf = chain(3, when="state.go")
    m = wf.machine(clock=FakeClock())
    m.goto_sync("p1", State(), turn=9)
    m.goto_sync("p2", State(), turn=2)
    for _ in range(5):
        m.advance_sync(State(), turn=0)
    saved = m.snapshot()
    assert saved["turn"] == 0 and saved["turns_in_phase"] == 5
    assert [h["turn"] for h in saved["history"]] == [9, 2]
    assert PhaseMachine.restore(wf, saved, clock=FakeClock(1.0)).snapshot() == saved


class _HostileStr(str):
    def __hash__(self) -> int:
        raise RuntimeError("hash")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")


class _CollidingKey(str):
    """Hashes as the plain string it spells, then raises when compared."""

    def __hash__(self) -> int:
        return hash(str(self))

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")


class _HostileDict(dict):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise RuntimeError("len")


class _HostileList(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise RuntimeError("len")


class _MyInt(int):
    pass


def test_values_of_other_types_are_refused_by_their_type() -> None:
    """Only the exact types json.loads makes are read: a subclass is refused before any
    of its methods runs, so one whose methods raise gets a SnapshotError too."""
    wf = bundled("refund-desk")
    saved = _saved()
    phase = saved["phase"]
    keyed = {(_CollidingKey(k) if k == "format" else k): v for k, v in saved.items()}
    cases: list[tuple[Any, str]] = [
        (_HostileDict(saved), "snapshot: expected an object, got a _HostileDict"),
        (saved | {"phase": _HostileStr(phase)}, "snapshot.phase: expected a phase name, got a "
         "_HostileStr"),
        (saved | {"format": _HostileStr("phaseflow.machine")}, "snapshot.format: expected "
         "'phaseflow.machine', got a _HostileStr"),
        (saved | {"workflow": _HostileStr("refund-desk")}, "snapshot.workflow: a _HostileStr is "
         "not workflow 'refund-desk'"),
        (keyed, "snapshot: a key is a _CollidingKey, not a string"),
        (saved | {"history": _HostileList(saved["history"])}, "snapshot.history: expected an "
         "array, got a _HostileList"),
        (saved | {"turn": _MyInt(3)}, "snapshot.turn: expected an integer, got a _MyInt"),
        (saved | {"visits": {_CollidingKey(phase): 1}}, "snapshot.visits: a key is a "
         "_CollidingKey, not a string"),
    ]
    record = copy.deepcopy(saved["history"][0])
    record["trigger"] = {"kind": _HostileStr("guard"), "index": 0}
    cases.append((saved | {"history": [record, *saved["history"][1:]]},
                  "snapshot.history[0].trigger.kind: expected 'guard', 'model' or "
                  "'programmatic', got a _HostileStr"))
    event = copy.deepcopy(saved["trace"][0])
    event["phase"] = _HostileStr("greet")
    cases.append((saved | {"trace": [event]}, "snapshot.trace[0].phase: expected a phase "
                  "name, got a _HostileStr"))
    for data, message in cases:
        assert _refusal(wf, data) == message


def test_misuse_of_restore_is_a_config_error() -> None:
    saved = _saved()
    wf = bundled("refund-desk")
    with pytest.raises(ConfigError) as info:
        PhaseMachine.restore(None, saved)  # type: ignore[arg-type]
    assert str(info.value) == "restore expects a Workflow, got NoneType"
    with pytest.raises(ConfigError) as info:
        PhaseMachine.restore(wf, saved, clock=3.0)  # type: ignore[arg-type]
    assert str(info.value) == "restore expects a clock (a callable), got float"
    for reading, shown in [(math.nan, "nan"), (math.inf, "inf"), ("x", "a str"),
                           (None, "a NoneType"), (10**400, "an integer of 1329 bits")]:
        with pytest.raises(ConfigError) as info:
            PhaseMachine.restore(wf, saved, clock=lambda r=reading: r)
        assert str(info.value) == (f"restore: the clock gave {shown}, not a finite number of "
                                   "seconds")


def test_integer_times_come_back_as_equal_floats() -> None:
    """The machine writes floats and gets the same JSON text back; integer times written by
    hand are read as the equal float."""
    wf = refund_desk()
    saved = wf.machine(clock=FakeClock()).snapshot() | {"elapsed": 5}
    again = PhaseMachine.restore(wf, saved, clock=FakeClock(3.0)).snapshot()
    assert again == saved and again["elapsed"] == 5.0 and type(again["elapsed"]) is float
    assert _refusal(wf, saved | {"elapsed": 2**53 + 1}) == (
        "snapshot.elapsed: expected a finite number of seconds up to 2**53, got "
        "9007199254740993")


def test_a_clock_reading_far_from_zero_restores() -> None:
    wf = refund_desk()
    saved = through_json(wf.machine(clock=FakeClock()).snapshot()) | {"elapsed": 0.1}
    for reading in (1.7e308, -1.7e308, 5e-324):
        r = PhaseMachine.restore(wf, saved, clock=FakeClock(reading))
        assert r.snapshot() == saved and r.current_phase_duration() == 0.1


# --- hostile JSON ---------------------------------------------------------------------------


def _deep(depth: int, make: Any) -> Any:
    value: Any = None
    for _ in range(depth):
        value = make(value)
    return value


#: Replacement values: wrong types, out-of-range numbers, names of no phase, junk.
HOSTILE: list[Any] = [
    True, False, None, 0, 1, -1, 7, 2**63, -(2**63), 10**5000, 0.0, -0.0, 1.5, -2.5, 1e300,
    math.nan, math.inf, -math.inf, "", "nope", "greet", "locate_order", "guard", "model",
    "programmatic", "effect_error", "x" * 10_000, "\ud800", [], [1, "a"], [{}], {},
    {"kind": "guard"}, {"kind": "guard", "index": 0}, {"kind": "model"},
    {"path": "f", "line": 1, "column": 2}, _deep(50_000, lambda v: [v]),
    _deep(50_000, lambda v: {"k": v}),
]


def _nodes(value: Any, path: str, trail: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every node of a snapshot with its path as the messages spell it."""
    yield path, trail
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}[{k!r}]" if path == "snapshot.visits" else f"{path}.{k}"
            yield from _nodes(v, sub, (*trail, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, f"{path}[{i}]", (*trail, i))


def _ancestors(path: str) -> list[str]:
    """``path`` and the paths of the nodes that contain it, the root excluded."""
    found = [path]
    while True:
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            break
        path = path[:cut]
        found.append(path)
    return [p for p in found if p != "snapshot"] or ["snapshot"]


def _restores_or_names(wf: Workflow, data: Any, paths: list[str]) -> None:
    try:
        m = PhaseMachine.restore(wf, data, clock=FakeClock(1.0))
    except SnapshotError as exc:
        message = str(exc)
        assert len(message) < 400
        assert any(re.search(rf"(^| ){re.escape(p)}(?=[:.\[ )]|$)", message)
                   for p in paths), (message, paths)
        return
    again = m.snapshot()
    # a snapshot of a machine built in code (workflow: null) now belongs to wf; one of
    # version 1 is written again as the current version
    assert again == {**data, "workflow": wf.name, "version": SNAPSHOT_VERSION}
    assert_plain_json(again)
    assert PhaseMachine.restore(wf, through_json(again), clock=FakeClock(2.0)).snapshot() \
        == again


@cache
def _base() -> tuple[dict[str, Any], list[tuple[str, tuple[Any, ...]]]]:
    saved = _saved()
    return saved, list(_nodes(saved, "snapshot", ()))


def _at(data: Any, trail: tuple[Any, ...]) -> Any:
    for step in trail:
        data = data[step]
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=st.integers(0, 10_000), action=st.sampled_from(["replace", "delete", "add"]),
       pick=st.integers(0, len(HOSTILE) - 1), key=st.sampled_from(["nope", "greet", "kind",
                                                                    "index", "at", ""]))
def test_a_mutated_snapshot_restores_or_names_the_field(
    node: int, action: str, pick: int, key: str
) -> None:
    base, nodes = _base()
    path, trail = nodes[node % len(nodes)]
    data = copy.deepcopy(base)
    paths = _ancestors(path)
    if action == "replace":
        if not trail:
            data = HOSTILE[pick]
        else:
            _at(data, trail[:-1])[trail[-1]] = HOSTILE[pick]
    else:
        target = _at(data, trail)
        if not isinstance(target, dict | list):
            return
        if action == "delete":
            if not target:
                return
            if isinstance(target, dict):
                del target[next(iter(target))]
            else:
                del target[-1]
        elif isinstance(target, dict):
            target[key] = HOSTILE[pick]
        else:
            target.append(HOSTILE[pick])
            paths.append(f"{path}[{len(target) - 1}]")
        paths.append("snapshot.phase")  # a shortened history may leave the phase unexplained
    _restores_or_names(bundled("refund-desk"), data, paths)


def test_every_field_replaced_by_every_hostile_value_restores_or_names_the_field() -> None:
    base, nodes = _base()
    wf = bundled("refund-desk")
    for path, trail in nodes[1:]:
        for value in HOSTILE:
            data = copy.deepcopy(base)
            _at(data, trail[:-1])[trail[-1]] = value
            _restores_or_names(wf, data, _ancestors(path))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["phaseflow.machine", "refund-desk", "greet", "guard"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["format", "version", "workflow", "phase", "elapsed",
                                       "turn", "turns_in_phase", "visits", "history", "trace",
                                       "kind", "index", "from", "to", "x"]), inner,
                      max_size=10),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(data=json_values, top=st.dictionaries(
    st.sampled_from(["format", "version", "workflow", "phase", "elapsed", "turn",
                     "turns_in_phase", "visits", "history", "trace", "extra"]),
    json_values, max_size=11))
def test_arbitrary_json_restores_or_raises_a_snapshot_error(data: Any, top: Any) -> None:
    wf = bundled("refund-desk")
    for value in (data, top, copy.deepcopy(_base()[0]) | top):
        try:
            m = PhaseMachine.restore(wf, value, clock=FakeClock())
        except SnapshotError as exc:
            assert str(exc).startswith("snapshot") and len(str(exc)) < 400
        else:
            # a snapshot of a machine built in code (workflow: null) now belongs to wf
            assert m.snapshot() == {**value, "workflow": wf.name,
                                    "version": SNAPSHOT_VERSION}
