"""The navigation block: what the model is told about where it is and where it can go.

Built in two steps so that the default text and a workflow's ``navigation.template`` say
the same thing: :func:`facts` collects structured facts from a :class:`Whereabouts` (what
the machine hands over: this module never imports the machine) and the state, and
:func:`format_block` (or the template) turns them into text. Both are pure. What each
transition waits for is read from :func:`phaseflow.spec.edges.check_edge`, the rule the
machine moves by.

Rules where the spec leaves a choice (also in docs/embedding.md):

* a transition whose ``when`` is *true* and whose target can be entered is ``ready``: an
  ``auto`` one shows ``(ready)`` (it will be taken at the end of the turn), a ``model``
  one ``(you may ask for this)``;
* a transition whose ``when`` is false shows ``(waiting for: k1, k2)``, the absent keys
  its ``when`` reads, or ``(when: <condition>)`` when none is absent. A key the condition
  only tests for absence (``state.x == null``, ``state.x is None``, ``not state.x``) is not
  waited for: its absence is what the condition asks for, and setting it cannot help
  (see ``Guard.absence_tested``). A transition with no
  ``description`` always shows ``(when: <condition>)`` instead: the condition is the only
  thing that tells the model what it is about (this is the spec's example block, where
  ``escalate (when: state.amount > 500)`` appears while ``amount`` is absent). A condition
  that holds although a key it mentions is absent is not waiting for anything;
* when the ``when`` holds but the target cannot be entered yet, the target's absent
  required keys (or entry guard keys) are what it waits for, or its false entry guard is
  shown as ``(when: <guard>)``;
* a ``model`` transition that is not ready says ``then you may ask for this``;
* a phase whose tool list is empty shows ``Tools: none``;
* the current phase's ``collect`` keys that are still absent follow ``Still needed`` on
  one line, ``You may record: k1, k2`` (in the order written), and are a template's
  ``collect``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phaseflow.expr import Guard, GuardContext
from phaseflow.machine.results import HistoryRecord
from phaseflow.spec.edges import check_edge
from phaseflow.spec.model import Navigation, Phase, Transition

__all__ = ["PhaseName", "Whereabouts", "describe", "facts", "format_block"]

#: what the navigation block (and the system text of a last request) says in a
#: terminal phase
FINAL_PHASE_NOTE = "This is the final phase."


@dataclass(frozen=True, slots=True)
class Whereabouts:
    """Where a conversation is, as the navigation block needs it. The machine hands one
    over (``PhaseMachine.whereabouts()``); this module never imports the machine."""

    #: the current phase's name, and the phase (``None`` if no such phase is registered)
    current: str
    phase: Phase | None
    #: every registered phase, by name (to look up transition targets)
    phases: Mapping[str, Phase]
    history: tuple[HistoryRecord, ...]
    #: the allowed tools, ``None`` when every tool is allowed
    tools: tuple[str, ...] | None
    #: what guards see now
    context: GuardContext
    turn: int
    navigation: Navigation
    workflow_name: str
    workflow_description: str | None


class PhaseName(str):
    """The current phase's name that also answers ``.name`` and ``.goal``, so that a
    navigation template can write ``{{ phase }}`` or ``{{ phase.name }}`` alike (an
    instructions template gets ``phase`` as ``{name, goal}``)."""

    name: str
    goal: str

    def __new__(cls, name: str, goal: str) -> PhaseName:
        self = super().__new__(cls, name)
        self.name = name
        self.goal = goal
        return self


def _absent(state: Mapping[str, Any], key: str) -> bool:
    return state.get(key) is None


def _waiting_for(guard: Guard, state: Mapping[str, Any]) -> list[str]:
    """The absent keys a false guard reads that setting could help: all of them except
    those it only tests for absence."""
    absent = [k for k in guard.reads if _absent(state, k)]
    if not absent:
        return []
    skip = guard.absence_tested
    return sorted(k for k in absent if k not in skip)


def _next_item(
    t: Transition, phases: Mapping[str, Phase], state: Mapping[str, Any], ctx: GuardContext
) -> dict[str, Any]:
    """One entry of ``next``, from :func:`~phaseflow.spec.edges.check_edge`. ``blocked_by``
    says what stops it: ``"when"`` (its condition is false), ``"guard"`` (the target's entry
    guard is false), ``"requires"`` (the target's required keys are absent), ``"target"``
    (no such phase) or ``None`` (ready). ``unmet`` is the source of the false condition, if
    one is."""
    target = phases.get(t.to)
    status = check_edge(t.when, target, state, ctx)
    blocked_by = status.stopped_by
    waiting: list[str] = []
    unmet: str | None = None
    if blocked_by == "when" and t.when is not None:
        unmet = t.when.source
        waiting = _waiting_for(t.when, state)
    elif blocked_by == "guard" and target is not None and target.guard is not None:
        unmet = target.guard.source
        waiting = _waiting_for(target.guard, state)
    elif blocked_by == "requires":
        waiting = list(status.missing)
    return {
        "target": t.to,
        "description": t.description,
        "trigger": t.trigger,
        "ready": blocked_by is None,
        "waiting_for": waiting,
        "condition": t.when.source if t.when is not None else None,
        "blocked_by": blocked_by,
        "unmet": unmet,
    }


def facts(where: Whereabouts, state: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the block says, as plain values (the variables of a template)."""
    phase = where.phase
    keep = where.navigation.history
    history = where.history
    previous = [
        {"phase": r.from_phase, "turn": r.turn}
        for r in (history[-keep:] if keep > 0 else ())
    ]
    tools = list(where.tools) if where.tools is not None else None
    workflow = {"name": where.workflow_name, "description": where.workflow_description}
    if phase is None:
        return {
            "phase": PhaseName(where.current, ""),
            "goal": "",
            "previous": previous,
            "still_needed": [],
            "collect": [],
            "missing_requires": [],
            "tools": tools,
            "next": [],
            "terminal": False,
            "known": False,
            "state": state,
            "turn": where.turn,
            "workflow": workflow,
        }
    return {
        "phase": PhaseName(phase.name, phase.goal),
        "goal": phase.goal,
        "previous": previous,
        "still_needed": [k for k in phase.needs if _absent(state, k)],
        "collect": [k for k in phase.collect if _absent(state, k)],
        "missing_requires": [k for k in phase.requires if _absent(state, k)],
        "tools": tools,
        "next": [] if phase.terminal else [
            _next_item(t, where.phases, state, where.context) for t in phase.transitions
        ],
        "terminal": phase.terminal,
        "known": True,
        "state": state,
        "turn": where.turn,
        "workflow": workflow,
    }


def _annotation(item: Mapping[str, Any]) -> str:
    model = item["trigger"] == "model"
    if item["ready"]:
        return "you may ask for this" if model else "ready"
    if item["blocked_by"] == "when" and not item["description"]:
        text = f"when: {item['unmet']}"  # an undescribed transition is named by its condition
    elif item["waiting_for"]:
        text = "waiting for: " + ", ".join(item["waiting_for"])
    elif item["unmet"] is not None:
        text = f"when: {item['unmet']}"
    else:
        text = "not available"  # the target is not a phase
    return f"{text}; then you may ask for this" if model else text


def format_block(f: Mapping[str, Any]) -> str:
    """The default block, each line only when it has something to say."""
    phase = f["phase"]
    lines = ["[Navigation]"]
    lines.append(f"Current phase: {phase} — {f['goal']}" if f["goal"] else
                 f"Current phase: {phase}")
    if f["previous"]:
        lines.append("Previous: " + ", ".join(
            f"{p['phase']} (turn {p['turn']})" for p in f["previous"]))
    if f["still_needed"]:
        lines.append("Still needed: " + ", ".join(f["still_needed"]))
    if f["collect"]:
        lines.append("You may record: " + ", ".join(f["collect"]))
    if f["missing_requires"]:
        lines.append("Blocked until required state is available: "
                     + ", ".join(f["missing_requires"]))
    if f["tools"] is not None:
        lines.append("Tools: " + (", ".join(f["tools"]) if f["tools"] else "none"))
    if f["terminal"]:
        lines.append(FINAL_PHASE_NOTE)
    elif f["next"]:
        lines.append("Possible next:")
        for item in f["next"]:
            head = f"  → {item['target']}"
            if item["description"]:
                head += f": {item['description']}"
            lines.append(f"{head} ({_annotation(item)})")
    return "\n".join(lines)


def describe(where: Whereabouts, state: Mapping[str, Any]) -> tuple[str, str | None]:
    """The block and the navigation template's render error, if it failed: the workflow's
    navigation template if it has one, else (and when it fails) the default block."""
    f = facts(where, state)
    template = where.navigation.template
    if template is not None:
        outcome = template.render_checked(f)
        if outcome.error is None:
            return outcome.text, None
        return format_block(f), outcome.error
    return format_block(f), None
