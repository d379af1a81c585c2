"""``phaseflow validate`` and ``phaseflow schema`` end to end, through a real subprocess."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support.phaseflow_cli import RunCli

TESTS = Path(__file__).resolve().parents[1]
INVALID = TESTS / "fixtures" / "invalid"
GOOD = TESTS / "spec" / "data" / "refund_desk.yaml"
REPO = TESTS.parent

LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning) "
                  r"(?P<code>PF\d{3}) (?P<msg>.+)$")

UNREACHABLE = (INVALID / "pf202_unreachable.yaml").read_text()
BAD_TARGET = (INVALID / "pf201_unknown_target.yaml").read_text()


def no_traceback(proc: object) -> None:
    stderr = getattr(proc, "stderr", "")
    assert "Traceback" not in stderr
    assert "internal error" not in stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with two workflows (one with an error, one with a warning), a good one in a
    sub-folder, and YAML files discovery must skip."""
    (tmp_path / "b_target.yaml").write_text(BAD_TARGET)
    (tmp_path / "a_orphan.yml").write_text(UNREACHABLE)
    sub = tmp_path / "sub" / "deeper"
    sub.mkdir(parents=True)
    shutil.copy(GOOD, sub / "refund.yaml")
    # skipped: not a workflow, a workflow test file, hidden and vendored folders, not YAML
    (tmp_path / "docker-compose.yaml").write_text("services:\n  web: {image: nginx}\n")
    (tmp_path / "refund.test.yaml").write_text("phaseflow-test: 1\nworkflow: refund.yaml\n")
    for skipped in (".github", "node_modules", "venv", ".venv"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "wf.yaml").write_text(BAD_TARGET)
    (tmp_path / "notes.txt").write_text(BAD_TARGET)
    return tmp_path


def test_text_format_sorted_lines_and_summary(project: Path, phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", str(project))
    no_traceback(proc)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines == [
        f"{project / 'a_orphan.yml'}:12:3: warning PF202 phase 'orphan' cannot be reached "
        "from the initial phase 'start'",
        f"{project / 'b_target.yaml'}:10:13: error PF201 phase 'start': transition to unknown "
        "phase 'refnd'; did you mean 'refund'?",
        "3 files checked: 1 errors, 1 warnings",
    ]
    assert proc.stderr == ""


def test_text_lines_sorted_by_file_line_column(phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", str(INVALID))
    parsed = [LINE.match(line) for line in proc.stdout.splitlines()[:-1]]
    assert all(parsed), proc.stdout
    keys = [(m["path"], int(m["line"]), int(m["col"])) for m in parsed if m]
    assert keys == sorted(keys)


def test_json_format(project: Path, phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", "--format", "json", str(project))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert list(data) == ["files", "errors", "warnings", "diagnostics"]
    assert (data["files"], data["errors"], data["warnings"]) == (3, 1, 1)
    assert data["diagnostics"][1] == {
        "path": str(project / "b_target.yaml"),
        "line": 10,
        "column": 13,
        "severity": "error",
        "code": "PF201",
        "message": "phase 'start': transition to unknown phase 'refnd'; did you mean 'refund'?",
    }
    assert all(list(d) == ["path", "line", "column", "severity", "code", "message"]
               for d in data["diagnostics"])


def test_json_format_clean(phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", "--format=json", str(GOOD))
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"files": 1, "errors": 0, "warnings": 0, "diagnostics": []}


def test_github_format(project: Path, phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", "--format", "github", str(project))
    assert proc.returncode == 1
    orphan = str(project / "a_orphan.yml").replace(":", "%3A").replace(",", "%2C")
    target = str(project / "b_target.yaml").replace(":", "%3A").replace(",", "%2C")
    assert proc.stdout.splitlines() == [
        f"::warning file={orphan},line=12,col=3,title=PF202::phase 'orphan' cannot be reached "
        "from the initial phase 'start'",
        f"::error file={target},line=10,col=13,title=PF201::phase 'start': transition to "
        "unknown phase 'refnd'; did you mean 'refund'?",
    ]


def test_github_format_escapes_newlines_and_percent(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    bad = tmp_path / "a,b.yaml"
    bad.write_text('phaseflow: 1\nname: x\ninitial: "100%\\nsure"\n'
                   "phases: {a: {goal: g, terminal: true}}\n")
    proc = phaseflow_cli("validate", "--format", "github", str(bad))
    out = proc.stdout.splitlines()
    assert len(out) == 1 + 1  # PF200 (unknown initial) + PF103 (bad phase name pattern)
    assert all(line.startswith("::error file=") for line in out)
    assert "a%2Cb.yaml" in out[0]
    assert "100%25%0Asure" in proc.stdout


def test_strict_makes_warnings_fail(phaseflow_cli: RunCli) -> None:
    warning_only = str(INVALID / "pf202_unreachable.yaml")
    proc = phaseflow_cli("validate", warning_only)
    assert proc.returncode == 0
    assert proc.stdout.endswith("1 files checked: 0 errors, 1 warnings\n")
    strict = phaseflow_cli("validate", "--strict", warning_only)
    assert strict.returncode == 1
    assert strict.stdout == proc.stdout
    assert phaseflow_cli("validate", "--strict", str(GOOD)).returncode == 0


@pytest.mark.parametrize(
    ("args", "code", "stderr_words"),
    [
        (["validate", "GOOD"], 0, []),
        (["validate", str(INVALID / "pf201_unknown_target.yaml")], 1, []),
        (["validate", "--no-such-option", "GOOD"], 2, ["unrecognized arguments"]),
        (["validate", "--format", "xml", "GOOD"], 2, ["invalid choice"]),
        (["validate", "does/not/exist.yaml"], 2, ["no such file or folder", "does/not/exist"]),
        (["validate", "GOOD", "missing-too.yaml"], 2, ["missing-too.yaml"]),
        (["validate", "--hooks", "nocolon", "GOOD"], 2, ["MODULE:ATTR"]),
        (["validate", "--hooks", "no_such_module_xyz:R", "GOOD"], 2, ["cannot load"]),
        (["validate", "--hooks", "json:dumps", "GOOD"], 2, ["expected a mapping"]),
        (["frobnicate"], 2, ["invalid choice"]),
        ([], 2, ["validate"]),
    ],
)
def test_exit_codes(args: list[str], code: int, stderr_words: list[str],
                    phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli(*[str(GOOD) if a == "GOOD" else a for a in args])
    assert proc.returncode == code, proc.stderr
    no_traceback(proc)
    for word in stderr_words:
        assert word in proc.stderr
    if code == 2:
        assert proc.stdout == ""


def test_discovery_is_recursive_and_skips_non_workflows(project: Path,
                                                        phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", "--format", "json", str(project))
    data = json.loads(proc.stdout)
    assert data["files"] == 3
    assert {d["path"] for d in data["diagnostics"]} == {
        str(project / "a_orphan.yml"), str(project / "b_target.yaml")}


def test_no_path_means_current_folder(project: Path, phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", cwd=project)
    assert proc.returncode == 1
    assert proc.stdout.endswith("3 files checked: 1 errors, 1 warnings\n")
    assert "b_target.yaml:10:13: error PF201" in proc.stdout


def test_a_named_file_is_always_checked(project: Path, phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", str(project / "docker-compose.yaml"))
    assert proc.returncode == 1
    assert "missing required key 'phaseflow'" in proc.stdout
    hidden = phaseflow_cli("validate", str(project / ".github" / "wf.yaml"))
    assert hidden.returncode == 1 and "PF201" in hidden.stdout


def test_skip_non_workflows_filters_named_files(project: Path, phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli(
        "validate", "--skip-non-workflows",
        str(project / "docker-compose.yaml"), str(project / "refund.test.yaml"),
        str(project / "sub" / "deeper" / "refund.yaml"),
    )
    assert (proc.returncode, proc.stdout) == (0, "1 files checked: 0 errors, 0 warnings\n")
    broken = phaseflow_cli("validate", "--skip-non-workflows",
                           str(project / "docker-compose.yaml"), str(project / "b_target.yaml"))
    assert broken.returncode == 1
    assert broken.stdout.endswith("1 files checked: 1 errors, 0 warnings\n")
    # a file that cannot be decoded is still reported, never silently skipped
    latin = phaseflow_cli("validate", "--skip-non-workflows", str(INVALID / "pf001_not_utf8.yaml"))
    assert latin.returncode == 1 and "PF001" in latin.stdout


def test_a_file_named_twice_is_checked_once(phaseflow_cli: RunCli) -> None:
    bad = str(INVALID / "pf201_unknown_target.yaml")
    proc = phaseflow_cli("validate", bad, bad, str(INVALID))
    assert proc.stdout.count("PF201") == 1


def test_fixtures_folder_end_to_end(phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", "--format", "json", "--hooks", "pf405_hooks:REGISTRY", ".",
                         cwd=INVALID)
    no_traceback(proc)
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    yaml_files = sorted(INVALID.glob("*.yaml"))
    # pf004_empty.yaml holds only a comment: no 'phaseflow' key, so discovery skips it
    assert data["files"] == len(yaml_files) - 1
    from phaseflow.spec.diagnostics import CODES

    # (PF410 and PF411 need MCP servers: validate --mcp, tested in tests/mcp)
    # (PF500-PF509 are about several files: tests/fixtures/composed, tests/spec;
    # PF430 needs the host's roles: validate --models, tested in tests/cli)
    assert {d["code"] for d in data["diagnostics"]} == {
        c for c in CODES
        if c not in ("PF410", "PF411", "PF430") and not c.startswith("PF5")}
    for d in data["diagnostics"]:
        assert Path(d["path"]).name[2:5] == d["code"][2:], d  # each file gives its own code
    assert (data["errors"], data["warnings"]) == (
        sum(1 for d in data["diagnostics"] if d["severity"] == "error"),
        sum(1 for d in data["diagnostics"] if d["severity"] == "warning"),
    )


def test_hooks_end_to_end(phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("validate", "--hooks", "pf405_hooks:REGISTRY", "pf405_unknown_call.yaml",
                         cwd=INVALID)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "pf405_unknown_call.yaml:8:15: error PF405 phase 'start': call 'notify_custmer' names "
        "no callable in the host's registry; did you mean 'notify_customer'?",
        "1 files checked: 1 errors, 0 warnings",
    ]
    without = phaseflow_cli("validate", "pf405_unknown_call.yaml", cwd=INVALID)
    assert without.returncode == 0


def test_schema_command_is_byte_identical(phaseflow_cli: RunCli) -> None:
    proc = phaseflow_cli("schema")
    assert proc.returncode == 0
    assert proc.stdout.encode() == (REPO / "schemas" / "workflow.schema.json").read_bytes()


def test_console_script_works(tmp_path: Path) -> None:
    import subprocess

    exe = shutil.which("phaseflow")
    if exe is None:
        pytest.skip("the phaseflow console script is not on PATH (package not installed)")
    proc = subprocess.run([exe, "validate", str(GOOD)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (0, "1 files checked: 0 errors, 0 warnings\n")


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_never_a_traceback_on_fixtures(fmt: str, phaseflow_cli: RunCli) -> None:
    names = sorted(str(p) for p in INVALID.glob("*.yaml"))
    proc = phaseflow_cli("validate", "--format", fmt, *names)
    no_traceback(proc)
    assert proc.stderr == ""
    assert proc.returncode == 1
