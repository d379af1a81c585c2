"""What the session's stateful test (tests/session/test_session_stateful.py) is built
from, besides its machine: the workflows it runs, each a desk (the small test desk, or the
bundled refund desk) with what the invariants must know of it (its phases, who may write
which key, which tools are idempotent or need approval, valid and invalid arguments); the
hypothesis strategies of a drawn reply and its calls; and how an invariant tells which
request a reply of the transcript answered (a compacted history starts with a summary)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from phaseflow.session.compaction import SUMMARY_HEADING
from phaseflow.session.core import CONTINUE_TEXT
from phaseflow.spec.loader import compile_file, compile_text
from phaseflow.spec.model import Workflow
from phaseflow.turn.messages import ToolCall, UserMessage
from tests.support.session_fakes import (
    DESK_COLLECT,
    DESK_EFFECT_KEYS,
    DESK_IDEMPOTENT,
    DESK_PHASES,
    DESK_WRITES,
    DESK_YAML,
    REFUND_PATH,
    REFUND_PHASES,
    DeskTools,
    Gate,
    RefundTools,
    desk_workflow,
    refund_hooks,
)


@dataclass(frozen=True)
class Desk:
    """A workflow the machine runs, and what a test must know of it."""

    name: str
    workflow: Workflow
    tools: Callable[[Gate], DeskTools]
    phases: tuple[str, ...]
    #: keys each source of state changes may write (``tools``: declared writes and
    #: collected keys; ``effects``/``prepare``: the workflow's effects)
    writes: Mapping[str, frozenset[str]]
    idempotent: frozenset[str]
    approval: frozenset[str]
    valid: Mapping[str, list[Any]]
    invalid: Mapping[str, list[str]]
    records: list[dict[str, Any]]
    policy: Callable[[ToolCall, Any], bool] | None = None
    #: of a move's 12 choices, how many go to an offered target (the rest anywhere) and
    #: how many of those to the furthest one (so that some runs reach the end)
    offered_moves: int = 12
    forward_moves: int = 8

    @property
    def catalogue(self) -> tuple[str, ...]:
        return tuple(self.workflow.tools or {})

    def needs_approval(self, name: str, arguments: str) -> bool:
        """The workflow's ``approval: always``, or the host's policy."""
        if name in self.approval:
            return True
        return self.policy is not None and self.policy(ToolCall("x", name, arguments), None)


def secret_notes(call: ToolCall, ctx: Any) -> bool:
    """The host's approval policy of the small desk: a secret note needs a human."""
    return call.name == "add_note" and "secret" in call.arguments


SMALL = Desk(
    name="stateful-desk", workflow=desk_workflow(), tools=DeskTools, phases=DESK_PHASES,
    writes={"tools": frozenset(k for ks in DESK_WRITES.values() for k in ks)
            | frozenset(k for ks in DESK_COLLECT.values() for k in ks),
            "effects": DESK_EFFECT_KEYS},
    idempotent=DESK_IDEMPOTENT, approval=frozenset({"pay"}),
    valid={"lookup": [{"q": "tea"}, {"q": "cake"}],
           "add_note": [{"text": "hello"}, {"text": "secret"}, {"text": "boom"}],
           "pay": [{}, {"n": 1}, {"n": 2}]},
    invalid={"lookup": ["{}", '{"q": 5}', '{"q": "x", "z": 1}', "{nope"],
             "add_note": ['{"text": 5}', '{"x": 1}', "[1"]},
    records=[{"name": "Ada"}, {"name": 7}, {"topic": "x"}, {}],
    policy=secret_notes,
)

REFUND = Desk(
    name="refund-desk", workflow=compile_file(REFUND_PATH, refund_hooks()),
    tools=RefundTools, phases=REFUND_PHASES,
    writes={"tools": frozenset({"customer_id", "customer", "verification_attempts", "order_id",
                                "order", "amount", "approval_status", "refund_id",
                                "refund_reason"}),
            "effects": frozenset({"approval_status", "policy"}),
            "prepare": frozenset({"policy"})},
    idempotent=frozenset({"crm.lookup_customer", "orders.search", "payments.issue_refund"}),
    approval=frozenset({"payments.issue_refund"}),
    valid={"crm.lookup_customer": [{"email": "ada@example.com"}, {"phone": "+15550100"}],
           "crm.verify_identity": [{"answer": "blue"}, {"answer": "wrong"}],
           "orders.select": [{"order_id": "O-1"}, {"order_id": "O-big"}],
           "payments.issue_refund": [{"order_id": "O-1", "amount": 120.0},
                                     {"order_id": "O-big", "amount": 900.0}],
           "helpdesk.add_note": [{"text": "over to you"}]},
    invalid={"crm.lookup_customer": ["{}", '{"email": "x", "fax": 1}'],
             "payments.issue_refund": ['{"order_id": "O-1"}', '{"order_id": "O-1", "amount": 0}',
                                       '{"order_id": "O-1", "amount": "lots"}']},
    records=[{"refund_reason": "broken"}, {"refund_reason": 3}, {"amount": 1}, {}],
    offered_moves=2, forward_moves=0,
)

#: the small desk with timers: intake moves to work after 10 minutes (``after``), review
#: back to work after 30 (a guard on ``seconds_in_phase``); work's ``on_enter`` hook
#: stops at the gate while ``ON_ENTER[0]`` (the running test machine) has it gated
TIMER_DESK_YAML = DESK_YAML.replace("""        description: The customer is known
""", """        description: The customer is known
      - to: work
        after: 10m
""").replace("""      - to: work
        trigger: model
  closed:""", """      - to: work
        trigger: model
      - to: work
        when: seconds_in_phase >= 1800
  closed:""")
#: the phases whose timer moves the conversation on whenever it fires
TIMED_PHASES = ("intake", "review")
ON_ENTER: list[Any] = [None]


async def gated_audit_hook(ctx: Any) -> dict[str, Any]:
    """work's ``on_enter`` call in the timer desk: as the small desk's, and a point where
    a test stops (and kills) the turn that enters work."""
    machine = ON_ENTER[0]
    if machine is not None and machine.on_enter_gated:
        await machine.gate.point("on_enter")
    return {"audit": "entered"}


TIMER_DESK = Desk(
    name="timer-desk", workflow=compile_text(TIMER_DESK_YAML, {"audit_hook": gated_audit_hook},
                                             path="timer-desk.yaml"),
    tools=SMALL.tools, phases=SMALL.phases, writes=SMALL.writes, idempotent=SMALL.idempotent,
    approval=SMALL.approval, valid=SMALL.valid, invalid=SMALL.invalid, records=SMALL.records,
    policy=SMALL.policy,
)

HALLUCINATED = ["delete_all", "crm.lookup", "pay "]


#: one call of a drawn reply: how it is made, a choice among the candidates (taken
#: modulo their number when the request is known), and how its id is made
CALL = st.tuples(
    st.sampled_from(["offered"] * 3 + ["invalid", "other_phase", "hallucinated", "move",
                                       "move", "move_anywhere", "record"]),
    st.integers(0, 11), st.integers(0, 11),
    st.sampled_from(["fresh", "fresh", "fresh", "repeat", "empty"]))
#: one drawn reply (every field drawn; each kind reads the ones it needs)
REPLY = st.tuples(
    st.sampled_from(["text"] * 4 + ["group"] * 8 + ["retryable"] * 2 + ["fatal", "raise"]
                    + ["hang"] * 3 + ["cut_text", "cut_group", "context_full"]),
    st.lists(CALL, min_size=1, max_size=4),
    st.sampled_from(["", "ok", "let me check"]),
    st.sampled_from([None, 0.0, 2.5, 1e6]))
SCRIPT = st.lists(REPLY, min_size=1, max_size=8)


def pick(options: list[Any], n: int) -> Any:
    return options[n % len(options)]


def continues(sent: tuple[Any, ...]) -> bool:
    """A request that asks the model to go on with a reply cut at its output limit: it
    ends with the reply so far and the ask (neither is stored: the parts are stitched
    into one message)."""
    return bool(sent) and isinstance(sent[-1], UserMessage) and sent[-1].content == (
        CONTINUE_TEXT)


def answered_at(request: Any, history: tuple[Any, ...], k: int) -> bool:
    """``request`` is the one the reply at position ``k`` of the transcript answered: it
    carried the transcript up to ``k`` (after a summary of its start, when compacted)."""
    sent = tuple(request.history)
    if continues(sent):
        sent = sent[:-2]
    if sent and is_summary(sent[0]):
        rest = sent[1:]
        return len(rest) <= k and history[k - len(rest):k] == rest
    return len(sent) == k and sent == history[:k]


def is_summary(message: Any) -> bool:
    return isinstance(message, UserMessage) and isinstance(message.content, str) and (
        message.content.startswith(SUMMARY_HEADING))
