"""The edge rule: in which order one transition is checked, written once.

A transition ("edge") from the current phase to a target is checked in this order
(docs/embedding.md, ``evaluate_for_transition``):

1. its ``when`` — false: the edge is closed;
2. the target exists — else closed;
3. the target's entry ``guard`` — false: closed;
4. the target's ``requires`` — all present: the edge is **ready**; some absent and the
   target has preparations: the edge is **preparable** (a turn boundary or a model request
   runs them and checks again); some absent and no preparations: closed.

Every reader of that order asks :func:`check_edge`: the machine's boundary and model
requests, the navigation block ("waiting for"), the pytransitions adapter, and the static
check PF206 (through :func:`always_ready`, the rule read without a state). A key is absent
when it is not in the state or its value is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from phaseflow.expr import Guard, GuardContext
from phaseflow.spec.model import Phase

__all__ = [
    "READY",
    "EdgeStatus",
    "EdgeVerdict",
    "always_ready",
    "check_edge",
    "decided_by_when",
    "missing_keys",
]

#: ``ready``: may be taken now; ``preparable``: only absent ``requires`` stand in the way
#: and the target has preparations; ``closed``: this edge does not apply now.
EdgeVerdict = Literal["ready", "preparable", "closed"]

#: Which check closed or held the edge: ``when``, ``target`` (no such phase), ``guard``
#: (the target's entry guard), ``requires`` (absent keys); ``None`` when ready.
EdgeStop = Literal["when", "target", "guard", "requires"]


class EdgeStatus(NamedTuple):
    """What :func:`check_edge` found for one edge."""

    verdict: EdgeVerdict
    #: the check that stopped the edge (``None`` when ready)
    stopped_by: EdgeStop | None = None
    #: the target's absent required keys, in the order written (``stopped_by == "requires"``)
    missing: tuple[str, ...] = ()
    #: a guard's run-time error met on the way: ``(which, message)`` with ``which`` one of
    #: ``"when"`` and ``"guard"``; the guard counted as false
    error: tuple[Literal["when", "guard"], str] | None = None

    @property
    def ready(self) -> bool:
        return self.verdict == "ready"


#: The status of every ready edge (:func:`check_edge` returns this very value).
READY = EdgeStatus("ready")
_CLOSED_WHEN = EdgeStatus("closed", "when")
_CLOSED_TARGET = EdgeStatus("closed", "target")
_CLOSED_GUARD = EdgeStatus("closed", "guard")


def _closed_by(which: Literal["when", "guard"], error: str | None) -> EdgeStatus:
    """The edge a false ``when`` or entry guard closes, with the guard's error if it failed."""
    if error is not None:
        return EdgeStatus("closed", which, (), (which, error))
    return _CLOSED_WHEN if which == "when" else _CLOSED_GUARD


def missing_keys(requires: tuple[str, ...], state: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of ``requires`` that are absent from ``state`` (absent or ``None``)."""
    return tuple(k for k in requires if state.get(k) is None)


def check_edge(
    when: Guard | None,
    target: Phase | None,
    state: Mapping[str, Any],
    ctx: GuardContext | None,
) -> EdgeStatus:
    """Check one edge in the rule's order (see the module docstring). Pure.

    ``ctx`` is the current phase's guard context: an entry guard is evaluated with the
    phase being left, since the target has not been entered.
    """
    if when is not None:
        r = when.evaluate(state, ctx)
        if not r.value:
            return _closed_by("when", r.error)
    if target is None:
        return _CLOSED_TARGET
    guard = target.guard
    if guard is not None:
        r = guard.evaluate(state, ctx)
        if not r.value:
            return _closed_by("guard", r.error)
    if target.requires:
        missing = missing_keys(target.requires, state)
        if missing:
            return EdgeStatus("preparable" if target.prepare else "closed", "requires", missing)
    return READY


def always_ready(when: Guard | None, target: Phase | None) -> bool:
    """The rule read without a state: is this edge ready whatever the state holds? (No
    ``when``, an existing target with no entry guard and no required keys.)"""
    return when is None and decided_by_when(target)


def decided_by_when(target: Phase | None) -> bool:
    """Is an edge to ``target`` decided by its ``when`` alone (the target exists and has no
    entry guard and no required keys)? Then it is ready exactly when its ``when`` is
    absent or true, and closed by the ``when`` otherwise: what a hot loop may check
    without calling :func:`check_edge`."""
    return target is not None and target.guard is None and not target.requires
