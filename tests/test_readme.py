"""The README's promises, run as a user would run them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.phaseflow_cli import PHASEFLOW

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_readme_starts_with_the_title_then_the_quick_start_and_its_two_commands() -> None:
    headings = re.findall(r"^#{1,2} .*$", README.split("```")[0], re.M)
    assert headings == ["# phaseflow", "## Quick start"]
    block = re.search(r"```bash\n(.*?)```", _section("Quick start"), re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] == "pip install -e '.[dev]' && pytest"


def test_the_readme_pre_commit_config_works(tmp_path: Path) -> None:
    """The snippet is copied into a fresh git project and run by the real pre-commit."""
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    block = re.search(r"```yaml\n(.*?)```", _section("Use it in pre-commit"), re.S)
    assert block is not None
    config = yaml.safe_load(block.group(1))
    assert config["repos"][0]["hooks"][0]["id"] == "phaseflow-validate"
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pre-commit-config.yaml").write_text(block.group(1), encoding="utf-8")
    shutil.copy(REPO / "tests" / "spec" / "data" / "refund_desk.yaml", project / "good.yaml")
    shutil.copy(REPO / "tests" / "fixtures" / "invalid" / "pf201_unknown_target.yaml",
                project / "broken.yaml")
    (project / "compose.yml").write_text("services:\n  web: {image: nginx}\n")
    for args in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True, timeout=60)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"),
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    run = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "broken.yaml:10:13: error PF201" in run.stdout
    assert "compose.yml" not in run.stdout
    assert "2 files checked: 1 errors, 0 warnings" in run.stdout
    (project / "broken.yaml").unlink()
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, capture_output=True,
                   timeout=60)
    clean = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Passed" in clean.stdout


def test_the_readme_validate_example_prints_what_it_shows(tmp_path: Path) -> None:
    """The workflow with a typo, written where the README says, gives the README's output."""
    intro = README[: README.index("## Commands")]
    source = re.search(r"```yaml\n(.*?)```", intro, re.S)
    console = re.search(r"```console\n\$ (.*?)\n(.*?)```", intro, re.S)
    assert source is not None and console is not None
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "refund.yaml").write_text(source.group(1), encoding="utf-8")
    args = console.group(1).split()
    assert args[:2] == ["phaseflow", "validate"]
    run = subprocess.run([*PHASEFLOW, *args[1:]],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.stdout == console.group(2)
    assert run.returncode == 1


def test_the_readme_agent_example_runs_with_a_scripted_model() -> None:
    """The first agent example, with the OpenAI provider swapped for a scripted one (no
    network here): it runs as written and ends where its comment says."""
    import re

    block = re.search(r"## A guided agent\n\n```python\n(.*?)```", README, re.S)
    assert block is not None
    code = block.group(1)
    assert 'OpenAIProvider(model="gpt-4.1-mini")' in code
    assert "from phaseflow import Agent, OpenAIProvider, tool" in code
    code = code.replace("from phaseflow import Agent, OpenAIProvider, tool",
                        "from phaseflow import Agent, ScriptedProvider, tool")
    code = code.replace('OpenAIProvider(model="gpt-4.1-mini")', (
        'ScriptedProvider([{"calls": [{"crm.lookup_customer": {"email": "ada@example.com"}}]},'
        ' "Thanks, Ada. Which order?"])'))
    import contextlib
    import io
    import os

    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    finally:
        os.chdir(cwd)
    assert out.getvalue().splitlines() == ["Thanks, Ada. Which order?", "locate_order"]
