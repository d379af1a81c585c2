"""A session's captured tool outputs, read back: the built-in ``read_output`` tool the
model is offered once an output of its session was cut, ``Session.read_output``,
``phaseflow sessions output`` and ``GET /v1/sessions/{id}/outputs/{ref}``, all by one
rule.

A tool's output longer than the agent shows the model is captured whole (up to the
capture bounds) under a reference that belongs to the session
(:func:`~phaseflow.stores.base.capture_reference`): a session reads only its own
captures, and they go when it is deleted. A read is a byte range, read as a range from
the store; the text returned is cut at whole UTF-8 characters, and says which bytes it
holds and where the rest begins.
"""

from __future__ import annotations

from collections.abc import Sequence

from phaseflow.errors import PhaseflowError
from phaseflow.session.values import Done, OfferedTool
from phaseflow.spec.builtin_tools import READ_OUTPUT
from phaseflow.stores.base import Store, capture_owner
from phaseflow.turn.messages import ToolCall, ToolOutcome

__all__ = ["READ_OUTPUT", "READ_OUTPUT_TOOL", "OutputNotFound", "owns", "read_output",
           "run_read_output", "shown_range"]

#: the most bytes one read returns when the reader gives no limit
DEFAULT_LIMIT = 20_000

READ_OUTPUT_TOOL = OfferedTool(
    READ_OUTPUT,
    "Read more of a tool output that was cut: the result of that call names its "
    "reference. Returns the bytes from offset (0: the start) on, at most limit of them, "
    "and where the rest begins.",
    {
        "type": "object",
        "properties": {
            "reference": {"type": "string", "description": "the output's reference"},
            "offset": {"type": "integer", "minimum": 0,
                       "description": "the byte to start from (default 0)"},
            "limit": {"type": "integer", "minimum": 1,
                      "description": f"the most bytes to read (default {DEFAULT_LIMIT})"},
        },
        "required": ["reference"],
        "additionalProperties": False,
    },
    read_only=True,
)


class OutputNotFound(PhaseflowError):
    """The session has no captured output of that reference."""


def owns(session_id: str, reference: str) -> bool:
    """Whether ``reference`` names a capture of ``session_id``."""
    return isinstance(reference, str) and reference.startswith(capture_owner(session_id) + "-")


async def read_output(store: Store, session_id: str, reference: str, offset: int = 0,
                      limit: int | None = None) -> tuple[bytes, int]:
    """At most ``limit`` bytes (default :data:`DEFAULT_LIMIT`) of the session's captured
    output ``reference`` from byte ``offset``, and the output's size.
    :class:`OutputNotFound` for a reference that is not the session's, or is gone."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise OutputNotFound(f"offset must be a byte count (0 or more), not {offset!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise OutputNotFound(f"limit must be a positive number of bytes, not {limit!r}")
    got = None
    if owns(session_id, reference):
        got = await store.read_capture(reference, offset,
                                       DEFAULT_LIMIT if limit is None else limit)
    if got is None:
        raise OutputNotFound(f"session {session_id!r} has no captured output {reference!r}")
    return got


def shown_range(data: bytes, offset: int, size: int) -> tuple[str, int, int]:
    """The text of a read (``data``, from byte ``offset`` of an output of ``size``
    bytes) cut at whole UTF-8 characters, and the byte range it holds."""
    start, end = 0, len(data)
    if offset > 0:
        while start < min(3, end) and data[start] & 0xC0 == 0x80:
            start += 1  # inside a character: from the next one
    if offset + end < size:
        i, back = end - 1, 0
        while i > start and back < 3 and data[i] & 0xC0 == 0x80:
            i, back = i - 1, back + 1
        if i >= start:
            lead = data[i]
            need = 1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4
            if end - i < need:
                end = i  # a character cut at the end: it starts the next read
    return data[start:end].decode("utf-8", errors="replace"), offset + start, offset + end


def tool_text(reference: str, data: bytes, offset: int, size: int) -> str:
    """What the model reads: the bytes' text, then which bytes they are and where the
    rest begins."""
    text, start, end = shown_range(data, offset, size)
    if end >= size:
        rest = "this is the end of the output"
    else:
        rest = (f"{size - end} more bytes: read_output(reference={reference!r}, "
                f"offset={end})")
    return f"{text}\n[bytes {start}-{end} of {size} of output {reference}; {rest}]"


async def run_read_output(store: Store, session_id: str,
                          captures: Sequence[tuple[str, int]], call: ToolCall) -> Done:
    """The ``read_output`` tool's call: a range of one of the session's captured outputs
    (``captures``: those its core recorded, named when the reference is not one)."""
    arguments = call.argument_value()
    if not isinstance(arguments, dict):
        return Done(ToolOutcome.error("read_output needs a reference"), "refused")
    reference = arguments.get("reference")
    offset = arguments.get("offset", 0)
    limit = arguments.get("limit")
    try:
        data, size = await read_output(store, session_id,
                                       str(reference), offset, limit)
    except OutputNotFound as missing:
        known = ", ".join(r for r, _ in captures) or "none"
        return Done(ToolOutcome.error(f"{missing}; this session's outputs: {known}"),
                    "error")
    return Done(ToolOutcome.ok(tool_text(str(reference), data, offset, size)), "ok")
