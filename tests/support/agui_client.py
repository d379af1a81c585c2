"""Where the official AG-UI client is: ``@ag-ui/client`` from npm, installed by
``.ci/run`` into ``.ci/agui/node_modules`` (a folder of its own: mermaid-cli's packages in
``.ci/node_modules`` would shadow the client's own dependencies, which the chat page
imports by path; ``PHASEFLOW_AGUI_NODE_MODULES`` names another
``node_modules``), and Node to run it.

A test that needs them is skipped, with the reason, when either is missing; under CI
(``CI=true``, or ``PHASEFLOW_REQUIRE_AGUI_CLIENT`` set, as ``.ci/run`` does) it fails
instead: there it must run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.phaseflow_cli import ROOT

PACKAGE = "@ag-ui/client"


def node_modules() -> Path:
    named = os.environ.get("PHASEFLOW_AGUI_NODE_MODULES")
    return Path(named) if named else ROOT / ".ci" / "agui" / "node_modules"


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm)"
    if not (node_modules() / PACKAGE / "package.json").exists():
        return (f"{PACKAGE} is not installed in {node_modules()} (.ci/run installs it: "
                f"cd .ci/agui && npm install --prefix . {PACKAGE})")
    return None


def need_client() -> tuple[str, Path]:
    """``node`` and the client package's folder; a skip (a failure under CI) when
    either is missing."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true" or os.environ.get("PHASEFLOW_REQUIRE_AGUI_CLIENT"):
            pytest.fail(f"the official AG-UI client must run here, but {reason}")
        pytest.skip(reason)
    node = shutil.which("node")
    assert node is not None
    return node, node_modules() / PACKAGE


def client_version() -> str:
    """The installed client's version (the test reports what it ran against)."""
    data = json.loads((node_modules() / PACKAGE / "package.json").read_text("utf-8"))
    return str(data["version"])
