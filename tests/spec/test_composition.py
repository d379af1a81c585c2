"""Workflows that compose: the tree of files checked as a whole (PF500-PF509).

Each fixture folder in tests/fixtures/composed/pf5*/ has a ``main.yaml`` that uses other
files; checking it gives exactly the diagnostics listed, in the file where the mistake is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phaseflow.spec import tree as tree_module
from phaseflow.spec.loader import check_text, compile_file
from phaseflow.spec.tree import check_tree, load_tree

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "composed"

# folder -> [(code, file, line, column)], words the first message must contain
CASES: list[tuple[str, list[tuple[str, str, int, int]], list[str]]] = [
    ("pf500_missing_callee", [("PF500", "main.yaml", 5, 13)], ["'identity'", "identty.yaml"]),
    ("pf501_broken_callee", [("PF002", "identity.yaml", 7, 1), ("PF501", "main.yaml", 5, 13)],
     ["YAML syntax error"]),
    ("pf502_cycle", [("PF502", "other.yaml", 9, 11)], ["cycle of calls", "desk -> other -> desk"]),
    ("pf503_unknown_name", [("PF503", "main.yaml", 13, 19)],
     ["handoff 'bililng'", "did you mean 'billing'?"]),
    ("pf504_undeclared_input", [("PF504", "main.yaml", 12, 12)],
     ["'emial'", "did you mean 'email'?"]),
    ("pf505_type_mismatch", [("PF505", "main.yaml", 12, 15)], ["(string)", "declared integer"]),
    ("pf506_callee_never_ends", [("PF205", "identity.yaml", 5, 3), ("PF506", "main.yaml", 9, 11)],
     ["no phase is terminal"]),
    ("pf507_unknown_outcome", [("PF507", "main.yaml", 11, 14)],
     ["'verifed'", "did you mean 'verified'?", "failed, verified"]),
    ("pf508_tool_clash", [("PF508", "main.yaml", 6, 3), ("PF508", "shared.yaml", 3, 3)],
     ["'crm.lookup'", "shared.yaml:3:3"]),
    ("pf509_not_shared", [("PF509", "main.yaml", 4, 11)], ["phaseflow-shared: 1"]),
]


@pytest.mark.parametrize(("folder", "expected", "words"), CASES, ids=[c[0] for c in CASES])
def test_each_broken_link_is_reported_where_it_is_written(
    folder: str, expected: list[tuple[str, str, int, int]], words: list[str]
) -> None:
    root = FIXTURES / folder
    found = check_tree([str(root / "main.yaml")], check_text).all_diagnostics
    assert [(d.code, Path(d.path).name, d.line, d.column) for d in found] == expected
    for word in words:
        assert word in found[0].message
    result, _ = load_tree(str(root / "main.yaml"), check_text)
    assert result.workflow is None  # every one is an error somewhere in the tree


def test_the_cli_reports_across_files_in_every_format() -> None:
    main = str(FIXTURES / "pf507_unknown_outcome" / "main.yaml")
    run = [sys.executable, "-m", "phaseflow.cli.main", "validate"]
    out = subprocess.run([*run, "--format", "json", main], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["files"] == 2 and data["errors"] == 1
    assert data["diagnostics"][0]["code"] == "PF507"
    out = subprocess.run([*run, "--format", "github", main], capture_output=True, text=True)
    assert out.stdout.startswith(f"::error file={main},line=11,col=14,title=PF507::")


def _write(path: Path, name: str, uses: str = "", call: str = "") -> None:
    path.write_text(
        f"phaseflow: 1\nname: {name}\ninitial: a\n{uses}phases:\n  a:\n    goal: a\n{call}"
        "    transitions: [{to: b}]\n  b: {goal: b, terminal: true}\n")


def test_a_file_calling_itself_through_a_symlink_is_a_cycle(tmp_path: Path) -> None:
    _write(tmp_path / "self.yaml", "loop", "uses: {me: link.yaml}\n", "    call: me\n")
    os.symlink(tmp_path / "self.yaml", tmp_path / "link.yaml")
    found = check_tree([str(tmp_path / "self.yaml")], check_text).all_diagnostics
    assert [(d.code, d.line, d.column) for d in found] == [("PF502", 8, 11)]
    assert "loop -> loop" in found[0].message


def test_a_thousand_deep_chain_is_read_once_per_file_without_recursion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    depth = 1000
    for i in range(depth):
        last = i == depth - 1
        _write(tmp_path / f"w{i}.yaml", f"w{i}", "" if last else f"uses: {{next: w{i + 1}.yaml}}\n",
               "" if last else "    call: next\n")
    reads: list[str] = []
    real_read = tree_module.read_text

    def counting(path: str) -> object:
        reads.append(os.path.realpath(path))
        return real_read(path)

    monkeypatch.setattr(tree_module, "read_text", counting)
    result = check_tree([str(tmp_path / "w0.yaml"), str(tmp_path / "w500.yaml")], check_text)
    assert result.all_diagnostics == []
    assert len(reads) == depth == len(set(reads))
    # and a cycle at the end of the chain is found, at the call that closes it
    _write(tmp_path / f"w{depth - 1}.yaml", "last", "uses: {first: w0.yaml}\n",
           "    call: first\n")
    found = check_tree([str(tmp_path / "w0.yaml")], check_text).all_diagnostics
    assert [d.code for d in found] == ["PF502"]
    assert Path(found[0].path).name == f"w{depth - 1}.yaml"


def test_a_composed_workflow_links_what_it_uses_and_imports_shared_parts(tmp_path: Path) -> None:
    (tmp_path / "shared.yaml").write_text(
        "phaseflow-shared: 1\ntools:\n  crm.lookup: {description: Find, writes: [customer_id]}\n"
        "state:\n  customer_id: {type: string}\n  email: {type: string}\n")
    (tmp_path / "identity.yaml").write_text(
        "phaseflow: 1\nname: identity\ninitial: ask\nimports: [shared.yaml]\nphases:\n"
        "  ask:\n    goal: Ask\n    tools: [crm.lookup]\n    transitions:\n"
        "      - {to: verified, when: state.customer_id}\n"
        "  verified: {goal: ok, terminal: true}\n")
    (tmp_path / "desk.yaml").write_text(
        "phaseflow: 1\nname: desk\ninitial: verify\nimports: [shared.yaml]\n"
        "uses: {identity: identity.yaml}\nphases:\n  verify:\n    goal: v\n"
        "    call: identity\n    with: {email: state.email}\n"
        "    returns: {customer_id: customer_id}\n    transitions:\n"
        "      - {to: done, when: \"returned == 'verified'\"}\n"
        "  done: {goal: d, terminal: true}\n")
    workflow = compile_file(tmp_path / "desk.yaml")
    assert workflow.tools is not None and "crm.lookup" in workflow.tools
    callee = workflow.library["identity"]
    assert callee.name == "identity" and callee.tools is not None
    call = workflow.phases["verify"].call
    assert call is not None and call.inputs["email"].key == "email"
    assert dict(call.returns) == {"customer_id": "customer_id"}
