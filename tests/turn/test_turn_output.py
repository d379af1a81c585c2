"""Part 4: tool output - capture versus presentation, selections, references, results."""

from __future__ import annotations

import hashlib

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from phaseflow.turn import (
    CaptureComplete,
    CaptureIncomplete,
    CaptureReason,
    OutcomeStatus,
    OutputReference,
    PresentationComplete,
    PresentationTruncated,
    Rejected,
    Selection,
    SelectionKind,
    SelectionUnit,
    ToolOutput,
    present_lines,
    result,
)
from tests.support.turn_strategies import STATEFUL, assert_json_identity, ok, rejected

SHA = hashlib.sha256(b"x").hexdigest()
REF = OutputReference("out-7f3a.1", "text/plain", 1234, SHA)


def test_capture_reasons_are_the_specs() -> None:
    assert {r.value for r in CaptureReason} == {
        "capture_byte_limit",
        "session_disk_quota",
        "root_disk_quota",
        "session_item_quota",
        "root_item_quota",
        "disk_full",
        "interrupted",
        "source_changed",
        "timeout",
        "capture_failed",
        "legacy_unclassified",
    }


def test_truncated_presentation_requires_a_reference() -> None:
    rejected(ToolOutput.create("a", presentation=PresentationTruncated(3)), "reference_required")
    out = ok(ToolOutput.create("a", presentation=PresentationTruncated(None), reference=REF))
    rejected(
        ToolOutput.create("a", presentation=PresentationTruncated(0), reference=REF),
        "invalid_output",
    )
    assert_json_identity(out, ToolOutput.from_json)


def test_selection_validation() -> None:
    assert ok(Selection.create(SelectionKind.FULL, SelectionUnit.LINES, 0, 10, 10))
    rejected(
        Selection.create(SelectionKind.FULL, SelectionUnit.LINES, 1, 9, 10), "invalid_selection"
    )
    rejected(
        Selection.create(SelectionKind.FULL, SelectionUnit.LINES, 0, 9, 10), "invalid_selection"
    )
    rejected(
        Selection.create(SelectionKind.FULL, SelectionUnit.BYTES, 0, 9, None), "invalid_selection"
    )
    rejected(
        Selection.create(SelectionKind.PAGE, SelectionUnit.ITEMS, 5, 10, 12), "invalid_selection"
    )
    rejected(
        Selection.create(SelectionKind.PAGE, SelectionUnit.ITEMS, -1, 1, None), "invalid_selection"
    )
    rejected(
        Selection.create(SelectionKind.CAPTURED_PREFIX, SelectionUnit.BYTES, 2, 1, None),
        "invalid_selection",
    )
    assert ok(Selection.create(SelectionKind.REQUESTED, SelectionUnit.BYTES, 5, 10, None))
    bad = Selection(SelectionKind.FULL, SelectionUnit.LINES, 0, 1, 2)
    rejected(ToolOutput.create("x", selection=bad), "invalid_selection")
    full = Selection(SelectionKind.FULL, SelectionUnit.LINES, 0, 2, 2)
    rejected(
        ToolOutput.create(
            "x", presentation=PresentationTruncated(1), selection=full, reference=REF
        ),
        "invalid_output",
    )


def test_references_are_opaque_never_paths() -> None:
    for token in (
        "/tmp/out.txt",
        "../secret",
        "a/b",
        "C:\\x",
        "~root",
        "file:///etc",
        ".hidden",
        "a..b",
        "",
        "x" * 300,
    ):
        rejected(OutputReference.create(token, "text/plain", 1, SHA), "invalid_reference")
    rejected(OutputReference.create("tok", "text", 1, SHA), "invalid_reference")
    rejected(OutputReference.create("tok", "text/plain", -1, SHA), "invalid_reference")
    rejected(OutputReference.create("tok", "text/plain", 1, SHA.upper()), "invalid_reference")
    rejected(OutputReference.create("tok", "text/plain", 1, "abc"), "invalid_reference")
    assert ok(OutputReference.create("tok_1-A.b", "application/json; charset=utf-8", 0, SHA))
    bad = ToolOutput(
        "x",
        presentation=PresentationTruncated(1),
        reference=OutputReference("/etc/passwd", "text/plain", 1, SHA),
    )
    rejected(bad.validate(), "invalid_reference")
    rejected(ToolOutput.from_json(bad.to_json()), "invalid_reference")


def test_incomplete_capture_is_an_error_even_with_a_prefix_shown() -> None:
    out = ok(
        present_lines(
            "l1\nl2\nl3\n", 2, capture=CaptureIncomplete(CaptureReason.TIMEOUT), reference=REF
        )
    )
    assert out.selection == Selection(
        SelectionKind.CAPTURED_PREFIX, SelectionUnit.LINES, 0, 2, None
    )
    outcome = result(out)
    assert outcome.status is OutcomeStatus.ERROR
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("l1\nl2\n") and "timeout" in outcome.content
    assert "out-7f3a.1" in outcome.content and "1 lines not shown" in outcome.content
    whole = ok(present_lines("l1\n", 5, capture=CaptureIncomplete(CaptureReason.DISK_FULL)))
    assert result(whole).status is OutcomeStatus.ERROR


def test_complete_output_results() -> None:
    out = ok(present_lines("a\nb\n", 10))
    assert out.selection == Selection(SelectionKind.FULL, SelectionUnit.LINES, 0, 2, 2)
    assert result(out).status is OutcomeStatus.OK and result(out).content == "a\nb\n"
    assert result(ToolOutput("boom", failed=True)).status is OutcomeStatus.ERROR
    rejected(present_lines("a\nb\n", 1), "reference_required")
    cut = ok(present_lines("a\nb\n", 1, reference=REF))
    assert cut.presentation == PresentationTruncated(1)
    assert result(cut).status is OutcomeStatus.OK
    rejected(present_lines("a", -1), "invalid_selection")


def test_result_never_hides_a_cut_even_for_an_unvalidated_output() -> None:
    unchecked = ToolOutput("a\n", presentation=PresentationTruncated(4))  # validate() refuses it
    content = result(unchecked).content
    assert isinstance(content, str) and "output truncated: 4 units not shown" in content


def test_from_json_malformed() -> None:
    rejected(ToolOutput.from_json({"text": "x"}), "malformed_json")
    data = ToolOutput("x").to_json()
    data["capture"] = {"kind": "incomplete", "reason": "gremlins"}
    rejected(ToolOutput.from_json(data), "malformed_json")


texts = st.lists(st.text("ab", max_size=3), max_size=8).map(
    lambda ls: "".join(f"{x}\n" for x in ls)
)
captures = st.one_of(
    st.just(CaptureComplete()), st.sampled_from(CaptureReason).map(CaptureIncomplete)
)
tokens = st.one_of(st.sampled_from(["tok1", "r-2.x"]), st.sampled_from(["/p", "..", "a\\b"]))


class OutputMachine(RuleBasedStateMachine):
    """Build outputs from random captures, limits, references and selections."""

    outputs = Bundle("outputs")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, ToolOutput]] = []

    @rule(
        target=outputs,
        captured=texts,
        limit=st.integers(0, 6),
        capture=captures,
        token=st.one_of(st.none(), tokens),
    )
    def present(self, captured: str, limit: int, capture: object, token: str | None) -> object:
        ref = None if token is None else OutputReference(token, "text/plain", len(captured), SHA)
        made = present_lines(captured, limit, capture=capture, reference=ref)  # type: ignore[arg-type]
        lines = captured.splitlines(keepends=True)
        cut = len(lines) > limit
        path_like = token is not None and token not in ("tok1", "r-2.x")
        if cut and ref is None:
            rejected(made, "reference_required")
            return None
        if ref is not None and path_like:
            rejected(made, "invalid_reference")
            return None
        out = ok(made)
        assert captured.startswith(out.text)
        self.seen.append((captured, out))
        return out

    @rule(
        kind=st.sampled_from(SelectionKind),
        unit=st.sampled_from(SelectionUnit),
        start=st.integers(-1, 4),
        count=st.integers(-1, 4),
        total=st.one_of(st.none(), st.integers(-1, 6)),
    )
    def selection(
        self, kind: SelectionKind, unit: SelectionUnit, start: int, count: int, total: int | None
    ) -> None:
        made = Selection.create(kind, unit, start, count, total)
        if isinstance(made, Rejected):
            return
        assert made.start >= 0 and made.count >= 0
        if made.total is not None:
            assert made.start + made.count <= made.total
        if kind is SelectionKind.FULL:
            assert made.start == 0 and made.count == made.total

    @rule(out=outputs)
    def crash_and_restore(self, out: ToolOutput | None) -> None:
        if out is not None:
            assert_json_identity(out, ToolOutput.from_json)

    @invariant()
    def outputs_keep_the_rules(self) -> None:
        for captured, out in self.seen:
            outcome = result(out)
            if isinstance(out.capture, CaptureIncomplete):
                assert outcome.status is OutcomeStatus.ERROR
            if isinstance(out.presentation, PresentationTruncated):
                assert out.reference is not None
                assert out.reference.token in str(outcome.content)
            else:
                assert isinstance(out.presentation, PresentationComplete)
                if isinstance(out.capture, CaptureComplete):
                    assert out.text == captured


TestOutputMachine = OutputMachine.TestCase
TestOutputMachine.settings = settings(STATEFUL, stateful_step_count=20)
