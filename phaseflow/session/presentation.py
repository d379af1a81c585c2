"""A tool's output as the model is shown it: cut by the turn core's presentation rules,
the whole output kept by the store as a capture the model may read back (``read_output``)
as far as the capture bounds allow."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from phaseflow.errors import PhaseflowError
from phaseflow.session.runner_config import RunnerConfig
from phaseflow.turn.messages import ToolOutcome
from phaseflow.turn.output import (
    Capture,
    CaptureComplete,
    CaptureIncomplete,
    CaptureReason,
    OutputReference,
    PresentationComplete,
    PresentationTruncated,
    Selection,
    SelectionKind,
    SelectionUnit,
    ToolOutput,
    present_lines,
    result,
)
from phaseflow.turn.rejections import Rejected

T = TypeVar("T")


def _ok_value(value: T | Rejected) -> T:
    """A turn-core value built from values the runner made itself: a rejection is a bug."""
    if isinstance(value, Rejected):
        raise PhaseflowError(f"turn core refused the runner's value: {value}")
    return value


async def present(text: str, config: RunnerConfig, session_id: str,
                  captured_bytes: Callable[[], int]
                  ) -> tuple[ToolOutcome, tuple[str, int] | None]:
    """The model's view of a tool's output, cut by the turn core's presentation rules
    (whole lines, at most ``output_lines`` of them and ``output_chars`` characters; a
    first line longer than that is cut by bytes), the whole capture kept by the
    store under a reference of the session the note names (``read_output`` reads
    it back), and that capture. An output larger than the capture bounds
    (``capture_bytes`` an output, ``session_capture_bytes`` a session) is kept as
    far as they allow, and the result is an error naming why (never a silent cut).
    ``captured_bytes()`` is what the session keeps already (asked only for an output
    too long to show whole)."""
    limit_lines, limit_chars = config.output_lines, config.output_chars
    lines = text.splitlines(keepends=True)
    if len(lines) <= limit_lines and len(text) <= limit_chars:
        return ToolOutcome.ok(text), None
    data = text.encode()
    room = max(0, config.session_capture_bytes - captured_bytes())
    keep = min(len(data), config.capture_bytes, room)
    capture: Capture = CaptureComplete()
    if keep < len(data):
        capture = CaptureIncomplete(CaptureReason.CAPTURE_BYTE_LIMIT
                                    if keep == config.capture_bytes
                                    else CaptureReason.SESSION_DISK_QUOTA)
        text = data[:keep].decode(errors="ignore")  # the part that could be kept
        data = text.encode()
        lines = text.splitlines(keepends=True)
    fit, size = 0, 0
    for line in lines[:limit_lines]:
        size += len(line)
        if size > limit_chars:
            break
        fit += 1
    if fit == len(lines) or not data:  # what could be kept is all shown
        whole = ToolOutput.create(text, capture, PresentationComplete())
        return result(_ok_value(whole)), None
    token = await config.store.put_capture(data, session_id=session_id)
    digest = token.rpartition("-")[2]
    reference = _ok_value(OutputReference.create(token, "text/plain", len(data), digest))
    captured = (token, len(data))
    if fit:
        return result(_ok_value(present_lines(text, fit, capture=capture,
                                              reference=reference))), captured
    prefix = data[:limit_chars].decode(errors="ignore")
    shown = len(prefix.encode())
    selection = _ok_value(Selection.create(SelectionKind.CAPTURED_PREFIX,
                                           SelectionUnit.BYTES, 0, shown, len(data)))
    output = ToolOutput.create(prefix, capture, PresentationTruncated(len(data) - shown),
                               selection, reference)
    return result(_ok_value(output)), captured
