"""Per-workflow lookups, computed once and shared by every machine of that workflow.

A machine must be cheap to make (one per conversation) even for a workflow of a thousand
phases, so nothing here is computed per machine and nothing is computed eagerly: the
index of a workflow is created on the first machine and each phase's entry is filled in
the first time a machine needs it. Entries are immutable, so concurrent fills are
harmless (the last identical write wins).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from phaseflow.expr import Guard
from phaseflow.machine.effects import SET, Op, compile_effect, compile_effects
from phaseflow.machine.results import GuardTrigger
from phaseflow.spec.edges import decided_by_when
from phaseflow.spec.model import Navigation, Phase, Position, Tool, Transition, Workflow

__all__ = [
    "AutoEdge", "MachineIndex", "ModelEdge", "PhaseInfo", "PlainWrite", "Prep", "index_for",
]

_GLOB = frozenset("*?[")

@dataclass(frozen=True, slots=True)
class AutoEdge:
    """An ``auto`` transition of a phase, with what a boundary needs to take it.

    (This and :class:`Plain` are slotted classes, not named tuples, because a boundary
    reads their fields: a slot is read by a specialised instruction, a named tuple's field
    through its descriptor, the generic attribute lookup.)"""

    #: the transition's number in the phase's list (0-based, in the order written; a
    #: tuple's ``index`` is a method, hence the name)
    number: int
    when: Guard | None
    #: the target's name
    to: str
    #: the trigger a boundary records when it takes this edge
    trigger: GuardTrigger
    #: the target phase, ``None`` when there is no such phase
    target: Phase | None
    #: ``phaseflow.spec.edges.decided_by_when(target)``: only ``when`` decides this edge
    by_when: bool


class ModelEdge(NamedTuple):
    """A ``model`` transition of a phase (taken only when the model asks for it)."""

    number: int
    when: Guard | None
    to: str
    target: Phase | None


class PlainWrite(NamedTuple):
    """One write of an effect list made only of scalar ``set``s (run inline)."""

    key: str
    value: Any
    label: str
    position: Position | None


@dataclass(frozen=True, slots=True)
class Plain:
    """An effect list made only of scalar ``set``s, flattened: its ``writes`` in order;
    for a :class:`~phaseflow.machine.state.State` writer, the same as the final ``values``
    of its keys and the entries of its change ``log`` (what ``State.set`` appends), so
    that the machine writes the list with two calls and no Python frame."""

    writes: tuple[PlainWrite, ...]
    #: a dict (``dict.update`` is fastest from one), shared: never changed
    values: dict[str, Any]
    log: tuple[tuple[str, Any, bool], ...]


class Prep(NamedTuple):
    """A compiled preparation."""

    name: str
    op: Op
    produces: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PhaseInfo:
    """Everything the hot path needs about one phase, precomputed."""

    phase: Phase
    auto: tuple[AutoEdge, ...]
    model: tuple[ModelEdge, ...]
    exit_ops: tuple[Op, ...]
    exit_plain: Plain | None
    enter_ops: tuple[Op, ...]
    enter_plain: Plain | None
    prepare: tuple[Prep, ...]
    tools: tuple[str, ...] | None
    tool_set: frozenset[str] | None
    tool_patterns: tuple[str, ...]
    #: the phase's hand-off transitions (``handoff:``), in the order written
    handoffs: tuple[Transition, ...] = ()


def expand_tools(
    names: tuple[str, ...] | None, catalogue: Mapping[str, Tool] | None
) -> tuple[str, ...] | None:
    """A phase's ``tools`` with glob patterns expanded against ``catalogue`` (``fnmatch``,
    case-sensitive, catalogue order, duplicates dropped). Without a catalogue a pattern is
    kept as written: the host's registry is the only one who can expand it."""
    if names is None:
        return None
    seen: dict[str, None] = {}
    for name in names:
        if catalogue is not None and not _GLOB.isdisjoint(name):
            for tool in catalogue:
                if fnmatchcase(tool, name):
                    seen.setdefault(tool)
        else:
            seen.setdefault(name)
    return tuple(seen)


def _plain(ops: tuple[Op, ...]) -> Plain | None:
    """The flat list of writes when every op is a ``set`` of scalars (the common case,
    run inline by the machine), else ``None``."""
    writes: list[PlainWrite] = []
    for op in ops:
        if op.kind != SET:
            return None
        for item in op.payload:
            if item.needs_copy:
                return None
            writes.append(PlainWrite(item.key, item.value, op.label, op.position))
    return Plain(tuple(writes), {w.key: w.value for w in writes},
                 tuple((w.key, w.value, False) for w in writes))


class MachineIndex:
    """The shared, lazily filled lookups of one set of phases (a workflow's, or the
    phases a host added to a machine built in code)."""

    __slots__ = (
        "__weakref__",
        "catalogue",
        "description",
        "entries",
        "name",
        "navigation",
        "phases",
        "registry",
        "state_types",
    )

    def __init__(
        self,
        phases: Mapping[str, Phase],
        *,
        registry: Mapping[str, Callable[..., Any]] | None = None,
        catalogue: Mapping[str, Tool] | None = None,
        navigation: Navigation | None = None,
        name: str = "",
        description: str | None = None,
        state_types: Mapping[str, str] | None = None,
    ) -> None:
        self.phases = phases
        #: each declared state key's type: what a ``call`` effect that declares
        #: ``produces`` may write there
        self.state_types: Mapping[str, str] = state_types if state_types is not None else {}
        self.registry: Mapping[str, Callable[..., Any]] = registry if registry is not None else {}
        self.catalogue = catalogue
        self.navigation = navigation if navigation is not None else Navigation()
        self.name = name
        self.description = description
        #: the entries filled so far, by phase name (read it with ``.get`` on a hot path and
        #: fall back to :meth:`info`, which fills it)
        self.entries: dict[str, PhaseInfo] = {}

    def info(self, name: str) -> PhaseInfo | None:
        """The precomputed entry of phase ``name``, or ``None`` if there is no such phase."""
        try:
            return self.entries[name]
        except KeyError:
            phase = self.phases.get(name)
            if phase is None:
                return None
            info = self.entries[name] = self._compile(phase)
            return info

    def forget(self) -> None:
        """Drop every entry (a phase was replaced: entries refer to their targets)."""
        self.entries.clear()

    def _compile(self, phase: Phase) -> PhaseInfo:
        registry = self.registry
        auto: list[AutoEdge] = []
        model: list[ModelEdge] = []
        phases = self.phases
        handoffs: list[Transition] = []
        for i, t in enumerate(phase.transitions):
            if t.handoff is not None:  # offered by the workflow's name, taken by machine/calls
                handoffs.append(t)
                if t.trigger == "model":
                    model.append(ModelEdge(i, t.when, t.handoff.workflow, None))
            elif t.trigger == "model":
                model.append(ModelEdge(i, t.when, t.to, phases.get(t.to)))
            else:
                target = phases.get(t.to)
                auto.append(AutoEdge(i, t.when, t.to, GuardTrigger(i), target,
                                     decided_by_when(target)))
        exit_ops = compile_effects(phase.on_exit, "on_exit", registry, self.state_types)
        enter_ops = compile_effects(phase.on_enter, "on_enter", registry, self.state_types)
        prepare = tuple(
            Prep(p.name, compile_effect(p.effect, f"prepare: {p.name}", registry), p.produces)
            for p in phase.prepare
        )
        tools = expand_tools(phase.tools, self.catalogue)
        patterns: tuple[str, ...] = ()
        if tools is not None and self.catalogue is None:
            patterns = tuple(t for t in tools if not _GLOB.isdisjoint(t))
        return PhaseInfo(
            phase=phase,
            auto=tuple(auto),
            model=tuple(model),
            exit_ops=exit_ops,
            exit_plain=_plain(exit_ops),
            enter_ops=enter_ops,
            enter_plain=_plain(enter_ops),
            prepare=prepare,
            tools=tools,
            tool_set=frozenset(tools) if tools is not None else None,
            tool_patterns=patterns,
            handoffs=tuple(handoffs),
        )


# A workflow's index lives as long as the workflow (``Workflow`` has a weakref slot).
_BY_WORKFLOW: weakref.WeakKeyDictionary[Workflow, MachineIndex] = weakref.WeakKeyDictionary()


def _build(workflow: Workflow) -> MachineIndex:
    return MachineIndex(
        workflow.phases,
        registry=workflow.registry,
        catalogue=workflow.tools,
        navigation=workflow.navigation,
        name=workflow.name,
        description=workflow.description,
        state_types=state_types(workflow),
    )


def state_types(workflow: Workflow) -> dict[str, str]:
    """Each declared state key of ``workflow`` and its type."""
    return {name: key.type for name, key in workflow.state.items()}


def index_for(workflow: Workflow) -> MachineIndex:
    """The shared index of ``workflow`` (created on first use; O(1))."""
    try:
        return _BY_WORKFLOW[workflow]
    except KeyError:
        index = _BY_WORKFLOW[workflow] = _build(workflow)
        return index
