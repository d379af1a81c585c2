"""A conversation as the eval keeps it, and what it did, read from its events.

A :class:`Conversation` is plain data (the session's events as JSON, the scenario's data
set as the stand-in tools left it, the counts of the run): the report is computed from
it, and it is what the JSON report keeps, so a report can be recomputed. :func:`frames`
walks the events and yields the facts a criterion reads after each one that changes
them - the state, the phase, what was called, entered, refused, approved.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MOVE_TOOL", "Conversation", "Judgement", "frames", "start_facts"]

#: the built-in tool a model asks to change phases with
MOVE_TOOL = "go_to_phase"
#: event types after which the facts may have changed
_CHANGING = frozenset({"state_changed", "phase_changed", "tool_result", "approval_requested",
                       "approval_resolved", "hook_call", "turn_started", "turn_finished"})
#: how a conversation stopped without being finished: not scored
INCOMPLETE = frozenset({"interrupted", "budget"})


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judged criterion's outcome: ``passed`` is ``None`` when no judge was asked."""

    rubric: str
    passed: bool | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One trial of one scenario, as it ran."""

    workflow: str
    scenario: str
    trial: int
    session_id: str
    initial_phase: str
    initial_state: Mapping[str, Any]
    #: the session's events as JSON (``Event.to_json``), with ``hook_call`` entries for
    #: the workflow's ``call`` effects, where they ran
    events: tuple[Mapping[str, Any], ...]
    #: why it stopped: ``finished`` (a final phase), ``user_done`` (the user ended it),
    #: ``max_turns``, ``failed`` (a turn failed), ``error`` (the harness could not go
    #: on), ``interrupted`` (Ctrl-C), ``budget``
    ended: str
    #: the session's status at the end (``finished``, ``idle``, ``failed``...)
    status: str = ""
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    user_tokens: int = 0
    seconds: float = 0.0
    model_seconds: float = 0.0
    cost: float = 0.0
    data: Mapping[str, Any] = field(default_factory=dict)
    #: the data set after each stand-in call, by call id (for ``never`` over ``data``)
    data_after: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    judgement: Judgement | None = None
    error: str = ""
    #: the eval file the scenario is written in
    eval_file: str = ""

    @property
    def complete(self) -> bool:
        """Whether it ran to an end of its own (an interrupted one is not scored)."""
        return self.ended not in INCOMPLETE

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["events"] = list(self.events)
        out["initial_state"] = dict(self.initial_state)
        out["data"] = dict(self.data)
        out["data_after"] = {k: dict(v) for k, v in self.data_after.items()}
        judged = self.judgement
        out["judgement"] = None if judged is None else {
            "rubric": judged.rubric, "passed": judged.passed, "reason": judged.reason}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Conversation:
        values = dict(data)
        values["events"] = tuple(values.get("events", ()))
        judged = values.get("judgement")
        values["judgement"] = None if judged is None else Judgement(**judged)
        return cls(**values)


def start_facts(conversation: Conversation) -> dict[str, Any]:
    """The facts before the first event."""
    return {
        "state": copy.deepcopy(dict(conversation.initial_state)), "status": "idle",
        "data": {}, "turns": 0, "called": {}, "args": {},
        "entered": {conversation.initial_phase: 1}, "refused": 0, "refused_tools": {},
        "approvals": 0, "approved": {}, "rejected": {}, "errors": 0,
    }


def _count(table: dict[str, int], name: str) -> None:
    table[name] = table.get(name, 0) + 1


def frames(conversation: Conversation) -> Iterator[tuple[dict[str, Any], str]]:
    """The facts and the phase after each event that may change them, the last one
    being the conversation's end (``status`` then is how its last turn ended). The
    facts mapping is the same object each time, updated in place: read it, do not
    keep it."""
    facts = start_facts(conversation)
    phase = conversation.initial_phase
    state: dict[str, Any] = facts["state"]
    arguments: dict[str, Any] = {}
    data_after = conversation.data_after
    for event in conversation.events:
        kind = event.get("type")
        if kind == "state_changed":
            new = event.get("new") or {}
            for key in event.get("keys") or ():
                value = new.get(key)
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
        elif kind == "phase_changed":
            phase = str(event.get("to_phase", phase))
            _count(facts["entered"], phase)
        elif kind == "tool_call":
            arguments[str(event.get("call_id"))] = event.get("arguments")
        elif kind == "tool_result":
            name = str(event.get("name", ""))
            status = event.get("status")
            call_id = str(event.get("call_id"))
            if status in ("ok", "error"):
                _count(facts["called"], name)
                facts["args"][name] = arguments.get(call_id)
            if status == "error":
                facts["errors"] += 1
            if status == "refused" or (status == "error" and name == MOVE_TOOL):
                facts["refused"] += 1
                _count(facts["refused_tools"], name)
            if call_id in data_after:
                facts["data"] = data_after[call_id]
        elif kind == "hook_call":
            _count(facts["called"], str(event.get("name", "")))
        elif kind == "approval_requested":
            facts["approvals"] += 1
        elif kind == "approval_resolved":
            decided = "rejected" if event.get("decision") == "reject" else "approved"
            _count(facts[decided], str(event.get("name", "")))
        elif kind == "turn_started":
            facts["turns"] += 1
            facts["status"] = "running"
        elif kind == "turn_finished":
            facts["status"] = str(event.get("status", ""))
        if kind in _CHANGING:
            yield facts, phase
    facts["data"] = dict(conversation.data)
    facts["turns"] = conversation.turns
    if conversation.status:
        facts["status"] = conversation.status
    yield facts, phase
