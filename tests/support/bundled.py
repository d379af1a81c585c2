"""The bundled workflows in ``workflows/`` (the top folder only), without their test
files (``*.test.yaml``) and eval files (``*.eval.yaml``): the one rule the tests that
drive every bundled workflow share."""

from __future__ import annotations

from pathlib import Path

#: the repository's ``workflows/`` folder
WORKFLOWS_DIR = Path(__file__).resolve().parents[2] / "workflows"

_NOT_WORKFLOWS = (".test.yaml", ".eval.yaml")


def bundled_workflows() -> list[Path]:
    """Every bundled workflow file of ``workflows/``, sorted."""
    return sorted(p for p in WORKFLOWS_DIR.glob("*.yaml")
                  if not p.name.endswith(_NOT_WORKFLOWS))
