"""Every diagnostic code has a fixture that triggers it, at an exact line and column.

Each fixture in tests/fixtures/invalid/ is written to produce exactly one diagnostic (or
the listed ones): a cascade of follow-up noise is a bug too.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from phaseflow.spec.diagnostics import CODES
from phaseflow.spec.loader import check_file, check_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "invalid"

#: The spec's severities, written out here so that a change in CODES is caught.
WARNINGS = {"PF202", "PF203", "PF205", "PF206", "PF207", "PF208", "PF209", "PF301", "PF303",
            "PF305", "PF401", "PF402", "PF403", "PF404", "PF407"}

# file, [(code, line, column)], words the (first) message must contain
CASES: list[tuple[str, list[tuple[str, int, int]], list[str]]] = [
    ("pf001_not_utf8.yaml", [("PF001", 2, 10)], ["not UTF-8", "0xe9"]),
    ("pf002_syntax_error.yaml", [("PF002", 8, 13)], ["YAML syntax error", "']'"]),
    ("pf002_tab_indent.yaml", [("PF002", 6, 1)],
     ["a tab character", "YAML indents with spaces"]),
    ("pf003_duplicate_key.yaml", [("PF003", 12, 3)], ["duplicate key 'start'", "line 5"]),
    ("pf004_empty.yaml", [("PF004", 1, 1)], ["empty"]),
    ("pf004_two_documents.yaml", [("PF004", 6, 1)], ["more than one YAML document"]),
    ("pf101_missing_goal.yaml", [("PF101", 5, 3)], ["missing required key 'goal'", "'start'"]),
    ("pf102_unknown_key.yaml", [("PF102", 7, 5)],
     ["unknown key 'transitons'", "did you mean 'transitions'?"]),
    ("pf103_wrong_type.yaml", [("PF103", 7, 15)], ["'terminal'", "true or false", "string"]),
    ("pf105_bad_duration.yaml", [("PF105", 9, 16)],
     ["transition 1", "'after' must be a duration", "10m", "'ten minutes'"]),
    ("pf110_version.yaml", [("PF110", 1, 12)], ["version 2", "phaseflow: 1"]),
    ("pf200_unknown_initial.yaml", [("PF200", 3, 10)], ["'gret'", "did you mean 'greet'?"]),
    ("pf201_unknown_target.yaml", [("PF201", 10, 13)],
     ["unknown phase 'refnd'", "did you mean 'refund'?"]),
    ("pf202_unreachable.yaml", [("PF202", 12, 3)], ["'orphan'", "cannot be reached", "'start'"]),
    ("pf203_dead_end.yaml", [("PF203", 11, 3)], ["'stuck'", "no transitions", "terminal: true"]),
    ("pf204_terminal_with_transitions.yaml", [("PF204", 12, 5)], ["'done'", "terminal"]),
    ("pf205_trap.yaml", [("PF205", 14, 3), ("PF205", 18, 3)], ["'loop_a'", "trap"]),
    ("pf205_no_terminal.yaml", [("PF205", 5, 3)], ["no phase is terminal"]),
    ("pf206_never_taken.yaml", [("PF206", 9, 9)],
     ["'other'", "never be taken", "transition 1"]),
    ("pf207_duplicate_transition.yaml", [("PF207", 10, 9)],
     ["'done'", "written twice", "transition 1"]),
    ("pf208_unknown_visits.yaml", [("PF208", 9, 15)],
     ["'implemnt'", "not a phase", "did you mean 'implement'?"]),
    ("pf209_untimed_guard.yaml", [("PF209", 11, 15)],
     ["transition 1", "seconds_in_phase > state.patience", "no timer fires it",
      "seconds_in_phase >= 600", "after: 10m"]),
    ("pf300_code_in_guard.yaml", [("PF300", 9, 15)], ["not allowed"]),
    ("pf300_misspelt_name.yaml", [("PF300", 9, 16)],
     ["unknown name 'stat'", "did you mean 'state'?"]),
    ("pf300_folded_guard.yaml", [("PF300", 13, 11)], ["method calls are not allowed"]),
    ("pf301_guard_undeclared.yaml", [("PF301", 11, 21)],
     ["undeclared state key 'amout'", "did you mean 'amount'?"]),
    ("pf302_template_syntax.yaml", [("PF302", 9, 7)], ["instructions", "endif"]),
    ("pf304_template_internals.yaml", [("PF304", 9, 7)], ["'__mro__' is not available"]),
    ("pf302_template_unknown_name.yaml", [("PF302", 7, 29)],
     ["unknown name 'stat'", "did you mean 'state'?"]),
    ("pf303_template_undeclared.yaml", [("PF303", 9, 35)],
     ["'customer_nme'", "did you mean 'customer_name'?"]),
    ("pf305_set_wrong_type.yaml", [("PF305", 11, 20)],
     ["'set' writes a string 'no'", "'vip'", "declared boolean", "YAML 1.2", "write false"]),
    ("pf400_unknown_tool.yaml", [("PF400", 9, 13)],
     ["unknown tool 'lookup_custmer'", "did you mean 'lookup_customer'?"]),
    ("pf401_undeclared_requires.yaml", [("PF401", 13, 16)],
     ["'ordr_id'", "did you mean 'order_id'?"]),
    ("pf402_never_produced.yaml", [("PF402", 15, 16)],
     ["'order_id'", "nothing can produce", "no phase collects it"]),
    ("pf403_produces_undeclared.yaml", [("PF403", 11, 20)],
     ["'polcy'", "did you mean 'policy'?"]),
    ("pf404_clear_undeclared.yaml", [("PF404", 9, 22)],
     ["clear_on_enter", "'drafts'", "did you mean 'draft'?"]),
    ("pf406_collect_undeclared.yaml", [("PF406", 9, 15)],
     ["collect", "'customer_nme'", "declared type", "did you mean 'customer_name'?"]),
    ("pf406_collect_without_state.yaml", [("PF406", 7, 15)],
     ["collect", "'customer_name'", "declared type", "declare it under 'state'"]),
    ("pf407_collect_tool_writes.yaml", [("PF407", 12, 15)],
     ["collects 'customer_id'", "tool 'lookup_customer' writes", "verify"]),
    ("pf103_tool_parameters.yaml", [("PF103", 10, 26)],
     ["tool 'find_order'", "'properties.order_id.type'", "not a valid JSON Schema",
      "did you mean 'string'?"]),
    ("pf103_tool_timeout.yaml", [("PF103", 5, 54)],
     ["tool 'find_order'", "timeout", "greater than 0"]),
    ("pf104_unknown_keyword.yaml", [("PF104", 10, 77)],
     ["tool 'lookup_customer'", "'properties.phone'", "unknown JSON Schema keyword 'E.164'",
      "with no value", 'description: "The phone number on the account, E.164"']),
    ("pf408_builtin_tool_name.yaml", [("PF408", 6, 3)],
     ["tool 'record'", "name of a built-in tool", "would never run", "rename it"]),
    ("pf409_builtin_in_phase_tools.yaml", [("PF409", 7, 30)],
     ["phase 'start'", "'go_to_phase' is a built-in tool", "'model' transitions",
      "this phase has none", "remove it from 'tools'"]),
    ("pf431_reply_record.yaml", [("PF431", 14, 26)],
     ["phase 'triage'", "reply records property 'categry'", "its properties: category"]),
]


@pytest.mark.parametrize(("name", "expected", "words"), CASES, ids=[c[0] for c in CASES])
def test_fixture_gives_exact_diagnostics(
    name: str, expected: list[tuple[str, int, int]], words: list[str]
) -> None:
    result = check_file(str(FIXTURES / name))
    assert [(d.code, d.line, d.column) for d in result.diagnostics] == expected
    first = result.diagnostics[0]
    for word in words:
        assert word in first.message
    for d in result.diagnostics:
        assert d.severity == ("warning" if d.code in WARNINGS else "error")
        assert d.path == str(FIXTURES / name)
        assert d.format().startswith(f"{d.path}:{d.line}:{d.column}: {d.severity} {d.code} ")
    if first.severity == "error":
        assert result.workflow is None
    else:
        assert result.workflow is not None
        assert result.workflow.warnings == result.diagnostics


#: codes only ``validate --mcp`` reports (it connects to servers): tested in tests/mcp
ONLINE = {"PF410", "PF411"}
#: codes of the checks across files: tests/spec/test_composition.py, one folder each
COMPOSED = {f"PF5{n:02d}" for n in range(10)}
#: codes only ``validate --models`` reports (the host's roles): tested in tests/cli
MODELS = {"PF430"}


def test_every_code_has_a_fixture() -> None:
    covered = {code for _, expected, _ in CASES for code, _, _ in expected} | {"PF405"}
    assert covered | ONLINE | COMPOSED | MODELS == set(CODES)
    assert {f"pf{c[2:]}" for c in set(CODES) - ONLINE - COMPOSED} <= {
        p.name[:5] for p in FIXTURES.glob("pf*")}


def test_pf405_unknown_call_with_a_registry() -> None:
    def notify_customer(context: object) -> None:
        return None

    result = check_file(str(FIXTURES / "pf405_unknown_call.yaml"),
                        registry={"notify_customer": notify_customer})
    assert [(d.code, d.line, d.column, d.severity) for d in result.diagnostics] == [
        ("PF405", 8, 15, "error")
    ]
    assert "'notify_custmer'" in result.diagnostics[0].message
    assert "did you mean 'notify_customer'?" in result.diagnostics[0].message
    # without a registry, an unknown call is not validate's business (the spec)
    assert check_file(str(FIXTURES / "pf405_unknown_call.yaml")).diagnostics == ()


def test_pf001_not_utf8_in_the_middle_of_a_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"phaseflow: 1\nname: x\ninitial: a\n# caf\xe9 \xff\n")
    result = check_file(str(path))
    assert [(d.code, d.line, d.column, d.severity) for d in result.diagnostics] == [
        ("PF001", 4, 6, "error")
    ]
    assert "not UTF-8" in result.diagnostics[0].message


def test_pf001_utf16_file_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "utf16.yaml"
    path.write_bytes("phaseflow: 1\n".encode("utf-16"))
    assert [d.code for d in check_file(str(path)).diagnostics] == ["PF001"]


def test_pf001_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + (FIXTURES.parent.parent / "spec" / "data" /
                                        "refund_desk.yaml").read_bytes())
    result = check_file(str(path))
    assert result.diagnostics == ()
    assert result.workflow is not None


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="permission bits do not stop root (or Windows) from reading")
def test_pf001_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    shutil.copy(FIXTURES / "pf110_version.yaml", path)
    path.chmod(0)
    try:
        result = check_file(str(path))
    finally:
        path.chmod(0o644)
    assert [(d.code, d.line, d.column) for d in result.diagnostics] == [("PF001", 1, 1)]
    assert "cannot read file" in result.diagnostics[0].message


def test_pf001_path_that_cannot_be_read(tmp_path: Path) -> None:
    # works as root too: a folder, and a file that vanished between discovery and reading
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    for path in (folder, tmp_path / "gone.yaml"):
        result = check_file(str(path))
        assert [(d.code, d.line, d.column) for d in result.diagnostics] == [("PF001", 1, 1)]
        assert "cannot read file" in result.diagnostics[0].message
        assert result.workflow is None


def test_pf001_file_over_the_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from phaseflow.spec import files

    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("phaseflow: 1\n" + "# padding\n" * 20)
    result = check_file(str(path))
    assert [(d.code, d.line, d.column) for d in result.diagnostics] == [("PF001", 1, 1)]
    assert "limit" in result.diagnostics[0].message


def test_top_level_must_be_a_mapping() -> None:
    result = check_text("- phaseflow: 1\n")
    assert [(d.code, d.line, d.column) for d in result.diagnostics] == [("PF103", 1, 1)]
    assert "mapping" in result.diagnostics[0].message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a misspelt top-level key
        ("phaseflow: 1\nname: x\ninitial: a\nphases: {a: {goal: g, terminal: true}}\n"
         "desciption: typo\n", ("PF102", 5, 1, "did you mean 'description'?")),
        # a misspelt state key spec field
        ("phaseflow: 1\nname: x\ninitial: a\nstate:\n  k: {tpye: string}\n"
         "phases: {a: {goal: g, terminal: true}}\n", ("PF102", 5, 7, "did you mean 'type'?")),
        # a misspelt tool field
        ("phaseflow: 1\nname: x\ninitial: a\ntools:\n  t: {writs: [k]}\n"
         "phases: {a: {goal: g, terminal: true}}\n", ("PF102", 5, 7, "did you mean 'writes'?")),
        # a misspelt transition field
        ("phaseflow: 1\nname: x\ninitial: a\nphases:\n  a:\n    goal: g\n"
         "    transitions: [{to: b, wen: turn > 1}]\n  b: {goal: g, terminal: true}\n",
         ("PF102", 7, 27, "did you mean 'when'?")),
        # a misspelt enum value
        ("phaseflow: 1\nname: x\ninitial: a\ntools:\n  t: {approval: allways}\n"
         "phases: {a: {goal: g, terminal: true}}\n", ("PF103", 5, 17, "did you mean 'always'?")),
        # a misspelt state key in unset
        ("phaseflow: 1\nname: x\ninitial: a\nstate: {draft: {}}\nphases:\n  a:\n    goal: g\n"
         "    terminal: true\n    on_enter: [{unset: [draftt]}]\n",
         ("PF404", 9, 25, "did you mean 'draft'?")),
        # a misspelt guard function
        ("phaseflow: 1\nname: x\ninitial: a\nphases:\n  a:\n    goal: g\n"
         "    transitions: [{to: b, when: 'lenn(state.x) > 1'}]\n  b: {goal: g, terminal: true}\n",
         ("PF300", 7, 34, "did you mean 'len'?")),
    ],
    ids=["top", "state-field", "tool-field", "transition-field", "enum", "unset", "guard-func"],
)
def test_did_you_mean(text: str, expected: tuple[str, int, int, str]) -> None:
    code, line, column, hint = expected
    diags = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in diags] == [(code, line, column)]
    assert hint in diags[0].message


def test_unknown_key_far_from_any_lists_what_is_allowed() -> None:
    text = ("phaseflow: 1\nname: x\ninitial: a\nphases:\n  a:\n    goal: g\n"
            "    terminal: true\n    zzzzzz: 1\n")
    diags = check_text(text).diagnostics
    assert [(d.code, d.line, d.column) for d in diags] == [("PF102", 8, 5)]
    assert "allowed here:" in diags[0].message and "transitions" in diags[0].message
