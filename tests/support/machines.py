"""Shared builders for the machine tests: a fake clock, the spec's refund desk built in
code (and its navigation block, the spec's example), a writer that logs every call, and
the two phases the hostile-callable tests put a hook in (exit, entry or preparation)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from phaseflow.machine import EffectContext, PhaseMachine, State
from phaseflow.spec.model import (
    CallEffect,
    Phase,
    Preparation,
    SetEffect,
    Tool,
    Transition,
    Workflow,
)


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class LogWriter:
    """A writer over a dict that logs every call, in order."""

    def __init__(self, state: dict[str, Any], log: list[tuple[str, ...]] | None = None) -> None:
        self.state = state
        self.log: list[tuple[Any, ...]] = log if log is not None else []

    def set(self, key: str, value: Any) -> None:
        self.log.append(("set", key, value))
        self.state[key] = value

    def unset(self, key: str) -> None:
        self.log.append(("unset", key))
        self.state.pop(key, None)


def refund_desk(registry: Mapping[str, Callable[..., Any]] | None = None, **nav: Any) -> Workflow:
    """The spec's example workflow, built with the model classes."""
    from phaseflow.spec.model import Navigation

    calls: list[str] = []

    def fetch_refund_policy(ctx: Any, **kw: Any) -> dict[str, Any]:
        calls.append("fetch_refund_policy")
        return {"policy": {"name": "standard"}}

    def notify_customer(ctx: Any, **kw: Any) -> None:
        calls.append("notify_customer")

    reg: dict[str, Callable[..., Any]] = {
        "fetch_refund_policy": fetch_refund_policy,
        "notify_customer": notify_customer,
    }
    reg.update(registry or {})
    phases = [
        Phase(
            "greet",
            goal="Learn who the customer is and what they need.",
            instructions="Ask for the email address on the account. Be brief.",
            tools=["lookup_customer"],
            transitions=[Transition("locate_order", "state.customer_id", "Customer verified")],
        ),
        Phase(
            "locate_order",
            goal="Identify the order to refund.",
            requires=["customer_id"],
            needs=["order_id", "amount"],
            tools=["find_order"],
            transitions=[
                Transition("refund", "state.amount <= 500",
                           "Small refund, no approval from a manager"),
                Transition("escalate", "state.amount > 500"),
                Transition("escalate", None, "The customer asks for a human", "model"),
            ],
        ),
        Phase(
            "refund",
            goal="Issue the refund and confirm it.",
            requires=["order_id", "amount", "policy"],
            prepare=[Preparation("load_policy", CallEffect("fetch_refund_policy"), ["policy"])],
            instructions=(
                "Refund {{ state.amount }} for order {{ state.order_id }} under policy\n"
                "{{ state.policy.name }}."
            ),
            tools=["issue_refund"],
            on_exit=[CallEffect("notify_customer", {"channel": "email"})],
            transitions=[Transition("done", "state.refund_id")],
        ),
        Phase("escalate", goal="Hand the conversation to a human agent.", terminal=True),
        Phase("done", goal="Close the conversation politely.", terminal=True),
    ]
    wf = Workflow(
        name="refund-desk",
        initial="greet",
        description="Verify a customer, find the order, refund it or escalate.",
        phases={p.name: p for p in phases},
        tools={n: Tool(n) for n in ("lookup_customer", "find_order", "issue_refund")},
        registry=reg,
        navigation=Navigation(**nav),
        machine_factory=PhaseMachine.from_workflow,
    )
    _CALLS[id(wf)] = calls
    return wf


#: the refund desk's navigation block in ``locate_order``, entered from ``greet`` at turn 2
#: (the spec's example, exactly)
SPEC_BLOCK = """\
[Navigation]
Current phase: locate_order — Identify the order to refund.
Previous: greet (turn 2)
Still needed: order_id, amount
Tools: find_order
Possible next:
  → refund: Small refund, no approval from a manager (waiting for: amount)
  → escalate (when: state.amount > 500)
  → escalate: The customer asks for a human (you may ask for this)"""


_CALLS: dict[int, list[str]] = {}


def calls_of(wf: Workflow) -> list[str]:
    """The calls the refund desk's built-in callables recorded."""
    return _CALLS[id(wf)]


def chain(n: int, *, effects: bool = True, when: str | None = "state.go") -> Workflow:
    """``p0 -> p1 -> ... -> p{n-1} -> p0``, each step guarded by ``when``."""
    phases = []
    for i in range(n):
        phases.append(
            Phase(
                f"p{i}",
                goal=f"Phase {i}.",
                on_exit=[SetEffect({"left": i})] if effects else (),
                on_enter=[SetEffect({"entered": i})] if effects else (),
                transitions=[Transition(f"p{(i + 1) % n}", when)],
            )
        )
    return Workflow(name="chain", initial="p0", phases={p.name: p for p in phases},
                    machine_factory=PhaseMachine.from_workflow)


def workflow(
    phases: Iterable[Phase],
    initial: str | None = None,
    registry: Mapping[str, Callable[..., Any]] | None = None,
    **kw: Any,
) -> Workflow:
    """A workflow over ``phases`` (initial: the first)."""
    ps = list(phases)
    return Workflow(
        name=kw.pop("name", "test"),
        initial=initial or ps[0].name,
        phases={p.name: p for p in ps},
        registry=registry or {},
        machine_factory=PhaseMachine.from_workflow,
        **kw,
    )


def state(values: Mapping[str, Any] | None = None) -> State:
    return State(values)


# --- a hook in every position ----------------------------------------------------------


def positions_workflow(where: str, hook: str, also: str = "ok") -> Any:
    """``a -> b`` with ``hook`` in ``where`` (on_exit of a, on_enter of b, or a
    preparation of b), followed by a harmless ``also`` call; the registry names
    :func:`ok_call` ``ok`` and :func:`make_call` ``make``."""
    effects = [CallEffect(hook), CallEffect(also)]
    a = Phase("a", transitions=[Transition("b", "state.go")],
              on_exit=effects if where == "on_exit" else [])
    b = Phase("b", on_enter=effects if where == "on_enter" else [],
              requires=["made"] if where == "prepare" else [],
              prepare=[Preparation("p", CallEffect(hook), ("made",)),
                       Preparation("q", CallEffect("make"), ("made",))]
              if where == "prepare" else [])
    return a, b


def ok_call(ctx: EffectContext) -> dict[str, Any]:
    """The harmless call after the hook: it ran when ``ok_ran`` is set."""
    return {"ok_ran": True}


def make_call(ctx: EffectContext) -> dict[str, Any]:
    """The preparation that produces ``made`` after the hook's."""
    return {"made": 1}
