"""A property of the session's pure step core: any sequence of inputs leaves every call with
exactly one result and the history well formed.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phaseflow.providers.protocol import ProviderFailure
from phaseflow.session.values import (
    BoundaryDone,
    Cancel,
    Limits,
    Replied,
    RequestFailed,
    Resolve,
    RunBoundary,
    RunTools,
    Send,
    ToolDone,
)
from phaseflow.turn.continuation import EffectState
from phaseflow.turn.execution import ApprovalDecision, PromptKind
from tests.support.core_steps import TERMINAL, WORK, effects, ok, started
from tests.support.session_fakes import (
    Trace,
    open_or_doubled,
    reply,
)

# --- a property: any sequence of inputs keeps the history well formed -----------------------

CALLS = st.lists(st.tuples(st.sampled_from(["a", "b", "c", ""]),
                           st.sampled_from(["lookup", "open_ticket", "pay", "go_to_phase",
                                            "record", "ghost"]),
                           st.sampled_from(['{"q":"x"}', "{}", '{"phase":"review"}', "{x"])),
                 max_size=4)

OPS = st.lists(st.one_of(
    st.tuples(st.just("reply"), st.text("ab", max_size=2), CALLS),
    st.tuples(st.just("fail"), st.booleans()),
    st.tuples(st.just("done"), st.integers(0, 3)),
    st.tuples(st.just("boundary"), st.booleans()),
    st.tuples(st.just("resolve"), st.sampled_from(list(ApprovalDecision))),
    st.tuples(st.just("cancel")),
    st.tuples(st.just("send"), st.sampled_from(["x", "y"])),
    st.tuples(st.just("stale")),
), max_size=30)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_any_input_sequence_leaves_every_call_with_exactly_one_result(ops: list[Any]) -> None:
    """Whatever a runner may legitimately feed, in whatever order (and stale inputs on
    top): a call is handed out once, only once it is admitted; once no group is open,
    every call in the history has exactly one result."""
    t = started(Limits(max_steps=4, max_retries=1))
    ran: set[tuple[str, str]] = set()
    running: list[str] = []
    boundary: RunBoundary | None = None
    for op in ops:
        kind = op[0]
        rid = t.core.request_id
        event: Any
        if kind == "reply" and rid is not None:
            event = Replied(rid, reply(op[1], *op[2]), WORK)
        elif kind == "fail" and rid is not None:
            event = RequestFailed(rid, ProviderFailure("x", retryable=op[1]))
        elif kind == "done" and running:
            event = ToolDone(running.pop(op[1] % len(running)), ok(ticket="T"))
        elif kind == "boundary" and boundary is not None:
            event = BoundaryDone(TERMINAL if op[1] else WORK, final=boundary.final)
            boundary = None
        elif kind == "resolve" and t.core.status == "awaiting_approval":
            pending = t.core.pending_approval
            assert pending is not None
            event = Resolve(pending.call.id, op[1])
        elif kind == "cancel" and boundary is None:
            event = Cancel(1.0)
            running = []
        elif kind == "send" and t.core.status != "finished" and boundary is None:
            event = Send(op[1], WORK, PromptKind.FOLLOW_UP)
        elif kind == "stale":
            before = t.core
            assert t.feed(Replied("s:0:0", reply("old"), WORK)) == ()
            assert t.feed(ToolDone("never", ok())) == ()
            assert t.core is before
            continue
        else:
            continue
        for c in t.feed(event):
            if isinstance(c, RunTools):
                group = t.core.group
                assert group is not None
                for p in c.calls:
                    key = (group.checkpoint_id, p.call.id)
                    assert key not in ran, "a call was handed to the runner twice"
                    assert effects(t)[p.call.id] is EffectState.ADMITTED
                    assert p.kind in ("run", "move", "approval")
                    ran.add(key)
                    running.append(p.call.id)
            elif isinstance(c, RunBoundary):
                boundary = c
        _one_record_per_call(t)
        if t.core.group is None:
            assert open_or_doubled(t.core.history()) == {}


def _one_record_per_call(t: Trace) -> None:
    """A call's life is one record in two halves that agree: the group's entry has ended
    exactly when the ledger's effect is completed, and the ledger's effect holds the very
    call the group runs; no running call is marked anywhere else."""
    assert t.core.execution.active_tools == ()
    group = t.core.group
    if group is None:
        return
    checkpoint = t.core.continuation.checkpoint
    assert checkpoint is not None and checkpoint.id == group.checkpoint_id
    for p in group.calls:
        effect = checkpoint.effect(p.call.id)
        assert effect is not None and effect.call == p.call
        assert (p.ended is not None) == (effect.state is EffectState.COMPLETED), (p, effect)
