"""docs/embedding.md's Python blocks run, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"


@pytest.mark.skipif(not DOC.exists(), reason="docs/embedding.md not present")
def test_embedding_doc_snippets_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 8
    exec(compile("\n".join(blocks), str(DOC), "exec"), {"__name__": "embedding_doc"})
    out = capsys.readouterr().out
    assert "greet -> locate_order" in out
    assert "Current phase: locate_order — Identify the order to refund." in out
    assert "awaiting_approval orders.refund\ncompleted O-9 is refunded.\n" in out
