"""A reply's tool calls, planned and judged: the ids the history holds them under
(:func:`named_calls`), what each call is - refused, ignored, recorded, a move, planned
(plan mode), to run or to ask a human about (:func:`plan`) -, the state writes a host
tool's result may make (:func:`judged_writes`) and the hash an approval is bound to
(:func:`arguments_hash`). Pure: the step function (:mod:`phaseflow.session.core`) asks
these and keeps the ledger."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.session import events as ev
from phaseflow.session.values import Core, Done, PhaseView, Planned
from phaseflow.spec.builtin_tools import GO_TO_PHASE, RECORD
from phaseflow.tools.arguments import validate_arguments
from phaseflow.tools.state_types import check_state_type
from phaseflow.turn.execution import Mode, TurnExecution
from phaseflow.turn.messages import AssistantMessage, ToolCall

#: the key the history keeps a call's arguments under when the model's text was not JSON
UNPARSED = "__unparsed__"


def named_calls(calls: tuple[tuple[str, str, str], ...], core: Core) -> list[ToolCall]:
    """The reply's calls with ids the history can hold: non-empty, and unique within the
    turn (a model that omits an id, repeats one in a reply, or numbers its calls
    ``call_0`` in every reply gets a fresh one for the later call), so every call has
    exactly one result and its own idempotency key. The runner's approval policy judges
    these very calls (the same ids) before the reply is stepped. Checked against this
    turn's messages only, so the cost does not grow with the conversation: ids from
    providers are unique anyway, and a model that reuses an id of an earlier turn keeps it
    (documented)."""
    seen: set[str] = set()
    if core.continuation.request is not None:
        for m in core.history().after(len(core.continuation.messages)):
            if isinstance(m, AssistantMessage):
                seen.update(c.id for c in m.tool_calls)
    out: list[ToolCall] = []
    for position, (call_id, name, arguments) in enumerate(calls):
        cid = call_id or f"call_{core.turn}_{core.step}_{position}"
        while cid in seen:
            cid = f"{cid}_{core.step}_{position}"
        seen.add(cid)
        try:
            out.append(ToolCall(cid, name, arguments))
        except PhaseflowError:
            # Arguments that are not JSON: keep the call (it needs a result), with
            # its text as a string argument, and refuse it when it is checked.
            out.append(ToolCall(cid, name, json.dumps({UNPARSED: arguments})))
    return out


def unparsed(arguments: Any) -> str | None:
    """The model's text of arguments that were not JSON (kept under one marker key so
    the call can stay in the history), or ``None``."""
    if isinstance(arguments, dict) and len(arguments) == 1:
        text = arguments.get(UNPARSED)
        if isinstance(text, str):
            return text
    return None


def shown_arguments(call: ToolCall) -> Any:
    """A call's arguments as the events show them: the model's own text when it was not
    JSON (never the marker the history keeps it under)."""
    value = call.argument_value()
    text = unparsed(value)
    return value if text is None else text


#: the result of a call in plan mode of a tool that is not ``read_only``
PLANNED_TEXT = ("Not run: the session is in plan mode, where only read-only tools run. This "
                "call is listed in the plan; it runs when the user switches the session to "
                "exec mode and you make it again.")


def _available(view: PhaseView) -> str:
    return ", ".join(view.names) or "none"


def plan(calls: list[ToolCall], view: PhaseView, flagged: frozenset[int],
          execution: TurnExecution) -> tuple[Planned, ...]:
    """Decide each call: refused (unknown, not offered now, invalid arguments), ignored
    (a second move), recorded, a move to check, or a tool to run (after approval)."""
    planned: list[Planned] = []
    moved = False
    for position, call in enumerate(calls):
        offered = view.tool(call.name)
        if offered is None:
            planned.append(Planned(call, "refused", (
                f"Tool {call.name!r} is not available in this phase ({view.phase}). "
                f"Tools available now: {_available(view)}.")))
            continue
        try:
            arguments = call.argument_value()
        except ValueError:  # pragma: no cover - ToolCall holds canonical JSON
            arguments = None
        if unparsed(arguments) is not None:
            planned.append(Planned(call, "refused", (
                f"Invalid arguments for {call.name}: not JSON (write one JSON object).")))
            continue
        if call.name == GO_TO_PHASE:
            # Not checked against the offered enum: a target that is not open now gets
            # the machine's reason (the condition, the missing keys) from the runner.
            target = arguments.get("phase") if isinstance(arguments, dict) else None
            problem = None if isinstance(target, str) else "'phase' must be a phase name"
        elif offered.check is not None:
            problem = offered.check(arguments)
        else:
            problem = validate_arguments(dict(offered.parameters), arguments)
        if problem is not None:
            planned.append(Planned(call, "refused", f"Invalid arguments for {call.name}: "
                                                    f"{problem}"))
            continue
        if call.name == GO_TO_PHASE:
            if moved:
                planned.append(Planned(call, "ignored", "ignored: one phase change per step"))
            else:
                moved = True
                planned.append(Planned(call, "move"))
            continue
        if call.name == RECORD:
            writes, problem = record_writes(arguments, view)
            if problem:
                planned.append(Planned(call, "refused", f"Invalid arguments for record: "
                                                        f"{problem}"))
            else:
                planned.append(Planned(call, "record", writes=writes))
            continue
        if execution.mode is Mode.PLAN and not offered.read_only:
            planned.append(Planned(call, "planned", PLANNED_TEXT))
            continue
        needs = offered.approval or position in flagged
        if needs and execution.trusted_scope(call) is None:
            planned.append(Planned(call, "approval"))
        else:
            planned.append(Planned(call, "run"))
    return tuple(planned)


def record_writes(arguments: Any, view: PhaseView
                   ) -> tuple[tuple[tuple[str, Any], ...], str]:
    if not isinstance(arguments, dict):
        return (), "the arguments must be an object"
    writes: list[tuple[str, Any]] = []
    for key, value in arguments.items():
        declared = view.collect.get(key)
        if declared is None:
            allowed = ", ".join(view.collect) or "none"
            return (), f"{key!r} cannot be recorded here (keys this phase collects: {allowed})"
        problem = check_state_type(value, declared)
        if problem is not None:
            return (), f"{key!r}: {problem}"
        writes.append((key, value))
    return tuple(writes), ""


def judged_writes(done: Done, call: ToolCall, view: PhaseView | None) -> Done:
    """A host tool's result with the state writes it may make: only the keys its
    catalogue entry lists (``writes``), each of its declared type. The others are
    refused, and the host sees why beside the result (a ``write_refused`` event, before
    the result's own); the model's view of the result is unchanged."""
    if not done.writes:
        return done
    tool = view.tool(call.name) if view is not None else None
    allowed = tool.writes if tool is not None else ()
    types = tool.write_types if tool is not None else {}
    writes: list[tuple[str, Any]] = []
    problems: list[str] = []
    for key, value in done.writes:
        if key not in allowed:
            problems.append(f"{key!r} is not in the tool's writes")
            continue
        declared = types.get(key)
        problem = check_state_type(value, declared) if declared is not None else None
        if problem is not None:
            problems.append(f"{key!r}: {problem}")
            continue
        writes.append((key, value))
    if not problems:
        return done
    refused = ev.ErrorEvent(code="write_refused", message=(
        f"{call.name} ({call.id}): not written: {'; '.join(problems)}"))
    return replace(done, writes=tuple(writes), notes=(*done.notes, refused))


def arguments_hash(call: ToolCall) -> str:
    """The SHA-256 of a call's canonical arguments: what an approval is bound to."""
    import hashlib

    return hashlib.sha256(f"{call.name}\0{call.arguments}".encode()).hexdigest()
