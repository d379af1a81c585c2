"""The compiled workflow: immutable values the machine runs on.

This is the neutral model between the readers (YAML today) and the engine, in the manner
of python-statemachine's readers -> model -> builder layering. Every value is frozen and
shareable between conversations and threads. The same classes are the public API for hosts
that build a machine in code, so guards and templates may be given as source text and are
compiled on construction (a bad one raises :class:`~phaseflow.errors.ConfigError`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from phaseflow.errors import ConfigError
from phaseflow.expr import Guard, GuardCompileError, compile_guard
from phaseflow.expr.jsonvalue import check_json_object
from phaseflow.expr.time_terms import time_moments
from phaseflow.spec.durations import parse_duration, timed_guard
from phaseflow.spec.frozenjson import freeze, thaw
from phaseflow.template import (
    NAVIGATION_NAMES,
    Template,
    TemplateCompileError,
    compile_template,
)

if TYPE_CHECKING:
    from phaseflow.machine import PhaseMachine
    from phaseflow.spec.diagnostics import Diagnostic

StateType = Literal["string", "number", "integer", "boolean", "array", "object", "any"]
Approval = Literal["never", "always"]
Trigger = Literal["auto", "model"]
#: What a called workflow's model requests carry of the conversation (docs/format.md).
HistoryMode = Literal["full", "since_call", "summary"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Position:
    """Where a value was written: file, 1-based line and column."""

    path: str
    line: int
    column: int


def _guard(value: Guard | str | None) -> Guard | None:
    if value is None or isinstance(value, Guard):
        return value
    try:
        return compile_guard(value)
    except GuardCompileError as exc:
        raise ConfigError(f"guard {value!r}: {exc.message}") from None


def _template(value: Template | str | None, names: frozenset[str] | None = None) -> Template | None:
    if value is None or isinstance(value, Template):
        return value
    try:
        return compile_template(value) if names is None else compile_template(value, names)
    except TemplateCompileError as exc:
        raise ConfigError(f"template: {exc.message}") from None


def _frozen(values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(copy.deepcopy(dict(values))) if values else _EMPTY


@dataclass(frozen=True, slots=True)
class StateKey:
    """A declared state key: ``{type, description, default}``."""

    name: str
    type: StateType = "any"
    description: str | None = None
    has_default: bool = False
    default: Any = None
    position: Position | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Tool:
    """A catalogue entry: what the tool may write and whether every call needs approval.

    ``parameters`` is the JSON Schema (draft 2020-12, an ``object`` schema) of its
    arguments, for hosts that do not derive it from the Python callable. It is deeply
    immutable (read-only mappings, tuples for lists), since the workflow is shared;
    :meth:`parameters_json` gives a plain copy. ``timeout`` is seconds per call;
    ``idempotent`` says a call may safely run again with the same idempotency key (a
    session that crashed while it ran re-runs it instead of reporting its outcome as
    unknown). ``read_only`` says a call changes nothing outside the conversation (a
    lookup): it is the only kind of tool that runs in plan mode.
    """

    name: str
    description: str | None = None
    writes: tuple[str, ...] = ()
    approval: Approval = "never"
    position: Position | None = field(default=None, compare=False)
    parameters: Mapping[str, Any] | None = None
    timeout: float | None = None
    idempotent: bool = False
    read_only: bool = False

    def __post_init__(self) -> None:
        # Built in code, a tool is frozen and its values are type-checked; whether
        # ``parameters`` is a valid JSON Schema is checked when a workflow file is
        # validated (PF103), as the other file checks are.
        setter = object.__setattr__
        if self.parameters is not None:
            if not isinstance(self.parameters, Mapping):
                raise ConfigError(
                    f"tool {self.name!r}: parameters must be a JSON Schema mapping, "
                    f"not {type(self.parameters).__name__}"
                )
            setter(self, "parameters", freeze(self.parameters))
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigError(
                f"tool {self.name!r}: timeout must be a positive number of seconds, "
                f"not {timeout!r}"
            )
        if not isinstance(self.idempotent, bool):
            raise ConfigError(f"tool {self.name!r}: idempotent must be true or false")
        if not isinstance(self.read_only, bool):
            raise ConfigError(f"tool {self.name!r}: read_only must be true or false")

    def parameters_json(self) -> dict[str, Any] | None:
        """``parameters`` as a fresh plain ``dict`` (lists as ``list``), for a provider's
        tool schema or ``json.dumps``; ``None`` when the tool has none."""
        if self.parameters is None:
            return None
        plain: dict[str, Any] = thaw(self.parameters)
        return plain


@dataclass(frozen=True, slots=True)
class SetEffect:
    """Put literal values into the state."""

    values: Mapping[str, Any]
    position: Position | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        checked = check_json_object(self.values)  # the state is JSON (a tuple: a list)
        if checked.problem is not None:
            raise ConfigError(f"set effect: {checked.problem}")
        object.__setattr__(self, "values", MappingProxyType(checked.value) or _EMPTY)


@dataclass(frozen=True, slots=True)
class UnsetEffect:
    """Remove keys from the state."""

    keys: tuple[str, ...]
    position: Position | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))


@dataclass(frozen=True, slots=True)
class CallEffect:
    """Call a host callable registered under ``name`` with ``args``; a mapping it returns
    is merged into the state. ``produces`` (``None``: not declared) names the keys the
    callable may return: a key outside it, or a value that does not fit its key's declared
    type, is not written (an error record says why). ``transcript``: how many of the
    conversation's last messages the callable receives (``None``: the default,
    :data:`DEFAULT_TRANSCRIPT`; 0: none)."""

    name: str
    args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    position: Position | None = field(default=None, compare=False)
    produces: tuple[str, ...] | None = None
    transcript: int | None = None

    @property
    def transcript_window(self) -> int:
        """The messages it receives: its own ``transcript``, else the default."""
        return DEFAULT_TRANSCRIPT if self.transcript is None else self.transcript

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", _frozen(self.args))
        if self.produces is not None:
            object.__setattr__(self, "produces", tuple(self.produces))


Effect = SetEffect | UnsetEffect | CallEffect

#: how many of the conversation's last messages a ``call`` effect or preparation receives
#: (``ctx.transcript``) when it does not say (``transcript: N``)
DEFAULT_TRANSCRIPT = 6


@dataclass(frozen=True, slots=True)
class Preparation:
    """One step that fetches what a phase ``requires`` before it can be entered."""

    name: str
    effect: Effect
    produces: tuple[str, ...] = ()
    position: Position | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "produces", tuple(self.produces))


@dataclass(frozen=True, slots=True)
class Input:
    """One value that crosses into another workflow (a call's or a hand-off's ``with``):
    the caller's state key ``key`` (written ``state.KEY``; absent stays absent), or, when
    ``key`` is ``None``, the literal ``value``."""

    key: str | None
    value: Any = None

    def resolve(self, state: Mapping[str, Any]) -> tuple[bool, Any]:
        """``(present, value)`` read from the caller's ``state``."""
        value = self.value if self.key is None else state.get(self.key, _ABSENT)
        if value is _ABSENT:
            return False, None
        return True, value if type(value) in _SCALARS else copy.deepcopy(value)


_ABSENT = object()
_SCALARS = frozenset({str, int, float, bool, type(None)})

#: ``state.KEY`` in a ``with``: a reference to the caller's key, not a literal string.
STATE_REFERENCE = "state."


def parse_input(value: Any) -> Input:
    """A ``with`` value as written: ``state.KEY`` is a reference, anything else a literal."""
    if isinstance(value, str) and value.startswith(STATE_REFERENCE):
        return Input(value[len(STATE_REFERENCE):].strip())
    return Input(None, value)


def _inputs(values: Mapping[str, Input | Any] | None) -> Mapping[str, Input]:
    if not values:
        return _EMPTY
    return MappingProxyType({k: v if isinstance(v, Input) else parse_input(v)
                             for k, v in values.items()})


@dataclass(frozen=True, slots=True)
class Call:
    """A phase's call of another workflow (``call:``, ``with:``, ``returns:``,
    ``history:``): entering the phase enters ``workflow``'s initial phase with a state
    of its own seeded by ``inputs``; its terminal phase returns here, copying ``returns``
    (caller key -> callee key) back and setting ``returned``."""

    workflow: str
    inputs: Mapping[str, Input] = field(default_factory=lambda: _EMPTY)
    returns: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    history: HistoryMode = "full"
    position: Position | None = field(default=None, compare=False)
    #: where each input's key and each output's caller key was written (for the checks)
    input_positions: Mapping[str, Position] = field(default_factory=lambda: _EMPTY,
                                                    compare=False, repr=False)
    return_positions: Mapping[str, Position] = field(default_factory=lambda: _EMPTY,
                                                     compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.history not in ("full", "since_call", "summary"):
            raise ConfigError(f"call {self.workflow!r}: history must be full, since_call or "
                              f"summary, not {self.history!r}")
        object.__setattr__(self, "inputs", _inputs(self.inputs))
        object.__setattr__(self, "returns", MappingProxyType(dict(self.returns)) or _EMPTY)


@dataclass(frozen=True, slots=True)
class Handoff:
    """A transition's hand-off (``handoff:``, ``with:``): the conversation goes on in
    ``workflow`` for good, its state seeded by ``inputs``."""

    workflow: str
    inputs: Mapping[str, Input] = field(default_factory=lambda: _EMPTY)
    position: Position | None = field(default=None, compare=False)
    input_positions: Mapping[str, Position] = field(default_factory=lambda: _EMPTY,
                                                    compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", _inputs(self.inputs))


@dataclass(frozen=True, slots=True)
class Transition:
    """A guarded edge. ``when`` may be given as source text; ``None`` means always."""

    to: str
    when: Guard | None = None
    description: str | None = None
    trigger: Trigger = "auto"
    position: Position | None = field(default=None, compare=False)
    #: a hand-off to another workflow (``to`` is then ``""``), or ``None``
    handoff: Handoff | None = None
    #: ``after``: seconds in the phase before the transition can hold (a timer: the
    #: session fires it with no user message); ``when`` already includes it.
    after: float | None = None
    #: the moments (seconds in the phase, ascending) at which an ``auto`` transition's
    #: guard can first become true by time alone - its ``after``, and what its
    #: ``seconds_in_phase`` terms say (phaseflow.expr.time_terms): the session's timers
    timers: tuple[float, ...] = field(default=(), compare=False)

    def __init__(
        self,
        to: str,
        when: Guard | str | None = None,
        description: str | None = None,
        trigger: Trigger = "auto",
        position: Position | None = None,
        handoff: Handoff | None = None,
        after: float | str | None = None,
    ) -> None:
        if trigger not in ("auto", "model"):
            raise ConfigError(f"transition to {to!r}: trigger must be 'auto' or 'model'")
        guard = _guard(when)
        seconds: float | None = None
        if after is not None:
            parsed = parse_duration(after)
            if isinstance(parsed, str):
                raise ConfigError(f"transition to {to!r}: {parsed}")
            seconds = parsed
            guard = timed_guard(guard, seconds)
        object.__setattr__(self, "to", to)
        object.__setattr__(self, "when", guard)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "trigger", trigger)
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "handoff", handoff)
        object.__setattr__(self, "after", seconds)
        object.__setattr__(self, "timers", transition_timers(guard, trigger))


def transition_timers(when: Guard | None, trigger: str) -> tuple[float, ...]:
    """The moments an ``auto`` transition's guard ``when`` can first become true by
    time alone (none for a ``model`` one: the model's move is checked when it is made)."""
    if when is None or trigger != "auto":
        return ()
    return time_moments(when.source).moments


def _names(values: Iterable[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str):
        raise ConfigError(f"expected a list of names, got the string {values!r}")
    return tuple(values)


#: the model role of a workflow and phase that name none
DEFAULT_ROLE = "default"


@dataclass(frozen=True, slots=True)
class ReplyShape:
    """A phase's structured reply (``reply:``, docs/format.md "Structured replies"): the
    JSON Schema its final reply must match, and ``record``: state key -> the reply's
    top-level property whose value is recorded into it."""

    schema: Mapping[str, Any]
    record: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    position: Position | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # shared by every conversation and thread: read-only all the way down
        object.__setattr__(self, "schema", freeze(self.schema))
        object.__setattr__(self, "record", MappingProxyType(dict(self.record)))

    def schema_json(self) -> dict[str, Any]:
        """A fresh plain copy of ``schema`` (for a request, or a validator)."""
        plain: dict[str, Any] = thaw(self.schema)
        return plain


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a workflow (see docs/format.md, "Phases")."""

    name: str
    goal: str = ""
    instructions: Template | None = None
    needs: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    guard: Guard | None = None
    prepare: tuple[Preparation, ...] = ()
    on_enter: tuple[Effect, ...] = ()
    on_exit: tuple[Effect, ...] = ()
    tools: tuple[str, ...] | None = None
    clear_on_enter: tuple[str, ...] = ()
    terminal: bool = False
    transitions: tuple[Transition, ...] = ()
    position: Position | None = field(default=None, compare=False)
    #: keys the model itself may fill from the conversation here (the ``record`` tool)
    collect: tuple[str, ...] = ()
    #: the workflow this phase calls (``call:``), or ``None``
    call: Call | None = None
    #: the model role this phase runs on (None: the workflow's ``model``)
    model: str | None = None
    #: the shape of the model's final reply here (None: free text)
    reply: ReplyShape | None = None
    #: where ``model`` is written (for the ``validate --models`` diagnostic)
    model_position: Position | None = field(default=None, compare=False)

    def __init__(
        self,
        name: str,
        goal: str = "",
        instructions: Template | str | None = None,
        needs: Iterable[str] = (),
        requires: Iterable[str] = (),
        guard: Guard | str | None = None,
        prepare: Iterable[Preparation] = (),
        on_enter: Iterable[Effect] = (),
        on_exit: Iterable[Effect] = (),
        tools: Iterable[str] | None = None,
        clear_on_enter: Iterable[str] = (),
        terminal: bool = False,
        transitions: Iterable[Transition] = (),
        position: Position | None = None,
        collect: Iterable[str] = (),
        call: Call | None = None,
        model: str | None = None,
        reply: ReplyShape | None = None,
        model_position: Position | None = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "name", name)
        setter(self, "goal", goal)
        setter(self, "instructions", _template(instructions))
        setter(self, "needs", _names(needs) or ())
        setter(self, "requires", _names(requires) or ())
        setter(self, "guard", _guard(guard))
        setter(self, "prepare", tuple(prepare))
        setter(self, "on_enter", tuple(on_enter))
        setter(self, "on_exit", tuple(on_exit))
        setter(self, "tools", _names(tools))
        setter(self, "clear_on_enter", _names(clear_on_enter) or ())
        setter(self, "terminal", bool(terminal))
        setter(self, "transitions", tuple(transitions))
        setter(self, "position", position)
        setter(self, "collect", _names(collect) or ())
        setter(self, "call", call)
        setter(self, "model", model)
        setter(self, "reply", reply)
        setter(self, "model_position", model_position)


_new = object.__new__
_set = object.__setattr__


def _compiled_position(path: str, line: int, column: int) -> Position:
    """A :class:`Position`, as its constructor makes it, a little cheaper (the file
    compiler makes one per phase and per transition)."""
    position: Position = _new(Position)
    put = _set
    put(position, "path", path)
    put(position, "line", line)
    put(position, "column", column)
    return position


def _compiled_transition(
    to: str,
    when: Guard | None,
    description: str | None,
    trigger: Trigger,
    position: Position,
    after: float | None = None,
) -> Transition:
    """A :class:`Transition` from values the file compiler already built and checked (a
    compiled guard, ``auto`` or ``model``): the same value the constructor makes, without
    its checks and conversions, which are for hosts building in code. A large file has
    tens of thousands of transitions."""
    transition: Transition = _new(Transition)
    put = _set  # (a local: one lookup, not one per field)
    put(transition, "to", to)
    put(transition, "when", when)
    put(transition, "description", description)
    put(transition, "trigger", trigger)
    put(transition, "position", position)
    put(transition, "handoff", None)
    put(transition, "after", after)
    put(transition, "timers", transition_timers(when, trigger))
    return transition


def _compiled_phase(
    name: str,
    goal: str,
    instructions: Template | None,
    needs: tuple[str, ...],
    requires: tuple[str, ...],
    guard: Guard | None,
    prepare: tuple[Preparation, ...],
    on_enter: tuple[Effect, ...],
    on_exit: tuple[Effect, ...],
    tools: tuple[str, ...] | None,
    clear_on_enter: tuple[str, ...],
    terminal: bool,
    transitions: tuple[Transition, ...],
    position: Position,
    collect: tuple[str, ...],
    call: Call | None = None,
    *,
    model: str | None = None,
    reply: ReplyShape | None = None,
    model_position: Position | None = None,
) -> Phase:
    """A :class:`Phase` from values the file compiler already built (tuples, a compiled
    guard and template, a bool), as :func:`_compiled_transition` is for a transition: the
    constructor's conversions and checks would only copy them again."""
    phase: Phase = _new(Phase)
    put = _set
    put(phase, "name", name)
    put(phase, "goal", goal)
    put(phase, "instructions", instructions)
    put(phase, "needs", needs)
    put(phase, "requires", requires)
    put(phase, "guard", guard)
    put(phase, "prepare", prepare)
    put(phase, "on_enter", on_enter)
    put(phase, "on_exit", on_exit)
    put(phase, "tools", tools)
    put(phase, "clear_on_enter", clear_on_enter)
    put(phase, "terminal", terminal)
    put(phase, "transitions", transitions)
    put(phase, "position", position)
    put(phase, "collect", collect)
    put(phase, "call", call)
    put(phase, "model", model)
    put(phase, "reply", reply)
    put(phase, "model_position", model_position)
    return phase


@dataclass(frozen=True, slots=True)
class Navigation:
    """How the navigation block is rendered: how many earlier phases, and an optional
    template that replaces the default block."""

    history: int = 3
    template: Template | None = None

    def __init__(self, history: int = 3, template: Template | str | None = None) -> None:
        object.__setattr__(self, "history", history)
        object.__setattr__(self, "template", _template(template, NAVIGATION_NAMES))


#: A host callable for ``call`` effects: ``fn(context, **with_args)``, sync or async.
Callable_ = Callable[..., Any]


class MachineFactory(Protocol):
    """Makes a per-conversation machine for a workflow (``PhaseMachine.from_workflow``).

    The compiled model sits below the machine and never imports it: whoever assembles a
    workflow (``phaseflow.load_workflow``, or a host building one in code) hands it the
    factory, in the manner of python-statemachine's builder asking a protocol for runtime
    concerns.
    """

    def __call__(
        self, workflow: Workflow, clock: Callable[[], float] | None = None
    ) -> PhaseMachine: ...


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Workflow:
    """A compiled, validated workflow: immutable and shared by every conversation."""

    name: str
    initial: str
    phases: Mapping[str, Phase]
    description: str | None = None
    state: Mapping[str, StateKey] = field(default_factory=lambda: _EMPTY)
    tools: Mapping[str, Tool] | None = None
    navigation: Navigation = field(default_factory=Navigation)
    registry: Mapping[str, Callable_] = field(default_factory=lambda: _EMPTY)
    path: str | None = None
    warnings: tuple[Diagnostic, ...] = ()
    machine_factory: MachineFactory | None = field(default=None, compare=False, repr=False)
    #: the workflows this one calls or hands off to, by the name it gives them: the path
    #: written in ``uses:`` (relative to this file)
    uses: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    #: the compiled workflows ``uses`` names, by name (filled by the loader of a tree of
    #: files, :mod:`phaseflow.spec.tree`; shared, not copied: hand-offs may form cycles)
    library: Mapping[str, Workflow] = field(default_factory=lambda: _EMPTY, compare=False,
                                            repr=False)
    #: where each ``uses`` entry's path was written
    use_positions: Mapping[str, Position] = field(default_factory=lambda: _EMPTY,
                                                  compare=False, repr=False)
    #: the shared files ``imports:`` names (paths relative to this file), with positions
    imports: tuple[tuple[str, Position], ...] = field(default=(), compare=False)

    #: the model role of every phase that names none (None: ``default``)
    model: str | None = None
    model_position: Position | None = field(default=None, compare=False)

    def model_roles(self) -> dict[str, Position | None]:
        """Every model role the workflow names (its own ``model`` and its phases'), each
        with where it is first written; ``default`` when a phase names none."""
        roles: dict[str, Position | None] = {}
        for phase in self.phases.values():
            if phase.model is not None:
                roles.setdefault(phase.model, phase.model_position)
            elif self.model is not None:
                roles.setdefault(self.model, self.model_position)
            else:
                roles.setdefault(DEFAULT_ROLE, None)
        return roles

    def role_of(self, phase: str) -> str:
        """The model role ``phase`` runs on."""
        found = self.phases.get(phase)
        role = found.model if found is not None else None
        return role or self.model or DEFAULT_ROLE

    def __post_init__(self) -> None:
        setter = object.__setattr__
        setter(self, "phases", MappingProxyType(dict(self.phases)))
        setter(self, "state", MappingProxyType(dict(self.state)))
        if self.tools is not None:
            setter(self, "tools", MappingProxyType(dict(self.tools)))
        setter(self, "registry", MappingProxyType(dict(self.registry)))
        if self.uses:
            setter(self, "uses", MappingProxyType(dict(self.uses)))

    def used(self) -> tuple[Workflow, ...]:
        """Every workflow this one calls or hands off to, at any depth, each once (the
        loaded ones: ``library``)."""
        found: dict[int, Workflow] = {id(self): self}
        todo = list(self.library.values())
        while todo:
            nxt = todo.pop()
            if id(nxt) not in found:
                found[id(nxt)] = nxt
                todo.extend(nxt.library.values())
        return tuple(w for w in found.values() if w is not self)

    @property
    def composes(self) -> bool:
        """Does this workflow call or hand off to another (``uses:``)?"""
        return bool(self.uses)

    def defaults(self) -> dict[str, Any]:
        """A fresh copy of every declared default: the state a session starts with."""
        return {k: copy.deepcopy(s.default) for k, s in self.state.items() if s.has_default}

    def machine(self, clock: Callable[[], float] | None = None) -> PhaseMachine:
        """A new per-conversation machine at ``initial`` (cheap: the workflow is shared).

        Needs the ``machine_factory`` the workflow was assembled with: every workflow from
        ``phaseflow.load_workflow`` has one; one built in code gets it as
        ``Workflow(..., machine_factory=PhaseMachine.from_workflow)``, or is run with
        ``PhaseMachine.from_workflow(workflow)``.
        """
        factory = self.machine_factory
        if factory is None:
            raise ConfigError(
                f"workflow {self.name!r} was built without a machine factory: use "
                "phaseflow.load_workflow, pass machine_factory=PhaseMachine.from_workflow, "
                "or call PhaseMachine.from_workflow(workflow)"
            )
        return factory(self, clock)


def tree_catalogue(workflow: Workflow) -> Mapping[str, Tool] | None:
    """The tool catalogue of the whole tree of workflows ``workflow`` calls or hands off
    to (its own entries first, then each used workflow's new ones): what a session of it
    may ever offer and run. ``None`` when no workflow of the tree declares a catalogue
    (then every host tool is one). A flat workflow's own catalogue, unchanged."""
    used = workflow.used() if workflow.library else ()
    if not used:
        return workflow.tools
    catalogues = [w.tools for w in (workflow, *used) if w.tools is not None]
    if not catalogues:
        return None
    merged: dict[str, Tool] = {}
    for catalogue in catalogues:
        for name, entry in catalogue.items():
            merged.setdefault(name, entry)
    return merged


def tree_phases(workflow: Workflow) -> tuple[Phase, ...]:
    """Every phase of the tree of workflows ``workflow`` uses, its own first: where the
    hooks a session may run are named."""
    used = workflow.used() if workflow.library else ()
    return tuple(p for w in (workflow, *used) for p in w.phases.values())
