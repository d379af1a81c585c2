"""Part 4 - tool output: what was captured versus what the model was shown.

A tool's output is often larger than what the model should see, and capturing it can
itself fail (quotas, a full disk, a timeout). Conflating "captured" with "shown" is how
agents silently act on half an answer. This module keeps the two apart:

* :data:`Capture` says whether the captured bytes are the whole output;
* :data:`Presentation` says whether the model saw all of the captured bytes;
* :class:`Selection` says which range it saw; :class:`OutputReference` names the full
  captured bytes (an opaque token, never a path), required whenever anything was cut.

:func:`result` turns an output into the model-facing :class:`ToolOutcome`; an
incomplete capture is always an error, even when a prefix of it is shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from phaseflow.turn import inputs as i
from phaseflow.turn import jsonio as j
from phaseflow.turn.inputs import evolve
from phaseflow.turn.jsonio import JsonValue, Malformed
from phaseflow.turn.messages import ToolOutcome
from phaseflow.turn.rejections import Rejected, RejectionReason, refusing

__all__ = [
    "Capture",
    "CaptureComplete",
    "CaptureIncomplete",
    "CaptureReason",
    "OutputReference",
    "Presentation",
    "PresentationComplete",
    "PresentationTruncated",
    "Selection",
    "SelectionKind",
    "SelectionUnit",
    "ToolOutput",
    "present_lines",
    "result",
]

R = RejectionReason


class CaptureReason(StrEnum):
    CAPTURE_BYTE_LIMIT = "capture_byte_limit"
    SESSION_DISK_QUOTA = "session_disk_quota"
    ROOT_DISK_QUOTA = "root_disk_quota"
    SESSION_ITEM_QUOTA = "session_item_quota"
    ROOT_ITEM_QUOTA = "root_item_quota"
    DISK_FULL = "disk_full"
    INTERRUPTED = "interrupted"
    SOURCE_CHANGED = "source_changed"
    TIMEOUT = "timeout"
    CAPTURE_FAILED = "capture_failed"
    LEGACY_UNCLASSIFIED = "legacy_unclassified"


@dataclass(frozen=True, slots=True)
class CaptureComplete:
    kind = "complete"


@dataclass(frozen=True, slots=True)
class CaptureIncomplete:
    reason: CaptureReason
    kind = "incomplete"

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", i.member(CaptureReason, self.reason, "capture reason"))


Capture = CaptureComplete | CaptureIncomplete
_CAPTURES = (CaptureComplete, CaptureIncomplete)


@dataclass(frozen=True, slots=True)
class PresentationComplete:
    kind = "complete"


@dataclass(frozen=True, slots=True)
class PresentationTruncated:
    """Part of the capture was not shown; ``omitted`` units, or ``None`` if unknown."""

    omitted: int | None = None
    kind = "truncated"

    def __post_init__(self) -> None:
        object.__setattr__(self, "omitted", i.opt_integer(self.omitted, "omitted count"))


Presentation = PresentationComplete | PresentationTruncated
_PRESENTATIONS = (PresentationComplete, PresentationTruncated)


class SelectionKind(StrEnum):
    FULL = "full"
    REQUESTED = "requested"
    PAGE = "page"
    CAPTURED_PREFIX = "captured_prefix"


class SelectionUnit(StrEnum):
    BYTES = "bytes"
    LINES = "lines"
    ITEMS = "items"


@dataclass(frozen=True, slots=True)
class Selection:
    """The range shown: ``count`` units from ``start``, out of ``total`` (None: unknown)."""

    kind: SelectionKind
    unit: SelectionUnit
    start: int
    count: int
    total: int | None = None

    def __post_init__(self) -> None:
        setf = object.__setattr__
        setf(self, "kind", i.member(SelectionKind, self.kind, "selection kind"))
        setf(self, "unit", i.member(SelectionUnit, self.unit, "selection unit"))
        setf(self, "start", i.integer(self.start, "selection start"))
        setf(self, "count", i.integer(self.count, "selection count"))
        setf(self, "total", i.opt_integer(self.total, "selection total"))

    @classmethod
    @refusing(R.INVALID_SELECTION)
    def create(
        cls,
        kind: SelectionKind,
        unit: SelectionUnit,
        start: int,
        count: int,
        total: int | None = None,
    ) -> Selection | Rejected:
        return cls(kind, unit, start, count, total).validate()

    def validate(self) -> Selection | Rejected:
        problem = _selection_problem(self)
        return Rejected(R.INVALID_SELECTION, problem) if problem else self

    def to_json(self) -> dict[str, JsonValue]:
        return j.fields_to_json(self)

    @classmethod
    def decode(cls, data: object) -> Selection:
        d = j.obj(data, "selection")
        w = "selection"
        return cls(
            j.enum(d, "kind", w, SelectionKind),
            j.enum(d, "unit", w, SelectionUnit),
            j.integer(d, "start", w),
            j.integer(d, "count", w),
            j.opt_integer(d, "total", w),
        )


def _selection_problem(s: Selection) -> str:
    if s.start < 0 or s.count < 0 or (s.total is not None and s.total < 0):
        return "start, count and total must not be negative"
    if s.total is not None and s.start + s.count > s.total:  # bounded ints: printable
        return f"range {s.start}+{s.count} exceeds total {s.total}"
    if s.kind is SelectionKind.FULL and (s.start != 0 or s.total is None or s.count != s.total):
        return "a full selection starts at 0 and covers the (known) total"
    if s.kind is SelectionKind.CAPTURED_PREFIX and s.start != 0:
        return "a captured prefix starts at 0"
    return ""


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,255}")
_MEDIA = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+\-]*/[a-z0-9][a-z0-9!#$&^_.+\-]*(;[ -~]*)?")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class OutputReference:
    """A durable handle on the full captured bytes.

    ``token`` is opaque to the model and to this package: letters, digits, ``_ . -``,
    starting with a letter or digit, no ``..``. Anything path-like (``/``, ``\\``, ``~``,
    a drive letter, ``file:``) is refused so a file system path can never leak into the
    model's context or be trusted back from it.
    """

    token: str
    media_type: str
    size: int
    sha256: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "token", i.text(self.token, "reference token"))
        object.__setattr__(self, "media_type", i.text(self.media_type, "reference media type"))
        object.__setattr__(self, "size", i.integer(self.size, "reference size"))
        object.__setattr__(self, "sha256", i.text(self.sha256, "reference sha256"))

    @classmethod
    @refusing(R.INVALID_REFERENCE)
    def create(
        cls, token: str, media_type: str, size: int, sha256: str
    ) -> OutputReference | Rejected:
        return cls(token, media_type, size, sha256).validate()

    def validate(self) -> OutputReference | Rejected:
        problem = _reference_problem(self)
        return Rejected(R.INVALID_REFERENCE, problem) if problem else self

    def to_json(self) -> dict[str, JsonValue]:
        return j.fields_to_json(self)

    @classmethod
    def decode(cls, data: object) -> OutputReference:
        d = j.obj(data, "reference")
        w = "reference"
        return cls(
            j.string(d, "token", w),
            j.string(d, "media_type", w),
            j.integer(d, "size", w),
            j.string(d, "sha256", w),
        )


def _reference_problem(ref: OutputReference) -> str:
    if not _TOKEN.fullmatch(ref.token) or ".." in ref.token:
        shown = i.describe(ref.token)
        return f"token {shown} is not an opaque token (looks like a path or is malformed)"
    if not _MEDIA.fullmatch(ref.media_type):
        return f"bad media type {i.describe(ref.media_type)}"
    if ref.size < 0:
        return "negative size"
    if not _SHA256.fullmatch(ref.sha256):
        return "sha256 must be 64 lowercase hex digits"
    return ""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool produced: the text shown to the model and how it relates to the capture.

    ``failed`` is the tool's own verdict (e.g. a non-zero exit status).
    """

    text: str
    capture: Capture = CaptureComplete()
    presentation: Presentation = PresentationComplete()
    selection: Selection | None = None
    reference: OutputReference | None = None
    failed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", i.text(self.text, "output text"))
        i.exactly(self.capture, _CAPTURES, "capture")
        i.exactly(self.presentation, _PRESENTATIONS, "presentation")
        if self.selection is not None:
            i.exactly(self.selection, (Selection,), "selection")
        if self.reference is not None:
            i.exactly(self.reference, (OutputReference,), "reference")
        object.__setattr__(self, "failed", i.flag(self.failed, "failed"))

    @classmethod
    @refusing(R.INVALID_OUTPUT)
    def create(
        cls,
        text: str,
        capture: Capture = CaptureComplete(),
        presentation: Presentation = PresentationComplete(),
        selection: Selection | None = None,
        reference: OutputReference | None = None,
        failed: bool = False,
    ) -> ToolOutput | Rejected:
        return cls(text, capture, presentation, selection, reference, failed).validate()

    def validate(self) -> ToolOutput | Rejected:
        p = self.presentation
        if isinstance(p, PresentationTruncated):
            if self.reference is None:
                return Rejected(
                    R.REFERENCE_REQUIRED, "a truncated presentation needs a reference to the rest"
                )
            if p.omitted is not None and p.omitted < 1:
                return Rejected(R.INVALID_OUTPUT, "a truncation omits at least one unit")
            if self.selection is not None and self.selection.kind is SelectionKind.FULL:
                return Rejected(R.INVALID_OUTPUT, "a full selection cannot be truncated")
        if self.selection is not None:
            checked = self.selection.validate()
            if isinstance(checked, Rejected):
                return checked
        if self.reference is not None:
            ref = self.reference.validate()
            if isinstance(ref, Rejected):
                return ref
        return self

    @property
    def is_error(self) -> bool:
        return self.failed or isinstance(self.capture, CaptureIncomplete)

    def to_json(self) -> dict[str, JsonValue]:
        """Its fields by name, the capture and the presentation each with its kind (the
        one rule of :func:`~phaseflow.turn.jsonio.fields_to_json`)."""
        return j.fields_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> ToolOutput | Rejected:
        decoded = j.decode(data, _decode_output)
        return decoded if isinstance(decoded, Rejected) else decoded.validate()


def _decode_output(data: object) -> ToolOutput:
    d = j.obj(data, "tool output")
    w = "tool output"
    c = j.obj(j.field(d, "capture", w), "capture")
    capture: Capture
    kind = j.string(c, "kind", "capture")
    if kind == "complete":
        capture = CaptureComplete()
    elif kind == "incomplete":
        capture = CaptureIncomplete(j.enum(c, "reason", "capture", CaptureReason))
    else:
        raise Malformed(f"capture: unknown kind {kind!r}")
    p = j.obj(j.field(d, "presentation", w), "presentation")
    presentation: Presentation
    kind = j.string(p, "kind", "presentation")
    if kind == "complete":
        presentation = PresentationComplete()
    elif kind == "truncated":
        presentation = PresentationTruncated(j.opt_integer(p, "omitted", "presentation"))
    else:
        raise Malformed(f"presentation: unknown kind {kind!r}")
    raw_sel, raw_ref = d.get("selection"), d.get("reference")
    return ToolOutput(
        j.string(d, "text", w),
        capture,
        presentation,
        None if raw_sel is None else Selection.decode(raw_sel),
        None if raw_ref is None else OutputReference.decode(raw_ref),
        j.boolean(d, "failed", w),
    )


def result(output: ToolOutput) -> ToolOutcome:
    """The model-facing outcome: the shown text plus notes on what is missing.

    An incomplete capture is an error even when a prefix is shown: the model must not
    mistake part of an answer for all of it.
    """
    i.exactly(output, (ToolOutput,), "output")
    text = output.text
    notes: list[str] = []
    p = output.presentation
    if isinstance(p, PresentationTruncated):
        unit = output.selection.unit.value if output.selection is not None else "units"
        amount = f"{p.omitted} {unit}" if p.omitted is not None else "an unknown amount"
        ref = output.reference
        where = (
            f"full output is reference {ref.token} ({ref.size} bytes, {ref.media_type})"
            if ref is not None  # always, for a validated output
            else "no reference to the rest is available"
        )
        notes.append(f"[output truncated: {amount} not shown; {where}]")
    if isinstance(output.capture, CaptureIncomplete):
        notes.append(
            f"[capture incomplete ({output.capture.reason.value}): the tool's output was not"
            " fully captured; what is shown is only a prefix]"
        )
    if notes:
        text = "\n".join([text, *notes]) if text else "\n".join(notes)
    return ToolOutcome.error(text) if output.is_error else ToolOutcome.ok(text)


_LINES = Selection(SelectionKind.FULL, SelectionUnit.LINES, 0, 0, 0)


def present_lines(
    captured: str,
    max_lines: int,
    *,
    capture: Capture = CaptureComplete(),
    reference: OutputReference | None = None,
    failed: bool = False,
) -> ToolOutput | Rejected:
    """Show at most ``max_lines`` lines of captured text, from the start.

    Complete and short: a ``full`` selection. Otherwise a ``captured_prefix`` selection;
    when lines are cut the presentation is truncated and ``reference`` is required.
    A complete capture knows its total; an incomplete one does not.
    """
    try:
        max_lines = i.integer(max_lines, "max_lines")
    except i.TurnInputError as exc:
        return Rejected(R.INVALID_SELECTION, str(exc))
    if max_lines < 0:
        return Rejected(R.INVALID_SELECTION, "max_lines must not be negative")
    try:
        captured = i.text(captured, "captured text")
    except i.TurnInputError as exc:
        return Rejected(R.INVALID_OUTPUT, str(exc))
    lines = captured.splitlines(keepends=True)
    shown = lines[:max_lines]
    omitted = len(lines) - len(shown)
    complete = isinstance(capture, CaptureComplete)
    total = len(lines) if complete else None
    kind = SelectionKind.FULL if complete and omitted == 0 else SelectionKind.CAPTURED_PREFIX
    selection = evolve(_LINES, kind=kind, count=len(shown), total=total)
    presentation: Presentation = (
        PresentationTruncated(omitted) if omitted else PresentationComplete()
    )
    return ToolOutput.create("".join(shown), capture, presentation, selection, reference, failed)
