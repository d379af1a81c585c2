"""Every public operation and constructor, fed hostile arguments, refuses or round-trips.

The promise (issue 8, section 1): a value that enters the turn core is what it claims to
be, checked at the moment it is given. So for *any* argument of *any* type, an operation
either refuses it (a ``Rejected``, or a ``PhaseflowError`` where the operation cannot
refuse) or returns a value that survives ``json.dumps`` and ``from_json`` exactly. No
other exception, ever, and no rejection whose message cannot be printed.

Each program starts from a value in a random reachable state, then applies a random
sequence of operations whose arguments are drawn from a mix of plausible values (so the
program goes deep) and hostile ones (wrong types, huge and non-finite numbers, enum-like
strings, foreign objects).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import phaseflow.turn as turn
from phaseflow.errors import PhaseflowError
from phaseflow.turn import (
    ApprovalRequest,
    AssistantMessage,
    CaptureIncomplete,
    Continuation,
    History,
    HistoryMark,
    MediaPart,
    OutputReference,
    PresentationTruncated,
    Rejected,
    RequestOutcome,
    Selection,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolOutcome,
    ToolOutput,
    ToolResultMessage,
    TurnExecution,
    TurnProgress,
    UserMessage,
    present_lines,
    result,
    trust_key,
)

HOSTILE_RUN = settings(max_examples=150, deadline=None)

ENUMS = [v for v in vars(turn).values() if isinstance(v, type) and issubclass(v, StrEnum)]
ENUM_STRINGS = [*sorted({m.value for e in ENUMS for m in e}), "MANUAL", "", "bogus"]
ENUM_MEMBERS = [m for e in ENUMS for m in e]
CALLS = [
    ToolCall.of("c1", "bash", {"command": "ls"}),
    ToolCall.of("c2", "bash", {"command": "ls", "cwd": "/"}),
    ToolCall.of("c3", "read_file", {"path": "/x"}),
    ToolCall.of("c4", "list", {}),
]
SAMPLES: list[object] = [
    *CALLS,
    ToolOutcome.ok("o"),
    ToolOutcome.cancelled(),
    TextPart("t"),
    MediaPart("image/png", "tok"),
    UserMessage("u"),
    SystemMessage("s"),
    AssistantMessage("a", (CALLS[0],)),
    ToolResultMessage("c1", "r"),
    ApprovalRequest(CALLS[0]),
    HistoryMark(0, 1, 2),
    History([UserMessage("u")]),
    CaptureIncomplete(turn.CaptureReason.TIMEOUT),
    PresentationTruncated(3),
    TurnExecution(),
    TurnProgress(),
    Continuation(),
]


class Sneaky(str):
    """A ``str`` subclass whose equality lies: it must be stored as a plain string."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.binary(max_size=2),
    st.sampled_from(ENUM_STRINGS),
    st.sampled_from(ENUM_MEMBERS),
    st.just(Sneaky("x")),
)
huge = st.sampled_from([10**5000, -(10**5000), 2**63, -(2**63) - 1, 2**63 - 1, 2**64, 1e308])
hostile = st.one_of(
    scalars,
    huge,
    st.sampled_from(SAMPLES),
    st.lists(st.one_of(scalars, st.sampled_from(SAMPLES)), max_size=3),
    st.lists(scalars, max_size=2).map(tuple),
    st.dictionaries(st.text(max_size=2), scalars, max_size=2),
    st.builds(object),
)


def mixed(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly plausible arguments (to reach deep states), often hostile ones."""
    return st.integers(0, 5).flatmap(lambda pick: hostile if pick == 5 else plausible)


ids = mixed(st.sampled_from(["c1", "c2", "c3", "c4", "r", "r#1", "r#2", ""]))
texts = mixed(st.text(alphabet="ab \n", max_size=4))
turns = mixed(st.integers(0, 4))
CURRENT = "CURRENT"  # placeholder: the current turn id (or 1), so events are not all stale
calls = mixed(st.sampled_from(CALLS))
outcomes = mixed(st.sampled_from([ToolOutcome.ok("o"), ToolOutcome.error("e")]))
contents = mixed(st.one_of(st.text(max_size=3), st.just((TextPart("p"),))))


def enum_arg(kind: type[StrEnum]) -> st.SearchStrategy[Any]:
    return mixed(st.one_of(st.sampled_from(list(kind)), st.sampled_from([m.value for m in kind])))


def checkpoint_calls(c: Continuation) -> list[ToolCall]:
    return [e.call for e in c.checkpoint.effects] if c.checkpoint is not None else CALLS


def stage_call_ids(m: TurnProgress) -> list[str]:
    return [c.id for c in getattr(m.stage, "calls", ())] or ["c1"]


def active_ids(ex: TurnExecution) -> list[str]:
    return [t.call_id for t in ex.active_tools] or ["c1"]


def mark_entries(c: Continuation) -> list[int]:
    return [m.display_entry for m in c.marks] or [0]


Op = tuple[str, list[st.SearchStrategy[Any]]]

EXECUTION_OPS: list[Op] = [
    ("admit_prompt", [enum_arg(turn.PromptKind), contents]),
    ("begin_turn", []),
    ("provider_started", []),
    ("tool_started", [ids, mixed(st.sampled_from(["bash", "read_file"]))]),
    ("tool_completed", [active_ids]),
    ("request_approval", [mixed(st.sampled_from([ApprovalRequest(c) for c in CALLS]))]),
    ("resolve_approval", [mixed(st.one_of(st.none(), ids)), enum_arg(turn.ApprovalDecision)]),
    ("trusted_scope", [calls]),
    ("trust_key", [calls]),
    ("auto_approve", [calls, enum_arg(turn.TrustScope)]),
    ("begin_completion", []),
    ("finish_completion", []),
    ("abort", []),
    ("fail", [texts]),
    ("report_error", [texts]),
    ("recover", []),
    ("enter_plan", []),
    ("enter_exec", []),
    ("set_edit_range", [mixed(st.sampled_from(["/a", "C:\\b", "rel"])), turns, turns]),
    ("clear_edit_range", [mixed(st.just("/a"))]),
    ("edit_range", [mixed(st.just("/a"))]),
    ("may_edit", [mixed(st.just("/a")), turns, turns]),
]

PROGRESS_OPS: list[Op] = [
    ("start_turn", []),
    ("start_compaction", []),
    ("reasoning_delta", [CURRENT, texts]),  # type: ignore[list-item]
    ("text_delta", [CURRENT, texts]),  # type: ignore[list-item]
    ("tool_call", [CURRENT, calls]),  # type: ignore[list-item]
    ("token_estimate", [CURRENT, mixed(st.integers(-5, 50))]),  # type: ignore[list-item]
    ("stream_ended", [CURRENT, enum_arg(turn.StopReason)]),  # type: ignore[list-item]
    ("fail", [CURRENT]),  # type: ignore[list-item]
    ("tool_result", [CURRENT, stage_call_ids, outcomes]),  # type: ignore[list-item]
    ("compact", [CURRENT, enum_arg(turn.CompactionTrigger)]),  # type: ignore[list-item]
    ("compaction_finished", [CURRENT]),  # type: ignore[list-item]
    ("cancel", [CURRENT, mixed(st.floats(0, 100))]),  # type: ignore[list-item]
    ("confirm_stopped", [CURRENT]),  # type: ignore[list-item]
]


def group_messages(c: Continuation, chosen: list[ToolCall]) -> object:
    """The messages a well-behaved host would checkpoint for ``chosen`` (or junk)."""
    if c.request is None:
        return [UserMessage("x")]
    base = c.checkpoint.resolved_messages() if c.checkpoint else c.request.messages
    return base.append(AssistantMessage("", tuple(chosen)))


def outcome_for(c: Continuation) -> object:
    if c.request is None:
        return RequestOutcome("r", 1, c.revision, c.messages)  # type: ignore[arg-type]
    base = c.checkpoint.resolved_messages() if c.checkpoint else c.request.messages
    r = c.request
    return RequestOutcome(r.id, r.turn_id, r.revision, base.append(AssistantMessage("done")))


REQ = mixed(st.sampled_from(["r", "r", "q"]))

CONTINUATION_OPS: list[Op] = [
    ("begin_request", [REQ, mixed(st.integers(1, 3)), contents]),
    ("abandon_request", [ids]),
    ("complete", ["OUTCOME", mixed(st.one_of(st.none(), st.integers(-1, 9)))]),  # type: ignore[list-item]
    ("checkpoint_tool_group", [REQ, "GROUP", "CALLS"]),  # type: ignore[list-item]
    ("admit_tool_effect", [REQ, "CHECKPOINT", "CP_ID", "CP_NAME", "CP_ARGS"]),  # type: ignore[list-item]
    ("admit_call", [REQ, "CHECKPOINT", checkpoint_calls]),  # type: ignore[list-item]
    ("complete_tool_effect", [REQ, "CHECKPOINT", "CP_ID", "CP_NAME", "CP_ARGS", outcomes]),  # type: ignore[list-item]
    ("complete_call", [REQ, "CHECKPOINT", checkpoint_calls, outcomes]),  # type: ignore[list-item]
    ("reconcile_interrupted", []),
    ("mark_durable", []),
    ("durable", []),
    ("branch_at", [mixed(st.sampled_from(["b1", "b2", ""])), mark_entries]),
    ("switch_branch", [mixed(st.sampled_from(["b1", "b2"])), mixed(st.none())]),
    ("branch", [mixed(st.just("b1"))]),
    ("replace_messages", [mixed(st.just([UserMessage("compacted")]))]),
    ("replace_system", [mixed(st.just(SystemMessage("sys")))]),
]


# The exactly-once ledger is the deepest part: weight its steps so programs reach it.
CONTINUATION_OPS += [op for op in CONTINUATION_OPS if "call" in op[0] or "effect" in op[0]] * 2


def draw_args(data: st.DataObject, value: Any, specs: list[Any]) -> list[Any]:
    """Arguments for one call; the placeholders read the current value (deep programs)."""
    args: list[Any] = []
    effect_call: ToolCall | None = None
    chosen = data.draw(st.lists(st.sampled_from(CALLS), min_size=1, max_size=3, unique=True))
    for spec in specs:
        if spec == "OUTCOME":
            args.append(data.draw(mixed(st.just(outcome_for(value)))))
        elif spec == "GROUP":
            args.append(data.draw(mixed(st.just(group_messages(value, chosen)))))
        elif spec == "CALLS":
            args.append(data.draw(mixed(st.just(tuple(chosen)))))
        elif spec == CURRENT:
            current = value.turn_id if value.turn_id is not None else 1
            args.append(current if data.draw(st.integers(0, 4)) else data.draw(turns))
        elif spec in ("CP_ID", "CP_NAME", "CP_ARGS"):
            if effect_call is None:
                effect_call = data.draw(st.sampled_from(checkpoint_calls(value)))
            plausible = {
                "CP_ID": effect_call.id,
                "CP_NAME": effect_call.name,
                "CP_ARGS": effect_call.argument_value(),
            }[spec]
            args.append(data.draw(mixed(st.just(plausible))))
        elif spec == "CHECKPOINT":
            cp = value.checkpoint.id if value.checkpoint is not None else "r#1"
            args.append(data.draw(mixed(st.just(cp))))
        elif callable(spec) and not isinstance(spec, st.SearchStrategy):
            args.append(data.draw(mixed(st.sampled_from(spec(value) or [None]))))
        else:
            args.append(data.draw(spec))
    return args


def attempt(fn: Callable[..., Any], args: list[Any]) -> Any:
    """Call ``fn``; a ``PhaseflowError`` is a refusal, any other exception fails the test."""
    try:
        return fn(*args)
    except PhaseflowError as exc:
        assert str(exc)  # the message builds
        return exc


def assert_round_trip(value: Any) -> None:
    data = value.to_json()
    again = type(value).from_json(json.loads(json.dumps(data)))
    assert not isinstance(again, Rejected), (again, value)
    assert again == value
    assert again.to_json() == data


def next_value(outcome: Any, kind: type) -> Any:
    """The value an operation's result carries (itself, or a wrapper's field)."""
    if isinstance(outcome, kind):
        return outcome
    for name in ("execution", "progress", "continuation"):
        inner = getattr(outcome, name, None)
        if isinstance(inner, kind):
            return inner
    return None


def run_program(data: st.DataObject, value: Any, ops: list[Op], steps: int) -> None:
    kind = type(value)
    for _ in range(steps):
        name, specs = data.draw(st.sampled_from(ops))
        args = draw_args(data, value, specs)
        outcome = attempt(getattr(value, name), args)
        if isinstance(outcome, Rejected):
            assert str(outcome)  # printable, whatever the arguments were
            continue
        nxt = next_value(outcome, kind)
        if nxt is not None:
            assert_round_trip(nxt)
            value = nxt


@HOSTILE_RUN
@given(st.data())
def test_turn_execution_refuses_or_round_trips(data: st.DataObject) -> None:
    run_program(data, TurnExecution(), EXECUTION_OPS, 30)


@HOSTILE_RUN
@given(st.data())
def test_turn_progress_refuses_or_round_trips(data: st.DataObject) -> None:
    run_program(data, TurnProgress(), PROGRESS_OPS, 30)


@HOSTILE_RUN
@given(st.data())
def test_continuation_refuses_or_round_trips(data: st.DataObject) -> None:
    run_program(data, Continuation(), CONTINUATION_OPS, 30)


# --- constructors and free functions ---------------------------------------------------------

CONSTRUCTORS: list[tuple[Callable[..., Any], int]] = [
    (TextPart, 1),
    (MediaPart, 2),
    (ToolCall, 3),
    (ToolOutcome, 2),
    (UserMessage, 1),
    (SystemMessage, 1),
    (AssistantMessage, 3),
    (ToolResultMessage, 3),
    (History, 1),
    (ApprovalRequest, 2),
    (turn.ActiveTool, 2),
    (turn.ToolExecution, 1),
    (turn.RunActive, 3),
    (turn.RunFailed, 1),
    (turn.TrustKey, 3),
    (turn.TrustEntry, 2),
    (turn.PendingAutoApproval, 2),
    (turn.EditRange, 3),
    (TurnExecution, 8),
    (turn.Generating, 7),
    (turn.ExecutingTools, 3),
    (turn.Compacting, 3),
    (turn.Cancelling, 4),
    (TurnProgress, 2),
    (turn.ActiveRequest, 4),
    (RequestOutcome, 4),
    (HistoryMark, 3),
    (turn.Branch, 3),
    (turn.ToolEffect, 3),
    (turn.ToolCheckpoint, 4),
    (Continuation, 9),
    (CaptureIncomplete, 1),
    (PresentationTruncated, 1),
    (Selection, 5),
    (OutputReference, 4),
    (ToolOutput, 6),
    (Selection.create, 5),
    (OutputReference.create, 4),
    (ToolOutput.create, 6),
    (present_lines, 2),
    (result, 1),
    (trust_key, 1),
    (turn.SendNext, 1),
    (Continuation.restore, 3),
    (Continuation.import_legacy, 1),
    (turn.canonical_arguments, 1),
    (turn.content_to_json, 1),
    (turn.content_from_json, 1),
    (turn.message_from_json, 1),
    (turn.message_to_json, 1),
    (turn.history_problem, 1),
    (ToolCall.of, 3),
    (ToolOutcome.ok, 1),
    (ToolOutcome.cancelled, 1),
    (Rejected, 2),
]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(CONSTRUCTORS), st.data())
def test_constructors_refuse_or_build_values_that_persist(
    spec: tuple[Callable[..., Any], int], data: st.DataObject
) -> None:
    build, arity = spec
    required = sum(
        1
        for p in inspect.signature(build).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    )
    count = data.draw(st.integers(required, max(arity, required)))
    args = [data.draw(hostile) for _ in range(count)]
    built = attempt(build, args)
    if isinstance(built, PhaseflowError | Rejected):
        assert str(built)
        return
    if build is turn.content_to_json:
        json.dumps(built)  # plain JSON, always
    if build is turn.message_to_json:  # plain JSON, read back as the same message
        assert turn.message_from_json(json.loads(json.dumps(built))) == args[0]
    to_json = getattr(built, "to_json", None)
    if to_json is None:
        return
    encoded = json.dumps(to_json())  # whatever a constructor accepted can be written
    decode = getattr(type(built), "from_json", None)
    if decode is None:
        return
    again = decode(json.loads(encoded))
    # ... and read back: equal, or refused for an invariant a constructor does not check
    # (validate / restore / from_json do) - never as a wrong shape.
    if isinstance(again, Rejected):
        assert again.reason != "malformed_json", (again, built)
    else:
        assert again == built
