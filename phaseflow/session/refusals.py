"""What a session refuses or reports as an exception, in one place: the door
(:mod:`phaseflow.session.agent`) and the driver (:mod:`phaseflow.session.driver`) raise
them, a host catches them from ``phaseflow.session``."""

from __future__ import annotations

from phaseflow.errors import PhaseflowError


class SessionBusy(PhaseflowError):
    """A message arrived while a turn runs and the agent was built with
    ``busy="reject"``."""


class SessionFinished(PhaseflowError):
    """The session reached a terminal phase: it takes no more messages."""


class TurnFailed(PhaseflowError):
    """``Session.reply``: the turn failed or was cancelled; ``status`` says which and
    ``error`` the first error event's code and message (``provider_error: ...``)."""

    def __init__(self, message: str, *, status: str, error: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


class SessionError(PhaseflowError):
    """A session that cannot be opened as asked (another workflow, a removed phase)."""
