"""The names of the session's built-in tools, reserved by the format.

Beside the host's tools, a session offers two of its own: ``go_to_phase`` (when the
current phase has ``model`` transitions whose ``when`` holds) and ``record`` (when it
``collect``s keys). A catalogue tool of the same name would be offered twice and never
run (PF408); a phase's ``tools`` entry naming one governs nothing (PF409). The names live
here, in the spec layer, so that validation knows them without importing the session,
which takes them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["BUILTIN_TOOLS", "GO_TO_PHASE", "OFFERED_WHEN", "READ_OUTPUT", "RECORD"]

GO_TO_PHASE: Final = "go_to_phase"
RECORD: Final = "record"
#: reads back a tool output of the session that was cut for the model
READ_OUTPUT: Final = "read_output"
#: Every built-in tool's name, in the order a session offers them.
BUILTIN_TOOLS: Final[tuple[str, ...]] = (GO_TO_PHASE, RECORD, READ_OUTPUT)
#: When the session offers each built-in, for messages.
OFFERED_WHEN: Final[Mapping[str, str]] = {
    GO_TO_PHASE: "when the current phase has 'model' transitions whose 'when' holds",
    RECORD: "when the current phase collects keys",
    READ_OUTPUT: "in every phase once a tool output of the session was cut for the model",
}
