"""Every ``pip install`` a user is told to run installs this project.

``phaseflow`` on the package index is an unrelated project: an install line naming it (or an
extra pyproject.toml does not declare) installs someone else's code or fails. The lines are
read where users read them: the README, DEVELOPERS.md, docs/*.md, examples/, and the
messages and docstrings of the package.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from phaseflow.errors import DISTRIBUTION, install_hint

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])

#: other projects' packages the benchmarks compare with, named as theirs
PEERS = {"langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres",
         "psycopg[binary]", "psycopg-pool", "langchain-core", "openai-agents",
         "langgraph-cli[inmem]", "check-jsonschema"}

_TARGET = re.compile(r"^(?P<name>\.|" + re.escape(DISTRIBUTION) + r")(\[(?P<extras>[a-z,]+)\])?$")


def _sources() -> list[Path]:
    files = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]
    files += sorted(p for p in (REPO / "examples").rglob("*") if p.suffix in {".md", ".py",
                                                                            ".html", ".js"})
    files += sorted(p for p in (REPO / "phaseflow").rglob("*.py")
                    if p != REPO / "phaseflow" / "errors.py")
    return files


def _install_lines() -> list[tuple[str, str]]:
    """(where, the arguments of pip install): a command in backticks broken over two lines
    of prose is read whole, and cut where the prose or the shell resumes."""
    found = []
    for path in _sources():
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            for match in re.finditer(r"pip install(?P<rest>.*)", line):
                rest = match.group("rest")
                in_backticks = line[: match.start()].count("`") % 2 == 1
                if in_backticks and "`" not in rest and number < len(lines):
                    rest += " " + lines[number].strip()
                rest = re.split(r"`|&&|\s#|\)|\"|\s\(| in |;|(?<=\S)\.\s|:$", rest)[0]
                found.append((f"{path.relative_to(REPO)}:{number}", rest))
    return found


def _targets(arguments: str) -> list[str]:
    return [word for word in shlex.split(arguments) if not word.startswith("-")]


def test_the_distribution_is_named_in_pyproject_and_the_command_and_import_stay() -> None:
    assert PYPROJECT["project"]["name"] == DISTRIBUTION != "phaseflow"
    assert PYPROJECT["project"]["scripts"] == {"phaseflow": "phaseflow.cli.main:entry"}
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["phaseflow*"]


def _wrong(place: str, arguments: str) -> list[str]:
    """What is wrong with one install line: a target that is not this project."""
    targets = _targets(arguments)
    if not targets:
        return [f"{place}: no target in 'pip install{arguments}'"]
    wrong = []
    for target in targets:
        if target in PEERS:
            continue
        match = _TARGET.match(target)
        extras = set((match.group("extras") or "").split(",")) - {""} if match else set()
        if match is None or not extras <= EXTRAS:
            wrong.append(f"{place}: 'pip install {target}' is not this project "
                         f"(the folder '.' or {DISTRIBUTION}, extras among {sorted(EXTRAS)})")
    return wrong


def test_the_check_refuses_what_installs_someone_else() -> None:
    for bad in (" phaseflow", " 'phaseflow[serve]'", " '.[served]'", " -e",
                " 'phaseflow-agent[x]'"):
        assert _wrong("here", bad) != [], bad
    assert _wrong("here", " -e '.[dev,serve]'") == []
    assert _wrong("here", " 'phaseflow-agent[serve]'") == []


def test_the_docs_have_install_lines_and_each_installs_this_project() -> None:
    lines = _install_lines()
    where = {place.split(":")[0] for place, _ in lines}
    assert {"README.md", "docs/serve.md", "docs/web-view.md", "docs/mcp.md",
            "phaseflow/stores/postgres.py"} <= where
    assert [problem for place, arguments in lines for problem in _wrong(place, arguments)] == []


@pytest.mark.parametrize("extra", sorted(EXTRAS - {"dev"}))
def test_the_message_for_a_missing_extra_installs_this_project(extra: str) -> None:
    words = shlex.split(install_hint(extra).split(" in ")[0])
    assert words[:2] == ["pip", "install"]
    assert _TARGET.match(words[2]) is not None and words[2] == f".[{extra}]"


def test_every_extra_the_package_asks_for_exists() -> None:
    asked = set()
    for path in (REPO / "phaseflow").rglob("*.py"):
        text = path.read_text("utf-8")
        asked |= set(re.findall(r"install_hint\(['\"]([a-z]+)['\"]\)", text))
        # an SDK provider names its extra third in check_adapter's (module, package, extra)
        asked |= set(re.findall(r'check_adapter\([^()]*\("[^"]+", "[^"]+", "([a-z]+)"\)', text))
    assert asked == {"serve", "postgres", "openai", "anthropic", "gemini", "otel", "mcp",
                     "transitions"}
    assert asked <= EXTRAS
