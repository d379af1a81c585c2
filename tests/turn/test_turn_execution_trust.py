"""Turn execution: approvals requested and resolved, and the trust they leave by key and scope."""

from __future__ import annotations

from dataclasses import replace

from phaseflow.turn import (
    ApprovalDecision,
    ApprovalRequest,
    ToolCall,
    TrustEntry,
    TrustKey,
    TrustKeyKind,
    TrustScope,
    TurnExecution,
    trust_key,
)
from tests.support.turn_strategies import (
    assert_json_identity,
    ok,
    rejected,
)
from tests.support.turn_values import LS, thinking


def test_request_approval_never_replaces_a_pending_one() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    other = ApprovalRequest(ToolCall.of("c2", "bash", {"command": "pwd"}))
    rejected(ex.request_approval(other), "approval_pending")
    rejected(TurnExecution().request_approval(other), "not_active")


def test_resolve_approval_rejections() -> None:
    rejected(thinking().resolve_approval(None, ApprovalDecision.APPROVE), "no_pending_approval")
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    rejected(ex.resolve_approval("other", ApprovalDecision.APPROVE), "approval_not_found")


def test_resolve_approval_none_matches_pending() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    resolved = ok(ex.resolve_approval(None, ApprovalDecision.REJECT))
    assert resolved.approval.call_id == "c1" and not resolved.approved
    assert resolved.execution.pending_approval is None
    assert resolved.execution.trust == ()


def test_approve_session_and_turn_store_trust_by_key() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    ex = ok(ex.resolve_approval("c1", ApprovalDecision.APPROVE_SESSION)).execution
    same_cmd = ToolCall.of("c9", "bash", {"command": "ls"})
    other_cmd = ToolCall.of("c9", "bash", {"command": "rm -rf /"})
    assert ex.trusted_scope(same_cmd) is TrustScope.SESSION
    assert ex.trusted_scope(other_cmd) is None

    read = ToolCall.of("r1", "read_file", {"path": "/a"})
    ex = ok(
        ok(ex.request_approval(ApprovalRequest(read))).resolve_approval(
            None, ApprovalDecision.APPROVE_TURN
        )
    ).execution
    assert ex.trusted_scope(ToolCall.of("r2", "read_file", {"path": "/a"})) is TrustScope.TURN
    assert ex.trusted_scope(ToolCall.of("r2", "read_file", {"path": "/b"})) is None
    done = ok(ok(ex.begin_completion()).finish_completion()).execution
    assert done.trusted_scope(read) is None  # turn trust dropped
    assert done.trusted_scope(same_cmd) is TrustScope.SESSION  # session trust kept


def test_plain_approve_stores_no_trust() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    assert ok(ex.resolve_approval(None, ApprovalDecision.APPROVE)).execution.trust == ()


def test_trusted_scope_falls_back_to_a_host_set_bare_name() -> None:
    host = TurnExecution(trust=(TrustEntry(TrustKey("list_files"), TrustScope.SESSION),))
    assert (
        host.trusted_scope(ToolCall.of("y", "list_files", {"path": "/any"})) is TrustScope.SESSION
    )
    assert host.trusted_scope(ToolCall.of("y", "read_file", {})) is None


def test_approving_a_call_without_arguments_trusts_only_that_call() -> None:
    no_args = ToolCall.of("x", "list_files", {})
    ex = ok(thinking().request_approval(ApprovalRequest(no_args)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution
    assert ex.trusted_scope(ToolCall.of("z", "list_files", {})) is TrustScope.SESSION
    assert ex.trusted_scope(ToolCall.of("y", "list_files", {"path": "/any"})) is None


def test_trusted_scope_prefers_the_specific_key_over_the_bare_name() -> None:
    bare = TrustEntry(TrustKey("bash"), TrustScope.SESSION)  # only a host sets a bare name
    ex = ok(replace(thinking(), trust=(bare,)).request_approval(ApprovalRequest(LS)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_TURN)).execution  # bash + ls
    assert ex.trusted_scope(LS) is TrustScope.TURN  # specific key first
    assert ex.trusted_scope(ToolCall.of("y", "bash", {"command": "pwd"})) is TrustScope.SESSION
    after = ok(ok(ex.begin_completion()).finish_completion()).execution
    assert after.trusted_scope(LS) is TrustScope.SESSION  # falls back once turn is gone


def test_resolve_approval_reads_a_plain_string_decision_by_value() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    resolved = ok(ex.resolve_approval(None, "reject"))  # type: ignore[arg-type]
    assert not resolved.approved and resolved.execution.trust == ()
    session = ok(ex.resolve_approval(None, "approve_session"))  # type: ignore[arg-type]
    assert session.execution.trusted_scope(LS) is TrustScope.SESSION


def test_trust_key_of_arguments_with_a_lone_surrogate() -> None:
    odd = ToolCall.of("s", "write_file", {"text": "\ud800"})
    assert trust_key(odd).kind is TrustKeyKind.ARGUMENTS
    ex = ok(thinking().request_approval(ApprovalRequest(odd)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution
    assert ex.trusted_scope(odd) is TrustScope.SESSION
    assert_json_identity(ex, TurnExecution.from_json)


def test_trust_keys() -> None:
    assert trust_key(LS) == TrustKey("bash", TrustKeyKind.COMMAND, '{"command":"ls"}')
    no_args = trust_key(ToolCall.of("a", "t", {}))  # never the bare name: that trusts all calls
    assert no_args.kind is TrustKeyKind.ARGUMENTS and len(no_args.detail) == 64
    k1 = trust_key(ToolCall.of("a", "t", {"x": 1, "y": 2}))
    k2 = trust_key(ToolCall.of("b", "t", {"y": 2, "x": 1}))
    assert k1 == k2 and k1.kind is TrustKeyKind.ARGUMENTS and len(k1.detail) == 64
    assert trust_key(ToolCall.of("a", "t", {"x": 2})) != k1
    # the shell-like set is configurable
    run = ToolCall.of("a", "run", {"command": "ls"})
    assert trust_key(run).kind is TrustKeyKind.ARGUMENTS
    assert TurnExecution(shell_tools=("run",)).trust_key(run) == TrustKey(
        "run", TrustKeyKind.COMMAND, '{"command":"ls"}'
    )


def test_session_trust_is_never_narrowed_to_turn() -> None:
    ex = ok(thinking().request_approval(ApprovalRequest(LS)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_SESSION)).execution
    ex = ok(ex.request_approval(ApprovalRequest(LS)))
    ex = ok(ex.resolve_approval(None, ApprovalDecision.APPROVE_TURN)).execution
    assert ex.abort().trusted_scope(LS) is TrustScope.SESSION
