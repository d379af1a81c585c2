"""Folder discovery, the command line's job: which YAML files in a folder are workflows."""

from __future__ import annotations

from pathlib import Path

from phaseflow.cli.discovery import SKIPPED_FOLDERS, discover, is_workflow_file, is_workflow_text


def test_a_workflow_has_a_top_level_phaseflow_key() -> None:
    assert is_workflow_text("phaseflow: 1\nname: x\n")
    assert is_workflow_text("# comment\n'phaseflow' : 1\n")
    assert is_workflow_text('"phaseflow":\t1\n')
    assert not is_workflow_text("  phaseflow: 1\n")  # nested, not top level
    assert not is_workflow_text("phaseflow-test: 1\nworkflow: a.yaml\n")
    assert not is_workflow_text("services: {}\n")


def test_discover_walks_sorted_skips_hidden_and_tool_folders(tmp_path: Path) -> None:
    flow = "phaseflow: 1\n"
    for rel in ("b.yaml", "a/c.yml", ".git/d.yaml", "node_modules/e.yaml", "a/notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(flow)
    (tmp_path / "compose.yaml").write_text("services: {}\n")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")  # reported, not skipped
    found = discover([str(tmp_path)])
    assert [Path(p).relative_to(tmp_path).as_posix() for p in found] == [
        "b.yaml", "latin1.yaml", "a/c.yml"
    ]
    assert "node_modules" in SKIPPED_FOLDERS
    assert is_workflow_file(str(tmp_path / "latin1.yaml"))


def test_named_files_are_kept_once_unless_filtered(tmp_path: Path) -> None:
    other = tmp_path / "compose.yaml"
    other.write_text("services: {}\n")
    flow = tmp_path / "flow.yaml"
    flow.write_text("phaseflow: 1\n")
    assert discover([str(other), str(flow), str(tmp_path)]) == [str(other), str(flow)]
    assert discover([str(other), str(flow)], filter_files=True) == [str(flow)]
