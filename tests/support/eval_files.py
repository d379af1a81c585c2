"""Eval files the eval tests write: the bundled refund desk's mocks, stand-ins and
data, and its cooperative customer's scripted conversation, to vary one part at a
time (a criterion, the model's replies, the user's script)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REFUND_DESK = ROOT / "workflows" / "refund-desk.yaml"
BUNDLED = ROOT / "workflows" / "refund-desk.eval.yaml"


def bundled() -> dict[str, Any]:
    """The bundled eval file, as data."""
    data: dict[str, Any] = yaml.safe_load(BUNDLED.read_text(encoding="utf-8"))
    return data


def cooperative(**changes: Any) -> dict[str, Any]:
    """The bundled cooperative customer's scenario, with ``changes`` over it."""
    scenario = copy.deepcopy(bundled()["scenarios"][0])
    scenario.update(changes)
    return scenario


def write_eval(folder: Path, scenarios: list[dict[str, Any]], name: str = "desk",
               **top: Any) -> Path:
    """``folder/NAME.eval.yaml``: the bundled file's mocks, tools and data, the refund
    desk workflow, and ``scenarios``; ``top`` replaces top-level keys."""
    data = bundled()
    data["workflow"] = str(REFUND_DESK)
    data["scenarios"] = scenarios
    data.update(top)
    path = folder / f"{name}.eval.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
