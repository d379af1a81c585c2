"""Adapters between phaseflow workflows and other state-machine libraries.

* :mod:`phaseflow.interop.transitions`: build a pytransitions ``Machine`` from a compiled
  workflow (optional dependency: ``pip install 'phaseflow[transitions]'``).

Importing this package never imports the optional libraries; building a machine does.
"""

from phaseflow.interop.transitions import (
    ADVANCE,
    REQUEST_PREFIX,
    TRACKER_ATTRIBUTE,
    Tracker,
    TransitionsNotInstalled,
    WorkflowModel,
    build_machine,
    request,
    request_trigger,
    tracker_of,
    turn_boundary,
)

__all__ = [
    "ADVANCE",
    "REQUEST_PREFIX",
    "TRACKER_ATTRIBUTE",
    "Tracker",
    "TransitionsNotInstalled",
    "WorkflowModel",
    "build_machine",
    "request",
    "request_trigger",
    "tracker_of",
    "turn_boundary",
]
