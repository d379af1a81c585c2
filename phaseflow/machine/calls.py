"""Workflows that compose: the stack of calls, returns and hand-offs of one machine.

A machine whose workflow uses others (``Workflow.uses``) *settles* after each move
(:func:`settle_steps`): while the current phase calls a workflow it has not called on
this visit, the call is entered; while a called workflow sits in a terminal phase, the
call returns and the calling phase's transitions are evaluated at once (a boundary that
does not count as a turn); while an ``auto`` hand-off of the current phase holds, the
conversation goes on in that workflow. A machine of a workflow that composes nothing
never settles: its moves pay one slot read.

Entering a call suspends the caller's per-conversation values (phase, timer, counters,
visits, history) in a :class:`Frame`, a machine of the caller's workflow that holds them,
with the caller's state; the machine then runs the callee as a new conversation of it
would (its initial phase, its own state seeded by the call's ``with``; the initial
phase's ``on_enter`` does not run, as for any new conversation). Returning puts the
caller's values and state back, with the call's ``returns`` copied in, and sets
``returned``. Every state change goes through the writer, so a session persists it as it
persists any effect. A frame is snapshotted as a machine's snapshot (``calls`` in
:func:`calls_snapshot`), so a conversation restored anywhere inside a call resumes there.

This module reads the machine through its slots and never imports the machine class.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from phaseflow.machine.core import MachineCore
from phaseflow.machine.drivers import Plan
from phaseflow.machine.index import MachineIndex, index_for
from phaseflow.machine.plan import plan_boundary
from phaseflow.machine.results import ErrorRecord, GuardTrigger, HistoryRecord
from phaseflow.machine.snapshot import SnapshotError, restore_snapshot, take_snapshot
from phaseflow.machine.state import State, Writer, writer_for
from phaseflow.spec.model import Call, Handoff, Input, Workflow

__all__ = [
    "MAX_SETTLE",
    "Frame",
    "call_scope",
    "calls_snapshot",
    "mark_calls",
    "path_names",
    "restore_calls",
    "settle_steps",
    "snapshot_path",
    "take_handoff",
]

#: How many calls, returns and hand-offs one move may set off before the machine stops
#: settling (a trace event says so): a bound, so that no workflow can loop for ever.
MAX_SETTLE = 10_000
#: The snapshot's extra keys (present only when a conversation composes).
CALL_KEYS = ("calls", "route", "returned", "back", "inner")


@dataclass(slots=True)
class Frame:
    """A call in progress: the caller's suspended values (a machine of its workflow),
    its state, and the call."""

    caller: MachineCore
    state: dict[str, Any]
    call: Call
    #: how many messages the conversation had when the call began (set by the session:
    #: what a ``history: since_call`` or ``summary`` call's requests start after)
    mark: int | None = None


def _seed(inputs: Mapping[str, Input], source: Mapping[str, Any], target: Workflow
          ) -> dict[str, Any]:
    seed = target.defaults()
    for key, given in inputs.items():
        present, value = given.resolve(source)
        if present:
            seed[key] = value
    return seed


def _replace_state(state: Mapping[str, Any], writer: Writer, values: Mapping[str, Any]) -> None:
    """The state becomes ``values``: every other key unset, each of them set, through the
    writer (for a :class:`State`, what its ``unset`` and ``set`` do, in bulk)."""
    if type(writer) is State:
        data = writer._data
        log = writer._changes
        log.extend((k, None, True) for k in data if k not in values)
        data.clear()
        data.update(values)
        log.extend((k, v, False) for k, v in values.items())
        return
    for key in [k for k in state if k not in values]:
        writer.unset(key)
    for key, value in values.items():
        writer.set(key, value)


def _suspend(m: MachineCore) -> MachineCore:
    """A machine of ``m``'s workflow holding ``m``'s per-conversation values (made
    without its constructor: only what a frame keeps and a snapshot reads is set)."""
    held: MachineCore = object.__new__(type(m))
    held._workflow = m._workflow
    held._clock = m._clock
    held._trace = None
    held._busy = False
    held._cur = None
    held._live = None
    held._stack = held._route = held._back = held._returned = held._settled = None
    held._composes = True
    held._index = m._index
    held._owns_index = m._owns_index
    held._initial = m._initial
    held._current = m._current
    held._entered_at = m._entered_at
    held._turn = m._turn
    held._turns_in_phase = m._turns_in_phase
    held._visits = m._visits
    held._history = m._history
    return held


def _start(m: MachineCore, workflow: Workflow) -> None:
    """Run ``workflow`` in ``m`` from its initial phase, as a new conversation of it. Its
    ``call`` effects find the host's callables where the caller's did (a host, or a test
    file's mocks, registers them once, for the workflow it runs)."""
    registry = m._index.registry
    m._workflow = workflow
    if registry and registry is not workflow.registry:
        m._index = MachineIndex(workflow.phases, registry={**workflow.registry, **registry},
                                catalogue=workflow.tools, navigation=workflow.navigation,
                                name=workflow.name, description=workflow.description)
        m._owns_index = True
    else:
        m._index = index_for(workflow)
        m._owns_index = False
    m._initial = workflow.initial
    m._current = workflow.initial
    m._entered_at = m._clock()
    m._turns_in_phase = 0
    m._visits = {workflow.initial: 1}
    m._history = None
    m._cur = None


def _fail(m: MachineCore, message: str, turn: int) -> None:
    m._record([ErrorRecord("effect_error", m._current, turn, message, "call")])


def enter(m: MachineCore, call: Call, state: Mapping[str, Any], writer: Writer,
          turn: int) -> bool:
    """Enter ``call`` from the current phase; False (and a trace event) when the callee
    is not linked (a workflow built in code without its library)."""
    assert m._workflow is not None
    callee = m._workflow.library.get(call.workflow)
    if callee is None or callee.initial not in callee.phases:
        _fail(m, f"call {call.workflow!r}: the workflow is not loaded (load the caller "
              "with phaseflow.load_workflow, which loads what it uses)", turn)
        m._back = (m._current, m._visits.get(m._current, 0))
        return False
    saved = dict(state)
    frame = Frame(_suspend(m), saved, call)
    if m._stack is None:
        m._stack = []
    m._stack.append(frame)
    _start(m, callee)
    _replace_state(state, writer, _seed(call.inputs, saved, callee))
    return True


def leave(m: MachineCore, state: Mapping[str, Any], writer: Writer) -> None:
    """Return from the innermost call: the caller's values and state come back, with the
    call's ``returns`` copied in; ``returned`` is the terminal phase it ended in."""
    assert m._stack
    frame = m._stack.pop()
    ended = m._current
    final = dict(state)
    restored = dict(frame.state)
    for mine, theirs in frame.call.returns.items():
        if theirs in final:
            restored[mine] = final[theirs]
    caller = frame.caller
    m._workflow = caller._workflow
    m._index = caller._index
    m._owns_index = caller._owns_index
    m._initial = caller._initial
    m._current = caller._current
    m._entered_at = caller._entered_at
    m._turns_in_phase = caller._turns_in_phase
    m._visits = caller._visits
    m._history = caller._history
    m._cur = None
    if not m._stack:
        m._stack = None
    m._returned = ended
    m._back = (m._current, m._visits.get(m._current, 0))
    _replace_state(state, writer, restored)


def take_handoff(m: MachineCore, handoff: Handoff, state: Mapping[str, Any], writer: Writer,
                 turn: int) -> bool:
    """Hand the conversation to ``handoff``'s workflow: the stack of calls is dropped and
    that workflow starts with a state seeded by the hand-off's ``with``."""
    assert m._workflow is not None
    target = m._workflow.library.get(handoff.workflow)
    if target is None or target.initial not in target.phases:
        _fail(m, f"handoff {handoff.workflow!r}: the workflow is not loaded", turn)
        return False
    seed = _seed(handoff.inputs, state, target)
    outermost = m._stack[0].caller._workflow if m._stack else m._workflow
    # the first entry names the workflow the conversation started in
    route = m._route if m._route is not None else [[outermost.name if outermost else ""]]
    # from the outermost workflow, through the calls, to the workflow handed to
    route.append([f.call.workflow for f in m._stack or ()] + [handoff.workflow])
    m._stack = None
    m._route = route
    _start(m, target)
    m._returned = None
    m._back = None
    _replace_state(state, writer, seed)
    return True


def _auto_handoff(m: MachineCore, state: Mapping[str, Any]) -> tuple[int, Handoff] | None:
    """The current phase's first ``auto`` hand-off whose ``when`` holds, with its number
    in the phase's transitions."""
    info = m._info()
    if info is None or not info.handoffs:
        return None
    ctx = m._ctx()
    for transition in info.handoffs:
        if transition.trigger != "auto" or transition.handoff is None:
            continue
        if transition.when is None or transition.when.evaluate(state, ctx).value:
            return info.phase.transitions.index(transition), transition.handoff
    return None


def model_handoff(m: MachineCore, name: str, state: Mapping[str, Any]) -> Handoff | None:
    """The current phase's ``model`` hand-off to ``name`` whose ``when`` holds, if any."""
    found = model_handoff_edge(m, name, state)
    return None if found is None else found[1]


def model_handoff_edge(m: MachineCore, name: str, state: Mapping[str, Any]
                       ) -> tuple[int, Handoff] | None:
    """:func:`model_handoff` with the transition's number."""
    info = m._info()
    if info is None or not info.handoffs:
        return None
    ctx = m._ctx()
    for transition in info.handoffs:
        handoff = transition.handoff
        if (transition.trigger == "model" and handoff is not None
                and handoff.workflow == name
                and (transition.when is None or transition.when.evaluate(state, ctx).value)):
            return info.phase.transitions.index(transition), handoff
    return None


def settle_steps(m: MachineCore, state: Mapping[str, Any], writer: Writer | None, turn: int
                 ) -> Generator[Plan[Any], Any, None]:
    """Enter, return and hand off until the machine rests (see the module docstring);
    yields each boundary to run (a driver runs it and sends its answer back)."""
    writer = writer_for(state, writer)
    view = state
    for _ in range(MAX_SETTLE):
        info = m._info()
        if info is None:
            return
        phase = info.phase
        call = phase.call
        if call is not None and m._back != (phase.name, m._visits.get(phase.name, 0)):
            if not enter(m, call, view, writer, turn):
                return
            continue
        if phase.terminal and m._stack:
            leave(m, view, writer)
            caller = m._workflow
            answer = yield plan_boundary(m, state, writer, turn, False, "advance")
            if m._settled is not None and answer.transition is not None:
                m._settled.append((caller, answer.transition.record))
            continue
        found = _auto_handoff(m, view)
        if found is not None:
            left, number = m._workflow, found[0]
            if not take_handoff(m, found[1], view, writer, turn):
                return
            if m._settled is not None:  # (a test runner's coverage)
                m._settled.append((left, HistoryRecord(
                    phase.name, m._current, turn, 0.0, GuardTrigger(number), 0.0)))
            continue
        return
    _fail(m, f"more than {MAX_SETTLE} calls, returns and hand-offs in one move: stopped",
          turn)


def path_names(m: MachineCore) -> list[str]:
    """Where the conversation is, outermost first: each workflow and the phase it is in
    (``refund-desk › verify › identity-check › ask``)."""
    names: list[str] = []
    for frame in m._stack or ():
        caller = frame.caller
        workflow = caller._workflow
        names += [workflow.name if workflow is not None else "", caller._current]
    names += [m._workflow.name if m._workflow is not None else "", m._current]
    return names


def snapshot_path(snapshot: Mapping[str, Any]) -> list[str]:
    """:func:`path_names` read from a stored snapshot (a plain-JSON value, never
    trusted): each calling workflow and its phase, then the innermost one's. Entries of
    the wrong shape are left out."""
    names: list[str] = []
    calls = snapshot.get("calls")
    for frame in calls if isinstance(calls, list) else ():
        caller = frame.get("caller") if isinstance(frame, dict) else None
        if isinstance(caller, dict):
            names += [str(caller.get("workflow") or ""), str(caller.get("phase") or "")]
    inner = snapshot.get("inner", snapshot.get("workflow"))
    names += [str(inner or ""), str(snapshot.get("phase") or "")]
    return names


def calls_snapshot(m: MachineCore, snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` (of the innermost workflow's values) with the stack of calls, the
    hand-offs taken and ``returned``, when there are any."""
    # "workflow" names the workflow the conversation started in (the one a store keeps
    # and restores with); "inner" the one whose values the snapshot's fields are
    snapshot["inner"] = snapshot["workflow"]
    if m._route:
        snapshot["workflow"] = m._route[0][0]
    elif m._stack:
        first = m._stack[0].caller._workflow
        snapshot["workflow"] = first.name if first is not None else None
    if m._stack:
        snapshot["calls"] = [{"caller": take_snapshot(f.caller), "state": f.state,
                              **({"mark": f.mark} if f.mark is not None else {})}
                             for f in m._stack]
    if m._route:
        snapshot["route"] = list(m._route)
    if m._returned is not None:
        snapshot["returned"] = m._returned
    if m._back is not None and m._back[0] == m._current:
        snapshot["back"] = m._back[1]
    return snapshot


def restore_calls(cls: type[MachineCore], root: Workflow, data: dict[str, Any],
                  history_limit: int, trace_limit: int,
                  clock: Any) -> MachineCore:
    """A machine where a snapshot with ``calls``/``route``/``returned`` left one:
    the hand-offs followed from ``root``, each call's caller restored, then the innermost
    workflow's values. :class:`SnapshotError` for anything that does not fit."""
    base = {k: v for k, v in data.items() if k not in CALL_KEYS}
    if data.get("workflow") != root.name:
        raise SnapshotError(f"snapshot.workflow: {data.get('workflow')!r} is not workflow "
                            f"{root.name!r}")
    base["workflow"] = data.get("inner", root.name)
    workflow = root
    route = data.get("route", [])
    if type(route) is not list or not all(
            type(c) is list and c and all(type(n) is str for n in c) for c in route):
        raise SnapshotError("snapshot.route: expected lists of workflow names")
    for i, chain in enumerate(route[1:], start=1):
        for name in chain:
            nxt = workflow.library.get(name)
            if nxt is None:
                raise SnapshotError(f"snapshot.route[{i}]: {name!r} is not a workflow that "
                                    f"{workflow.name!r} uses")
            workflow = nxt
    calls = data.get("calls", [])
    if type(calls) is not list:
        raise SnapshotError("snapshot.calls: expected a list")
    frames: list[Frame] = []
    for i, item in enumerate(calls):
        if type(item) is not dict or not {"caller", "state"} <= set(item) <= {
                "caller", "state", "mark"} or type(item["state"]) is not dict or (
                "mark" in item and (type(item["mark"]) is not int or item["mark"] < 0)):
            raise SnapshotError(f"snapshot.calls[{i}]: expected {{caller, state, mark}}")
        held: Any = restore_snapshot(
            cast(Any, cls(workflow.initial, clock=clock, workflow=workflow)), workflow,
            item["caller"], history_limit, trace_limit)
        call = workflow.phases[held._current].call
        callee = workflow.library.get(call.workflow) if call is not None else None
        if call is None or callee is None:
            raise SnapshotError(f"snapshot.calls[{i}]: phase {held._current!r} of "
                                f"{workflow.name!r} calls no loaded workflow")
        frames.append(Frame(held, dict(item["state"]), call, item.get("mark")))
        workflow = callee
    m: Any = restore_snapshot(cast(Any, cls(workflow.initial, clock=clock, workflow=workflow)),
                              workflow, base, history_limit, trace_limit)
    returned = data.get("returned")
    if returned is not None and type(returned) is not str:
        raise SnapshotError("snapshot.returned: expected a phase name")
    back = data.get("back")
    if back is not None and (type(back) is not int or back < 0):
        raise SnapshotError("snapshot.back: expected a visit count")
    m._stack = frames or None
    m._route = [list(c) for c in route] or None
    m._returned = returned
    m._composes = True
    if back is not None:  # the current phase's call is done for this visit
        m._back = (m._current, back)
    restored: MachineCore = m
    return restored


def mark_calls(m: MachineCore, messages: int) -> None:
    """Note ``messages`` (the conversation's length now) as the start of every call
    entered since the last note."""
    for frame in m._stack or ():
        if frame.mark is None:
            frame.mark = messages


def call_scope(m: MachineCore) -> tuple[str, int, str] | None:
    """What the innermost call's requests carry: ``(history mode, mark, workflow name)``,
    ``None`` outside a call or for ``history: full``."""
    if not m._stack:
        return None
    frame = m._stack[-1]
    if frame.call.history == "full" or frame.mark is None:
        return None
    workflow = m._workflow
    return frame.call.history, frame.mark, workflow.name if workflow is not None else ""
