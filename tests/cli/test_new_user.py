"""What a new user trips over first, tried end to end through the real command: folders
with nothing to check, standard input, a missing --state file, a test file given to
describe, and the repository's schema file. Each test asserts what the user sees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.phaseflow_cli import PHASEFLOW

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / "workflows"
GOOD = WORKFLOWS / "refund-desk.yaml"
BAD = """\
phaseflow: 1
name: broken
initial: a
phases:
  a:
    goal: Start.
    transitions: [{to: b}]
"""


def run(
    *args: str, cwd: Path | None = None, stdin: bytes | str | None = None
) -> subprocess.CompletedProcess[str]:
    """``phaseflow ARGS`` with ``stdin`` on standard input; never a traceback."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [*PHASEFLOW, *args],
        cwd=cwd or REPO,
        input=data if data is not None else b"",
        capture_output=True,
        timeout=60,
        check=False,
    )
    out = subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )
    assert "Traceback" not in out.stderr, out.stderr
    assert "internal error" not in out.stderr, out.stderr
    return out


# -- folders with nothing to check -------------------------------------------------------


def test_validate_an_empty_folder_is_a_usage_error(tmp_path: Path) -> None:
    proc = run("validate", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == f"phaseflow validate: error: no workflow files in {tmp_path}\n"
    assert "files checked" not in proc.stdout


def test_validate_a_folder_of_other_yaml_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yaml").write_text("services: {web: {image: nginx}}\n")
    (tmp_path / "x.test.yaml").write_text("phaseflow-test: 1\nworkflow: x.yaml\n")
    proc = run("validate", "--format", "json", str(tmp_path))
    assert proc.returncode == 2
    assert "no workflow files in" in proc.stderr
    assert proc.stdout == ""


def test_validate_fails_when_one_of_several_folders_is_empty(tmp_path: Path) -> None:
    (tmp_path / "wrong").mkdir()
    proc = run("validate", str(WORKFLOWS), str(tmp_path / "wrong"))
    assert proc.returncode == 2
    assert f"no workflow files in {tmp_path / 'wrong'}" in proc.stderr


def test_validate_with_no_path_in_an_empty_folder_fails(tmp_path: Path) -> None:
    proc = run("validate", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no workflow files in ." in proc.stderr


def test_validate_still_passes_a_folder_with_workflows() -> None:
    proc = run("validate", str(WORKFLOWS))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.endswith("files checked: 0 errors, 0 warnings\n")


def test_skip_non_workflows_with_only_other_files_named_still_passes(tmp_path: Path) -> None:
    """pre-commit names the changed files; none being a workflow is not a mistake."""
    other = tmp_path / "compose.yaml"
    other.write_text("services: {}\n")
    proc = run("validate", "--skip-non-workflows", str(other))
    assert proc.returncode == 0
    assert proc.stdout == "0 files checked: 0 errors, 0 warnings\n"


def test_test_on_a_folder_without_test_files_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text(GOOD.read_text())
    proc = run("test", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"phaseflow test: error: no workflow test files ('phaseflow-test: 1') in {tmp_path}\n"
    )


# -- standard input ----------------------------------------------------------------------


def test_validate_reads_a_workflow_from_standard_input() -> None:
    proc = run("validate", "-", stdin=GOOD.read_text())
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "1 files checked: 0 errors, 0 warnings\n"


def test_diagnostics_of_standard_input_name_stdin() -> None:
    proc = run("validate", "-", stdin=BAD)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "<stdin>:7:24: error PF201 phase 'a': transition to unknown phase 'b' (phases: a)",
        "1 files checked: 1 errors, 0 warnings",
    ]
    github = run("validate", "--format", "github", "-", stdin=BAD)
    assert github.stdout.startswith("::error file=<stdin>,line=7,col=24,title=PF201::")


def test_standard_input_together_with_files() -> None:
    proc = run("validate", str(GOOD), "-", stdin=BAD)
    assert proc.returncode == 1
    assert proc.stdout.endswith("2 files checked: 1 errors, 0 warnings\n")


def test_standard_input_that_is_not_utf8_is_pf001() -> None:
    proc = run("validate", "-", stdin=b"phaseflow: 1\nname: \xff\n")
    assert proc.returncode == 1
    assert proc.stdout.startswith("<stdin>:2:7: error PF001 input is not UTF-8: byte 0xff")


def test_empty_standard_input_is_pf004() -> None:
    proc = run("validate", "-", stdin="")
    assert proc.returncode == 1
    assert proc.stdout.startswith("<stdin>:1:1: error PF004 ")


def test_standard_input_may_be_named_once() -> None:
    proc = run("validate", "-", "-", stdin=GOOD.read_text())
    assert proc.returncode == 2
    assert "'-' (standard input) may be given once" in proc.stderr


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_any_bytes_on_standard_input_give_an_answer_never_a_traceback(data: bytes) -> None:
    proc = run("validate", "--format", "json", "-", stdin=data)
    assert proc.returncode in (0, 1)
    assert '"files": 1' in proc.stdout


def test_describe_reads_the_state_from_standard_input() -> None:
    proc = run(
        "describe", str(GOOD), "--phase", "refund", "--state", "-",
        stdin='{"customer_id": "C-7", "order_id": "O-42", "amount": 120, '
        '"policy": {"name": "standard", "max_amount": 500}}',
    )
    assert proc.returncode == 0, proc.stderr
    assert "O-42" in proc.stdout


def test_describe_reads_the_workflow_from_standard_input() -> None:
    proc = run("describe", "-", stdin=GOOD.read_text())
    assert proc.returncode == 0, proc.stderr
    assert "Current phase: greet" in proc.stdout
    broken = run("describe", "-", stdin=BAD)
    assert broken.returncode == 1
    assert "<stdin>:7:24: error PF201" in broken.stderr
    assert "fix them first (phaseflow validate -)" in broken.stderr


def test_describe_refuses_two_things_on_standard_input() -> None:
    proc = run("describe", "-", "--state", "-", stdin="{}")
    assert proc.returncode == 2
    assert "cannot both be read from standard input" in proc.stderr


def test_describe_state_from_standard_input_that_is_not_a_mapping() -> None:
    proc = run("describe", str(GOOD), "--state", "-", stdin="[1, 2]")
    assert proc.returncode == 2
    assert "--state <stdin>: the state must be a mapping" in proc.stderr


# -- --state FILE that is not there ------------------------------------------------------


@pytest.mark.parametrize("name", ["missing.json", "state.yaml", "missing", "dir/s.yml"])
def test_describe_a_state_file_that_does_not_exist(tmp_path: Path, name: str) -> None:
    proc = run("describe", str(GOOD), "--state", name, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"phaseflow describe: error: --state {name}: no such file" in proc.stderr
    assert proc.stdout == ""


def test_describe_a_state_that_is_a_folder(tmp_path: Path) -> None:
    proc = run("describe", str(GOOD), "--state", str(tmp_path))
    assert proc.returncode == 2
    assert "not a file" in proc.stderr


def test_inline_state_still_works() -> None:
    proc = run("describe", str(GOOD), "--state", "amount: 3")
    assert proc.returncode == 0, proc.stderr
    proc = run("describe", str(GOOD), "--state", "{}")
    assert proc.returncode == 0, proc.stderr


# -- a test file given to describe or graph ----------------------------------------------


@pytest.mark.parametrize("command", ["describe", "graph"])
def test_a_test_file_is_named_as_one(command: str) -> None:
    test_file = WORKFLOWS / "refund-desk.test.yaml"
    proc = run(command, str(test_file))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert (
        f"phaseflow {command}: error: {test_file} is a workflow test file (phaseflow-test: 1), "
        f"not a workflow; it tests {GOOD}\n"
    ) in proc.stderr
    assert f"phaseflow {command} {GOOD}" in proc.stderr
    assert f"phaseflow test {test_file}" in proc.stderr


def test_a_test_file_naming_no_workflow(tmp_path: Path) -> None:
    path = tmp_path / "t.test.yaml"
    path.write_text("phaseflow-test: 1\nscenarios: []\n")
    proc = run("describe", str(path))
    assert proc.returncode == 2
    assert "is a workflow test file (phaseflow-test: 1), not a workflow; it names no workflow" in (
        proc.stderr
    )


# -- the repository's schema file --------------------------------------------------------


def test_repository_schema_is_a_real_file_equal_to_the_packaged_one() -> None:
    shipped = REPO / "schemas" / "workflow.schema.json"
    packaged = REPO / "phaseflow" / "schemas" / "workflow.schema.json"
    assert not shipped.is_symlink(), "a symlink breaks on checkouts without symlinks"
    assert shipped.is_file()
    assert shipped.read_bytes() == packaged.read_bytes()
    assert run("schema").stdout.encode() == shipped.read_bytes()


def test_repository_schema_is_committed_as_a_regular_file() -> None:
    """git mode 120000 is a symlink: a checkout without symlinks gets a one-line file."""
    proc = subprocess.run(
        ["git", "ls-files", "-s", "schemas/workflow.schema.json"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0 or not proc.stdout:
        pytest.skip("not a git checkout")
    assert proc.stdout.startswith("100644 "), proc.stdout


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40).filter(lambda s: not s.startswith("-") and "\x00" not in s))
def test_any_state_argument_gives_an_answer_never_a_traceback(value: str) -> None:
    proc = run("describe", str(GOOD), "--state", value)
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert proc.stderr.startswith("phaseflow describe: error: --state")
