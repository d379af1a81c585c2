"""The pre-commit hook, for real: ``pre-commit try-repo`` against this repository's HEAD."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def test_hook_definition() -> None:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "phaseflow-validate"
    assert hook["entry"].split()[:2] == ["phaseflow", "validate"]
    assert "--skip-non-workflows" in hook["entry"].split()
    assert hook["language"] == "python"
    assert hook["types"] == ["yaml"]


def _pre_commit() -> list[str]:
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        pytest.skip("pre-commit is not installed (pip install pre-commit) - cannot try the hook")
    return [sys.executable, "-m", "pre_commit"]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def test_pre_commit_try_repo(tmp_path: Path) -> None:
    pre_commit = _pre_commit()
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    committed = subprocess.run(["git", "show", "HEAD:.pre-commit-hooks.yaml"], cwd=REPO,
                               capture_output=True, text=True, check=False)
    if committed.returncode != 0:
        pytest.skip("the hook file is not committed yet: try-repo clones HEAD")
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    shutil.copy(TESTS / "spec" / "data" / "refund_desk.yaml", project / "good.yaml")
    shutil.copy(TESTS / "fixtures" / "invalid" / "pf201_unknown_target.yaml",
                project / "broken.yaml")
    (project / "compose.yml").write_text("services:\n  web: {image: nginx}\n")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run = [*pre_commit, "try-repo", str(REPO), "phaseflow-validate", "--verbose", "--files"]

    clean = subprocess.run([*run, "good.yaml", "compose.yml"], cwd=project, env=env,
                           capture_output=True, text=True, timeout=600, check=False)
    if clean.returncode != 0 and "An unexpected error has occurred" in clean.stdout:
        pytest.skip(f"pre-commit could not install the hook environment: {clean.stdout[-500:]}")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Passed" in clean.stdout

    broken = subprocess.run([*run, "good.yaml", "broken.yaml", "compose.yml"], cwd=project,
                            env=env, capture_output=True, text=True, timeout=600, check=False)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "Failed" in broken.stdout
    assert "broken.yaml:10:13: error PF201" in broken.stdout
    # three files passed by name, two checked: compose.yml is no workflow and is skipped
    assert "compose.yml:" not in broken.stdout
    assert "2 files checked: 1 errors, 0 warnings" in broken.stdout
