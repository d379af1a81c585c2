"""What the tests of the session's pure step core share: a working phase with the desk's
tools, a terminal one, and small readers of a :class:`Trace`'s commands and ledger."""

from __future__ import annotations

from typing import Any

from phaseflow.session.values import CallProvider, Core, Done, Limits, RunTools, Send
from phaseflow.turn.continuation import EffectState
from phaseflow.turn.messages import ToolOutcome
from tests.support.session_fakes import Q_SCHEMA, Trace, go_to_phase, offered, view

WORK = view("work", offered("lookup", writes=("topic",), parameters=Q_SCHEMA),
            offered("open_ticket", writes=("ticket",)),
            offered("pay", approval=True, writes=("paid",)),
            go_to_phase("review", "intake"))
TERMINAL = view("closed", terminal=True)


def ok(text: str = "done", **writes: Any) -> Done:
    return Done(ToolOutcome.ok(text), "ok", tuple(writes.items()))


def started(limits: Limits | None = None, phase_view: Any = WORK) -> Trace:
    """A trace whose first turn has begun: the first request is asked."""
    t = Trace(Core("s"), limits or Limits())
    t.feed(Send("hello", phase_view))
    return t


def request_id(t: Trace) -> str:
    last = [c for c in t.commands if isinstance(c, CallProvider)][-1]
    return last.request_id


def run_tools(commands: tuple[Any, ...]) -> RunTools:
    runs = [c for c in commands if isinstance(c, RunTools)]
    assert len(runs) == 1, commands
    return runs[0]


def effects(t: Trace) -> dict[str, EffectState]:
    checkpoint = t.core.continuation.checkpoint
    assert checkpoint is not None
    return {e.call.id: e.state for e in checkpoint.effects}
