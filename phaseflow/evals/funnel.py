"""Where conversations go: a workflow's phase funnel, read from the transcripts.

Per phase: how many conversations entered it, each transition taken out of it and how
often, how many ended there (and of those, how many stalled: ended there without the
phase being final); across the workflow: the moves the model asked for that were
refused (and in which phase), the tools it tried where they were not offered, tool
errors and the model requests retried. Pure: a function of the conversations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phaseflow.evals.transcript import MOVE_TOOL, Conversation, frames

#: per phase, its guarded automatic transitions: (to, the guard's text, the guard)
Guards = Mapping[str, Sequence[tuple[str, str, Callable[[Mapping[str, Any]], bool]]]]

__all__ = ["Funnel", "funnel"]

_BLOCKED_REASON_CHARS = 160


@dataclass(slots=True)
class Funnel:
    phases: list[str]
    terminal: frozenset[str]
    conversations: int = 0
    entered: Counter[str] = field(default_factory=Counter)
    #: (from, to) -> times taken
    exits: Counter[tuple[str, str]] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)
    #: (phase, requested phase, reason) -> times the model's move was refused
    blocked: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: (phase, tool) -> times the model called a tool not offered there
    not_offered: Counter[tuple[str, str]] = field(default_factory=Counter)
    tool_errors: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    #: (phase, to, guard) -> conversations that stalled in the phase with that guard
    #: still false at their end: which guard never opened
    closed: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        names = self.phases + sorted(set(self.entered) - set(self.phases))
        return {
            "conversations": self.conversations,
            "phases": [
                {"phase": name, "terminal": name in self.terminal,
                 "entered": self.entered[name], "ended": self.ended[name],
                 "stalled": 0 if name in self.terminal else self.ended[name],
                 "exits": [{"to": to, "taken": n}
                           for (src, to), n in sorted(self.exits.items(),
                                                      key=lambda i: (-i[1], i[0]))
                           if src == name]}
                for name in names],
            "blocked": [{"phase": p, "requested": r, "reason": why, "times": n}
                        for (p, r, why), n in self.blocked.most_common()],
            "not_offered": [{"phase": p, "tool": t, "times": n}
                            for (p, t), n in self.not_offered.most_common()],
            "tool_errors": [{"tool": t, "times": n} for t, n in self.tool_errors.most_common()],
            "retries": self.retries,
            "closed_guards": [{"phase": p, "to": to, "when": when, "times": n}
                              for (p, to, when), n in self.closed.most_common()],
        }


def _reason(content: Any) -> str:
    text = " ".join(str(content or "").split())
    return text[:_BLOCKED_REASON_CHARS]


def add(result: Funnel, conversation: Conversation, guards: Guards | None = None) -> None:
    """Count one conversation into ``result`` (``guards``: to see which of the phase it
    stalled in stayed closed)."""
    result.conversations += 1
    phase = conversation.initial_phase
    seen = {phase}
    calls: dict[str, Any] = {}
    for event in conversation.events:
        kind = event.get("type")
        if kind == "phase_changed":
            to = str(event.get("to_phase", ""))
            result.exits[(str(event.get("from_phase", phase)), to)] += 1
            phase = to
            seen.add(to)
        elif kind == "tool_call":
            calls[str(event.get("call_id"))] = event.get("arguments")
        elif kind == "tool_result":
            name = str(event.get("name", ""))
            status = event.get("status")
            if name == MOVE_TOOL and status == "error":
                asked = calls.get(str(event.get("call_id")))
                requested = str(asked.get("phase", "")) if isinstance(asked, dict) else ""
                result.blocked[(phase, requested, _reason(event.get("content")))] += 1
            elif status == "refused":
                result.not_offered[(phase, name)] += 1
            elif status == "error":
                result.tool_errors[name] += 1
        elif kind == "retrying":
            result.retries += 1
    result.entered.update(seen)
    result.ended[phase] += 1
    if guards and phase not in result.terminal and guards.get(phase):
        state: Mapping[str, Any] = {}
        for facts, _ in frames(conversation):
            state = facts["state"]
        for to, when, guard in guards[phase]:
            if not guard(state):
                result.closed[(phase, to, when)] += 1


def funnel(conversations: Iterable[Conversation], phases: Sequence[str],
           terminal: Iterable[str], guards: Guards | None = None) -> Funnel:
    """The funnel of ``conversations`` of one workflow (``phases`` in its order)."""
    result = Funnel(list(phases), frozenset(terminal))
    for conversation in conversations:
        add(result, conversation, guards)
    return result
