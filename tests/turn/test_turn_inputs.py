"""Values that enter the turn core are what they claim to be (issue 8, section 1).

One test per defect the hostile suite found; each asserts what a user sees: the same
behaviour for a plain string as for its enum member, a documented rejection (or a
``PhaseflowError`` from a constructor) for anything of the wrong type, a message that can
always be printed, and an exact JSON round trip for whatever is accepted.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from phaseflow.errors import PhaseflowError
from phaseflow.turn import (
    ApprovalDecision,
    ApprovalRequest,
    AssistantMessage,
    CaptureIncomplete,
    CaptureReason,
    Compacting,
    CompactionTrigger,
    Continuation,
    Generating,
    History,
    HistoryMark,
    NextStep,
    OutcomeStatus,
    OutputReference,
    PresentationTruncated,
    PromptKind,
    Queued,
    RequestOutcome,
    RunActive,
    Selection,
    SendNext,
    SendNow,
    Starting,
    StopReason,
    TextPart,
    ToolCall,
    ToolOutcome,
    ToolOutput,
    TrustKey,
    TrustKeyKind,
    TrustScope,
    TurnExecution,
    TurnId,
    TurnInputError,
    TurnProgress,
    UserMessage,
    present_lines,
    result,
    trust_key,
)
from phaseflow.turn.inputs import describe
from tests.support.turn_strategies import assert_json_identity, ok, rejected
from tests.support.turn_values import LS, generating, thinking

HUGE = 10**5000  # beyond Python's 4,300-digit limit for printing an int


def with_group() -> Continuation:
    c = ok(Continuation().begin_request("r", TurnId(1), "go"))
    assert c.request is not None
    msgs = c.request.messages.append(AssistantMessage("", (LS,)))
    return ok(c.checkpoint_tool_group("r", msgs, (LS,)))


# --- plain strings for enum arguments mean exactly their member ------------------------


def test_stream_ended_with_a_plain_max_tokens_continues_the_turn() -> None:
    m, t = generating()
    by_string = ok(m.stream_ended(t, "max_tokens"))  # type: ignore[arg-type]
    by_member = ok(m.stream_ended(t, StopReason.MAX_TOKENS))
    assert by_string == by_member
    assert by_string.next is NextStep.CONTINUE
    assert by_string.progress.stage == Generating(t, continuation=True)


def test_compact_with_a_plain_trigger_keeps_the_continuation_flag() -> None:
    m, t = generating()
    by_string = ok(m.compact(t, "truncation_recovery"))  # type: ignore[arg-type]
    assert by_string == ok(m.compact(t, CompactionTrigger.TRUNCATION_RECOVERY))
    assert by_string.stage == Compacting(t, CompactionTrigger.TRUNCATION_RECOVERY, True)
    assert ok(by_string.compaction_finished(t)).stage == Generating(t, continuation=True)


def test_compact_with_a_plain_manual_is_refused_like_the_member() -> None:
    m, t = generating()
    by_string = rejected(m.compact(t, "manual"), "invalid_state")  # type: ignore[arg-type]
    assert by_string == m.compact(t, CompactionTrigger.MANUAL)


def test_a_plain_ok_status_is_an_ok_outcome() -> None:
    outcome = ToolOutcome("ok", "fine")  # type: ignore[arg-type]
    assert outcome == ToolOutcome.ok("fine")
    assert outcome.status is OutcomeStatus.OK and not outcome.is_error
    assert not outcome.to_message("c").is_error


def test_plain_strings_are_stored_as_members_and_persist() -> None:
    capture = CaptureIncomplete("timeout")  # type: ignore[arg-type]
    assert capture.reason is CaptureReason.TIMEOUT
    assert_json_identity(ToolOutput("x", capture), ToolOutput.from_json)
    ex = ok(thinking().auto_approve(LS, "turn"))  # type: ignore[arg-type]
    assert ex.auto_approvals[0].scope is TrustScope.TURN
    assert_json_identity(ex, TurnExecution.from_json)
    resolved = ok(
        ok(thinking().request_approval(ApprovalRequest(LS))).resolve_approval(
            None,
            "approve_turn",  # type: ignore[arg-type]
        )
    )
    assert resolved.decision is ApprovalDecision.APPROVE_TURN
    assert_json_identity(resolved.execution, TurnExecution.from_json)
    key = TrustKey("t", "arguments", "ab")  # type: ignore[arg-type]
    assert key.kind is TrustKeyKind.ARGUMENTS
    selection = Selection("full", "lines", 0, 2, 2)  # type: ignore[arg-type]
    assert selection.to_json()["kind"] == "full"


def test_strings_that_are_not_members_are_refused() -> None:
    m, t = generating()
    rejected(m.stream_ended(t, "stop"), "invalid_argument")  # type: ignore[arg-type]
    rejected(m.compact(t, "MANUAL"), "invalid_argument")  # type: ignore[arg-type]
    rejected(thinking().auto_approve(LS, "forever"), "invalid_argument")  # type: ignore[arg-type]
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    rejected(ex.resolve_approval(None, "yes"), "invalid_argument")  # type: ignore[arg-type]
    with pytest.raises(TurnInputError):
        ToolOutcome("fine", "x")  # type: ignore[arg-type]
    with pytest.raises(TurnInputError):
        CaptureIncomplete("gremlins")  # type: ignore[arg-type]
    with pytest.raises(TurnInputError):
        TurnExecution().admit_prompt("urgent", "x")  # type: ignore[arg-type]


# --- wrong types are refused when given, never stored -----------------------------------


def test_token_estimates_must_be_integers() -> None:
    m, t = generating()
    for bad in (1.5, True, "3", None, 2**63):
        rejected(m.token_estimate(t, bad), "invalid_argument")  # type: ignore[arg-type]
    assert ok(m.token_estimate(t, 7)).stage == Generating(t, token_estimate=7)


def test_line_numbers_and_display_entries_must_be_integers() -> None:
    for start, end in ((1.5, 2), (True, 2), (1, "2"), (1, HUGE)):
        rejected(thinking().set_edit_range("/a", start, end), "invalid_edit_range")  # type: ignore[arg-type]
    with pytest.raises(TurnInputError):
        thinking().may_edit("/a", 1.0, 2)  # type: ignore[arg-type]
    c = ok(Continuation().begin_request("r", TurnId(1), "hi"))
    assert c.request is not None
    done = RequestOutcome("r", TurnId(1), 0, c.request.messages.append(AssistantMessage("a")))
    for bad in (True, 1.0, "1"):
        rejected(c.complete(done, display_entry=bad), "invalid_argument")  # type: ignore[arg-type]
    with pytest.raises(TurnInputError):
        HistoryMark(True, 1, 2)  # type: ignore[arg-type]
    assert_json_identity(ok(c.complete(done, display_entry=4)), Continuation.from_json)


def test_prompt_content_is_a_string_or_parts() -> None:
    with pytest.raises(TurnInputError):
        TurnExecution().admit_prompt(PromptKind.STEERING, ["a", "b"])  # type: ignore[list-item]
    with pytest.raises(TurnInputError):
        UserMessage(42)  # type: ignore[arg-type]
    parts = ok(TurnExecution().begin_turn()).admit_prompt(
        PromptKind.FOLLOW_UP,
        [TextPart("a")],  # type: ignore[arg-type]
    )
    assert parts.execution.follow_up == ((TextPart("a"),),)  # a list of parts is a tuple
    assert_json_identity(parts.execution, TurnExecution.from_json)
    rejected(Continuation().begin_request("r", TurnId(1), ["x"]), "invalid_request")  # type: ignore[arg-type]


def test_request_ids_and_call_ids_are_strings() -> None:
    rejected(Continuation().begin_request(5, TurnId(1), "x"), "invalid_request")  # type: ignore[arg-type]
    rejected(Continuation().begin_request("r", True, "x"), "invalid_request")  # type: ignore[arg-type]
    c = with_group()
    assert c.checkpoint is not None
    rejected(c.admit_tool_effect("r", c.checkpoint.id, 1, "bash", {}), "invalid_argument")  # type: ignore[arg-type]
    rejected(c.abandon_request(None), "invalid_argument")  # type: ignore[arg-type]
    m, t = generating()
    rejected(m.text_delta(t, b"bytes"), "invalid_argument")  # type: ignore[arg-type]
    rejected(m.text_delta(True, "x"), "invalid_argument")  # type: ignore[arg-type]
    rejected(thinking().tool_started(7, "bash"), "invalid_argument")  # type: ignore[arg-type]
    with pytest.raises(TurnInputError):
        ToolCall(1, "bash")  # type: ignore[arg-type]


def test_value_arguments_must_be_the_core_values() -> None:
    m, t = generating()
    rejected(m.tool_call(t, {"id": "c"}), "invalid_argument")  # type: ignore[arg-type]
    rejected(thinking().request_approval(LS), "invalid_argument")  # type: ignore[arg-type]
    rejected(Continuation().replace_system("be nice"), "invalid_argument")  # type: ignore[arg-type]
    rejected(Continuation().replace_messages(["hi"]), "invalid_history")  # type: ignore[list-item]
    with pytest.raises(TurnInputError):
        History(["hi"])  # type: ignore[list-item]
    with pytest.raises(TurnInputError):
        result("text")  # type: ignore[arg-type]
    rejected(ToolOutput.create("x", capture="complete"), "invalid_output")  # type: ignore[arg-type]
    rejected(present_lines(b"a\n", 1), "invalid_output")  # type: ignore[arg-type]
    rejected(present_lines("a\n", 1.0), "invalid_selection")  # type: ignore[arg-type]
    rejected(OutputReference.create("t", "text/plain", "1", "0" * 64), "invalid_reference")  # type: ignore[arg-type]
    assert isinstance(TurnInputError("x"), PhaseflowError)


def test_subclasses_of_str_and_int_are_stored_as_plain_values() -> None:
    class Name(str):
        pass

    class Liar(str):  # equal to everything: must not be read as whichever member comes first
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 0

    m0, t0 = generating()
    rejected(m0.stream_ended(t0, Liar("nonsense")), "invalid_argument")  # type: ignore[arg-type]
    ended = ok(m0.stream_ended(t0, Liar("max_tokens")))  # type: ignore[arg-type]
    assert ended.next is NextStep.CONTINUE

    call = ToolCall(Name("c"), Name("bash"))
    assert type(call.id) is str and type(call.name) is str
    m, t = generating()
    stage = ok(m.token_estimate(t, StopReasonLike(3))).stage
    assert isinstance(stage, Generating) and type(stage.token_estimate) is int


class StopReasonLike(int):
    """An int subclass (like an IntEnum member)."""


# --- no message ever fails to build ------------------------------------------------------


def test_huge_integers_never_break_a_rejection_message() -> None:
    m, t = generating()
    assert "bits" in str(rejected(m.cancel(t, HUGE), "invalid_state"))
    assert "bits" in str(rejected(m.cancel(t, -HUGE), "invalid_state"))
    rejected(Continuation().begin_request("r", -HUGE, "x"), "invalid_request")  # type: ignore[arg-type]
    str(rejected(m.text_delta(HUGE, "x"), "stale_turn"))  # type: ignore[arg-type]
    huge_counts = {"last_turn_id": HUGE, "stage": {"kind": "idle"}}
    str(rejected(TurnProgress.from_json(huge_counts), "malformed_json"))
    data = Continuation().to_json()
    data["revision"] = -HUGE
    str(rejected(Continuation.from_json(data), "malformed_json"))
    with pytest.raises(TurnInputError) as raised:
        HistoryMark(HUGE, 1, 1)
    assert "bits" in str(raised.value)
    with pytest.raises(TurnInputError):
        ToolCall("c", "t", {"n": HUGE})
    assert describe(HUGE).startswith("<integer of")


def test_integers_are_bounded_to_64_bits_everywhere() -> None:
    m, t = generating()
    rejected(m.token_estimate(t, 2**63), "invalid_argument")
    assert ok(m.token_estimate(t, 2**63 - 1))
    with pytest.raises(TurnInputError):
        PresentationTruncated(2**64)
    exhausted = TurnProgress(last_turn_id=2**63 - 1)
    rejected(exhausted.start_turn(), "invalid_state")


# --- restore refuses what the live value could never hold -----------------------------------


def test_restore_refuses_a_checkpoint_id_the_continuation_would_not_generate() -> None:
    c = with_group()
    assert c.checkpoint is not None and c.checkpoint.id == "r#1"
    for foreign in ("r#2", "r#0", "r#", "r#01", "r#1x", "other#1"):
        rejected(
            Continuation.restore(
                c.messages,
                c.revision,
                c.durable_revision,
                request=c.request,
                checkpoint=replace(c.checkpoint, id=foreign),
                checkpoint_seq=c.checkpoint_seq,
            ),
            "invalid_restore",
        )
        data = c.to_json()
        data["checkpoint"]["id"] = foreign  # type: ignore[index]
        rejected(Continuation.from_json(data), "invalid_restore")


def test_a_stale_admission_never_matches_a_later_group() -> None:
    c = with_group()
    assert c.checkpoint is not None
    old = c.checkpoint.id
    c = ok(c.admit_call("r", old, LS))
    c = ok(c.complete_call("r", old, LS, ToolOutcome.ok("files")))
    assert c.checkpoint is not None
    second = ToolCall.of("c2", "bash", {"command": "ls"})
    msgs = c.checkpoint.resolved_messages().append(AssistantMessage("", (second,)))
    c = ok(c.checkpoint_tool_group("r", msgs, (second,)))
    assert c.checkpoint is not None and c.checkpoint.id != old
    rejected(c.admit_call("r", old, second), "checkpoint_not_found")
    again = ok(Continuation.from_json(json.loads(json.dumps(c.to_json()))))
    rejected(again.admit_call("r", old, second), "checkpoint_not_found")


def test_restore_never_raises_for_parts_of_the_wrong_type() -> None:
    rejected(Continuation.restore(["x"], 0, 0), "invalid_restore")  # type: ignore[list-item]
    rejected(Continuation.restore([], True, 0), "invalid_restore")  # type: ignore[arg-type]
    rejected(Continuation.restore([], 0, 0, marks=[(0, 1, 0)]), "invalid_restore")  # type: ignore[list-item]
    rejected(Continuation.restore([], 0, 0, provenance="copied"), "invalid_restore")  # type: ignore[arg-type]
    rejected(Continuation.import_legacy(5), "invalid_history")  # type: ignore[arg-type]
    rejected(Continuation.import_legacy([("user", 5)]), "invalid_history")
    rejected(Continuation.import_legacy([(HUGE, "x")]), "invalid_history")


# --- trust is never broader than what the human saw ---------------------------------------


def approve(ex: TurnExecution, call: ToolCall) -> TurnExecution:
    ex = ok(ex.request_approval(ApprovalRequest(call)))
    return ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution


def test_approving_a_shell_call_without_a_command_trusts_no_other_command() -> None:
    for args in ({}, {"command": ""}, {"command": 5}, {"cmd": "ls"}):
        bare = ToolCall.of("c", "bash", args)
        ex = approve(thinking(), bare)
        assert ex.trusted_scope(ToolCall.of("d", "bash", args)) is TrustScope.SESSION
        assert ex.trusted_scope(ToolCall.of("d", "bash", {"command": "rm -rf /"})) is None
        assert all(e.key.kind is not TrustKeyKind.NAME for e in ex.trust)


def test_shell_trust_includes_the_working_directory_and_every_argument() -> None:
    here = ToolCall.of("c", "bash", {"command": "make", "cwd": "/repo"})
    ex = approve(thinking(), here)
    assert ex.trusted_scope(ToolCall.of("d", "bash", {"command": "make", "cwd": "/repo"}))
    assert ex.trusted_scope(ToolCall.of("d", "bash", {"command": "make", "cwd": "/"})) is None
    assert ex.trusted_scope(ToolCall.of("d", "bash", {"command": "make"})) is None
    other_env = {"command": "make", "cwd": "/repo", "env": {"PATH": "/tmp"}}
    assert ex.trusted_scope(ToolCall.of("d", "bash", other_env)) is None
    key = trust_key(here)
    assert key.kind is TrustKeyKind.COMMAND and json.loads(key.detail) == here.argument_value()


def test_a_command_text_can_never_impersonate_another_calls_key() -> None:
    sneaky = ToolCall.of("c", "bash", {"command": '{"command":"ls","cwd":"/"}'})
    plain = ToolCall.of("d", "bash", {"command": "ls", "cwd": "/"})
    assert trust_key(sneaky) != trust_key(plain)


def test_shell_tools_must_be_names_not_one_string() -> None:
    with pytest.raises(TurnInputError):
        trust_key(LS, "bash")
    with pytest.raises(TurnInputError):
        TurnExecution(shell_tools="bash")  # type: ignore[arg-type]


# --- queue order holds across aborts ----------------------------------------------------


def test_after_an_abort_a_new_prompt_goes_out_behind_the_queued_ones() -> None:
    ex = thinking()
    ex = ex.admit_prompt(PromptKind.FOLLOW_UP, "f1").execution
    ex = ex.admit_prompt(PromptKind.STEERING, "s1").execution
    aborted = ex.abort()
    assert aborted.follow_up == ("f1",) and aborted.steering == ("s1",)
    step = aborted.admit_prompt(PromptKind.FOLLOW_UP, "f2")
    assert step.action == SendNext(("s1", "f1", "f2"))  # as finish_completion would send
    assert step.execution.phase == RunActive(Starting())
    assert step.execution.steering == () and step.execution.follow_up == ()
    steer = aborted.admit_prompt(PromptKind.STEERING, "s2")
    assert steer.action == SendNext(("s1", "s2", "f1"))
    # with nothing queued the prompt is simply sent, and during a turn it queues
    assert TurnExecution().admit_prompt(PromptKind.FOLLOW_UP, "x").action == SendNow("x")
    queued = step.execution.admit_prompt(PromptKind.FOLLOW_UP, "f3")
    assert queued.action == Queued(PromptKind.FOLLOW_UP, 0)
