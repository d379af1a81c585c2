"""Turn-core values the turn tests build step by step and share: a continuation with a
request begun, with a tool group checkpointed, with every call finished, and the reply that
completes it; a turn's progress generating, and executing two tool calls; a turn execution
active (starting) and thinking."""

from __future__ import annotations

from phaseflow.turn import (
    AssistantMessage,
    Continuation,
    RequestOutcome,
    StopReason,
    SystemMessage,
    ToolCall,
    ToolOutcome,
    TurnExecution,
    TurnId,
    TurnProgress,
)
from tests.support.turn_strategies import ok

# --- continuations -------------------------------------------------------------------

T1 = TurnId(1)
LS = ToolCall.of("c1", "bash", {"command": "ls"})
CAT = ToolCall.of("c2", "read_file", {"path": "/etc/hosts"})


def started(content: str = "hi") -> Continuation:
    base = ok(Continuation().replace_system(SystemMessage("be brief")))
    return ok(base.begin_request("r1", T1, content))


def with_group(calls: tuple[ToolCall, ...] = (LS, CAT)) -> Continuation:
    c = started()
    assert c.request is not None
    return ok(
        c.checkpoint_tool_group("r1", c.request.messages.append(AssistantMessage("", calls)), calls)
    )


def cp_id(c: Continuation) -> str:
    assert c.checkpoint is not None
    return c.checkpoint.id


def finished(c: Continuation) -> Continuation:
    """Admit and complete every call of the checkpoint."""
    for e in c.checkpoint.effects:  # type: ignore[union-attr]
        c = ok(c.admit_tool_effect("r1", cp_id(c), e.call.id, e.call.name, e.call.argument_value()))
        c = ok(c.complete_call("r1", cp_id(c), e.call, ToolOutcome.ok(e.call.id)))
    return c


def reply(c: Continuation, text: str = "done") -> RequestOutcome:
    assert c.request is not None
    base = c.checkpoint.resolved_messages() if c.checkpoint else c.request.messages
    return RequestOutcome(
        c.request.id, c.request.turn_id, c.request.revision, base.append(AssistantMessage(text))
    )


# --- progress ----------------------------------------------------------------------

A = ToolCall.of("a", "bash", {"command": "ls"})
B = ToolCall.of("b", "read_file", {"path": "/x"})


def generating() -> tuple[TurnProgress, TurnId]:
    started = ok(TurnProgress().start_turn())
    return started.progress, started.turn_id


def executing() -> tuple[TurnProgress, TurnId]:
    m, t = generating()
    m = ok(ok(m.tool_call(t, A)).tool_call(t, B))
    return ok(m.stream_ended(t, StopReason.TOOL_USE)).progress, t


# --- executions ------------------------------------------------------------------------


def active() -> TurnExecution:
    """A turn begun: starting, before the provider is called."""
    return ok(TurnExecution().begin_turn())


def thinking() -> TurnExecution:
    """A turn whose provider call has started."""
    return ok(active().provider_started())
