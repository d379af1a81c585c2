"""The repository's own docs are complete on their own: docs/format.md names every key
of the workflow format (read from the schema the loader uses) and of the test-file
format (read from the reader), every diagnostic code the checks can emit is explained,
and no doc points outside the repository."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from phaseflow.spec.schema import schema
from phaseflow.testing import testfile

REPO = Path(__file__).resolve().parents[2]
FORMAT = (REPO / "docs" / "format.md").read_text(encoding="utf-8")
VALIDATION = (REPO / "docs" / "validation.md").read_text(encoding="utf-8")
DOCS = sorted(
    [REPO / "README.md", REPO / "DEVELOPERS.md", REPO / "workflows" / "README.md",
     *(REPO / "docs").glob("*.md")]
)
#: the docs this test's owner writes; the others are checked for links only
OWN = [REPO / "docs" / "format.md", REPO / "docs" / "workflows.md",
       REPO / "docs" / "validation.md", REPO / "workflows" / "README.md"]


def _keys(node: Any) -> set[str]:
    """Every property name anywhere in a JSON Schema."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                found.update(value)
            found |= _keys(value)
    elif isinstance(node, list):
        for item in node:
            found |= _keys(item)
    return found


def test_format_reference_names_every_key_of_the_schema() -> None:
    keys = _keys(schema())
    assert {"phaseflow", "goal", "clear_on_enter", "idempotent", "history"} <= keys
    missing = sorted(k for k in keys if f"`{k}`" not in FORMAT)
    assert not missing, f"docs/format.md does not document: {missing}"


def test_format_reference_names_every_key_of_a_test_file() -> None:
    keys = (testfile.TOP_KEYS | testfile.SCENARIO_KEYS | testfile.MOCK_KEYS
            | set(testfile.STEP_KINDS) | testfile.EXPECT_KEYS)
    missing = sorted(k for k in keys if f"`{k}" not in FORMAT)
    assert not missing, f"docs/format.md does not document: {missing}"


def _emitted_codes() -> set[str]:
    codes: set[str] = set()
    for path in (REPO / "phaseflow").rglob("*.py"):
        codes.update(re.findall(r"[\"'](PF\d{3})[\"']", path.read_text(encoding="utf-8")))
    return codes


def test_every_code_the_checks_emit_is_documented() -> None:
    codes = _emitted_codes()
    assert {"PF001", "PF201", "PF300", "PF406"} <= codes
    for code in sorted(codes):
        assert f"| {code} |" in FORMAT, f"{code} is not in docs/format.md's table"
        assert f"### {code} " in VALIDATION, f"{code} has no entry in docs/validation.md"


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_stay_inside_the_repository_and_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = target.split("#", 1)[0]
        assert not path.startswith("/"), f"{doc.name}: absolute link {target}"
        resolved = (doc.parent / path).resolve()
        assert resolved.is_relative_to(REPO), f"{doc.name}: {target} leaves the repository"
        assert resolved.exists(), f"{doc.name}: {target} does not exist"


SOURCES = sorted((REPO / "phaseflow").rglob("*.py"))


@pytest.mark.parametrize("doc", [*DOCS, *SOURCES], ids=lambda p: str(p.relative_to(REPO)))
def test_no_doc_names_a_file_outside_the_repository(doc: Path) -> None:
    """Docs and docstrings are read with the repository alone: they name nothing outside."""
    text = doc.read_text(encoding="utf-8")
    for needle in ("workflow-format.md", "phase-machine.md", "session.md", "/work/",
                   "shared/spec", "/home/", "/Users/", "C:\\"):
        assert needle not in text, f"{doc.name} mentions {needle!r}"


def test_format_reference_anchors_exist() -> None:
    """Links into workflows.md and validation.md name headings that exist there."""
    def anchors(text: str) -> set[str]:
        return {
            re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"(?m)^#+ (.+)$", text)
        }
    targets = {
        "workflows.md": anchors((REPO / "docs" / "workflows.md").read_text(encoding="utf-8")),
        "validation.md": anchors(VALIDATION),
        "format.md": anchors(FORMAT),
    }
    for doc in (REPO / "docs").glob("*.md"):
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            name, _, anchor = target.partition("#")
            name = name or doc.name
            if anchor and name in targets:
                assert anchor in targets[name], f"{doc.name}: no heading for {target}"
