"""Which phases and transitions of a workflow the test scenarios exercised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from phaseflow.machine import GuardTrigger, ModelTrigger, TransitionTrigger
from phaseflow.spec.model import Trigger, Workflow


class CoverageEdge(NamedTuple):
    """One transition of the workflow: ``number`` is its place in the phase's list."""

    phase: str
    number: int
    target: str
    trigger: Trigger


@dataclass(slots=True)
class Coverage:
    """Phases entered (the initial phase counts) and transitions taken by a guard or a
    model request; a ``goto`` enters a phase but takes no transition."""

    workflow: str
    phases: tuple[str, ...]
    transitions: tuple[CoverageEdge, ...]
    seen_phases: set[str] = field(default_factory=set)
    seen_transitions: set[tuple[str, int]] = field(default_factory=set)
    #: the coverage of each workflow this one calls or hands off to, by ``id`` of the
    #: workflow (each file is reported on its own)
    others: dict[int, Coverage] = field(default_factory=dict)

    @classmethod
    def for_workflow(cls, workflow: Workflow, *, used: bool = True) -> Coverage:
        edges = tuple(
            CoverageEdge(name, index, t.to or f"handoff {t.handoff.workflow}"
                         if t.handoff is not None else t.to, t.trigger)
            for name, phase in workflow.phases.items()
            for index, t in enumerate(phase.transitions)
        )
        made = cls(workflow.path or workflow.name, tuple(workflow.phases), edges)
        if used:
            made.others = {id(w): cls.for_workflow(w, used=False) for w in workflow.used()}
        return made

    def of(self, workflow: Workflow | None) -> Coverage:
        """The coverage of ``workflow``: this one, or that of a workflow it uses."""
        return self.others.get(id(workflow), self)

    def phase(self, name: str) -> None:
        self.seen_phases.add(name)

    def transition(self, phase: str, index: int) -> None:
        self.seen_transitions.add((phase, index))

    def taken(self, phase: str, target: str, trigger: TransitionTrigger) -> None:
        """Credit the transition the machine took from ``phase`` to ``target``: the one
        its trigger names. A model trigger that does not name one (recorded before the
        machine kept it) credits the phase's first ``model`` transition to ``target``;
        a programmatic move takes no transition."""
        if isinstance(trigger, GuardTrigger):
            self.transition(phase, trigger.index)
        elif isinstance(trigger, ModelTrigger):
            if trigger.index is not None:
                self.transition(phase, trigger.index)
                return
            for edge in self.transitions:
                if edge.phase == phase and edge.target == target and edge.trigger == "model":
                    self.transition(phase, edge.number)
                    return

    def merge(self, other: Coverage) -> None:
        self.seen_phases |= other.seen_phases
        self.seen_transitions |= other.seen_transitions

    def files(self) -> list[Coverage]:
        """This coverage and that of every workflow it uses: one a file."""
        return [self, *self.others.values()]

    @property
    def missed_phases(self) -> list[str]:
        return [p for p in self.phases if p not in self.seen_phases]

    @property
    def missed_transitions(self) -> list[CoverageEdge]:
        return [t for t in self.transitions if (t.phase, t.number) not in self.seen_transitions]

    @property
    def percent(self) -> float:
        total = len(self.phases) + len(self.transitions)
        if total == 0:
            return 100.0
        missed = len(self.missed_phases) + len(self.missed_transitions)
        return 100.0 * (total - missed) / total

    def report(self) -> list[str]:
        phases_hit = len(self.phases) - len(self.missed_phases)
        edges_hit = len(self.transitions) - len(self.missed_transitions)
        lines = [
            f"coverage {self.workflow}: phases {phases_hit}/{len(self.phases)}, "
            f"transitions {edges_hit}/{len(self.transitions)} "
            f"({self.percent:.0f}% of phases and transitions)"
        ]
        for phase in self.missed_phases:
            lines.append(f"  not exercised: phase {phase}")
        for phase, index, target, trigger in self.missed_transitions:
            extra = ", model" if trigger == "model" else ""
            lines.append(f"  not exercised: transition {phase} -> {target} (#{index + 1}{extra})")
        return lines
