"""Typed rejections: the one way the turn core says "no".

Every operation of the turn core returns either the next value or a :class:`Rejected`.
A rejection is a value, never an exception, because a refused event (a stale outcome, a
duplicate completion, a second admission of a tool call) is an ordinary, expected part
of running an agent concurrently with a user, a provider stream and a crashing host.
A rejection never changes anything: the caller still holds the value it had.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ParamSpec, TypeGuard, TypeVar

from phaseflow.turn import inputs as i

__all__ = ["Rejected", "RejectionReason", "is_rejected", "refusing"]

T = TypeVar("T")
P = ParamSpec("P")


class RejectionReason(StrEnum):
    """Why an operation was refused. The string values are stable and part of the JSON API."""

    # Part 1: turn execution
    TURN_ACTIVE = "turn_active"
    NOT_ACTIVE = "not_active"
    INVALID_PHASE = "invalid_phase"
    NO_PENDING_APPROVAL = "no_pending_approval"
    APPROVAL_NOT_FOUND = "approval_not_found"
    APPROVAL_PENDING = "approval_pending"
    TOOL_ALREADY_ACTIVE = "tool_already_active"
    TOOL_NOT_ACTIVE = "tool_not_active"
    INVALID_EDIT_RANGE = "invalid_edit_range"
    # Part 2: turn state
    STALE_TURN = "stale_turn"
    INVALID_STATE = "invalid_state"
    UNKNOWN_CALL = "unknown_call"
    DUPLICATE_RESULT = "duplicate_result"
    CANCELLING = "cancelling"
    # Part 3: continuation
    EFFECT_RECONCILIATION_REQUIRED = "effect_reconciliation_required"
    REQUEST_ACTIVE = "request_active"
    NO_ACTIVE_REQUEST = "no_active_request"
    UNKNOWN_REQUEST = "unknown_request"
    INVALID_REQUEST = "invalid_request"
    INVALID_MARK = "invalid_mark"
    DUPLICATE_OUTCOME = "duplicate_outcome"
    STALE_OUTCOME = "stale_outcome"
    HISTORY_MISMATCH = "history_mismatch"
    TOOL_EFFECTS_INCOMPLETE = "tool_effects_incomplete"
    INVALID_TOOL_CALLS = "invalid_tool_calls"
    CHECKPOINT_NOT_FOUND = "checkpoint_not_found"
    NO_CHECKPOINT = "no_checkpoint"
    CALL_NOT_FOUND = "call_not_found"
    DUPLICATE_ADMISSION = "duplicate_admission"
    TOOL_CALL_IDENTITY_MISMATCH = "tool_call_identity_mismatch"
    NOT_ADMITTED = "not_admitted"
    CONFLICTING_TOOL_OUTCOME = "conflicting_tool_outcome"
    MARK_NOT_FOUND = "mark_not_found"
    BRANCH_EXISTS = "branch_exists"
    BRANCH_NOT_FOUND = "branch_not_found"
    INVALID_HISTORY = "invalid_history"
    INVALID_RESTORE = "invalid_restore"
    # Part 4: tool output
    INVALID_OUTPUT = "invalid_output"
    REFERENCE_REQUIRED = "reference_required"
    INVALID_REFERENCE = "invalid_reference"
    INVALID_SELECTION = "invalid_selection"
    # Every part: an argument that is not what the parameter accepts
    INVALID_ARGUMENT = "invalid_argument"
    # Every part: untrusted JSON
    MALFORMED_JSON = "malformed_json"


@dataclass(frozen=True, slots=True)
class Rejected:
    """An operation was refused; nothing changed.

    ``reason`` is for programs (match on it), ``detail`` is for people (log it).
    """

    reason: RejectionReason
    detail: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", i.member(RejectionReason, self.reason, "reason"))
        object.__setattr__(self, "detail", i.text(self.detail, "detail"))

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason.value, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value


def is_rejected(value: object) -> TypeGuard[Rejected]:
    """True when ``value`` is a rejection (a convenience for ``isinstance``)."""
    return isinstance(value, Rejected)


def refusing(reason: RejectionReason) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Make an operation answer a refused argument with ``Rejected(reason)``.

    For operations whose result already includes ``Rejected``: a :class:`TurnInputError`
    raised while the operation reads its arguments becomes the documented rejection, so
    the caller gets a value, never an exception, for bad input.
    """

    def wrap(operation: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(operation)
        def checked(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return operation(*args, **kwargs)
            except i.TurnInputError as exc:
                return Rejected(reason, str(exc))  # type: ignore[return-value]

        return checked

    return wrap
