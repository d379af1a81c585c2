"""``phaseflow run`` with a scripted model: a script that does not fit what happened (a
call rejected because nobody approved it, replies left over) ends with a warning naming
the first mismatch; ``--strict-script`` makes it exit 1. Through the real command."""

from __future__ import annotations

from pathlib import Path

from tests.support.run_cli import DESK_ARGS, PAY_SCRIPT, besides_the_store, project, run

REJECTED = ("turn 1: pay was rejected because nobody was there to approve it, and the "
            "script's later replies were written without knowing it (--approve all approves "
            "every call, --approve none rejects them on purpose)")


def test_an_unexpected_rejection_is_a_warning_naming_it(tmp_path: Path) -> None:
    cwd = project(tmp_path, PAY_SCRIPT)  # "Paid, thank you." after the rejection
    proc = run(cwd, *DESK_ARGS, "-m", "Please pay 5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("agent: Paid, thank you.")
    assert besides_the_store(proc.stderr) == (
        f"phaseflow run: warning: the script does not fit the conversation: {REJECTED}; "
        "--strict-script makes this an error\n")


def test_strict_script_makes_it_exit_1(tmp_path: Path) -> None:
    cwd = project(tmp_path, PAY_SCRIPT + "- A reply nobody asks for.\n")
    proc = run(cwd, *DESK_ARGS, "--strict-script", "-m", "Please pay 5")
    assert proc.returncode == 1
    assert besides_the_store(proc.stderr) == (
        f"phaseflow run: error: the script does not fit the conversation: {REJECTED} "
        "(and 1 more)\n")


def test_replies_left_over_are_named(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- Hello.\n- Still here.\n- Goodbye.\n")
    proc = run(cwd, *DESK_ARGS, "-m", "hi")
    assert proc.returncode == 0, proc.stderr
    assert besides_the_store(proc.stderr) == (
        "phaseflow run: warning: the script does not fit the conversation: the script has 3 "
        "replies but only 1 were asked for: 2 left unused (the next: text 'Still here.'); "
        "--strict-script makes this an error\n")
    strict = run(cwd, *DESK_ARGS, "--strict-script", "-m", "hi", "--store", "memory")
    assert strict.returncode == 1
    assert strict.stderr.startswith("phaseflow run: error: the script does not fit")


def test_a_script_that_fits_says_nothing_and_strict_passes(tmp_path: Path) -> None:
    cwd = project(tmp_path, PAY_SCRIPT)
    for approve in ("all", "none"):  # a rejection asked for is no surprise
        proc = run(cwd, *DESK_ARGS, "--approve", approve, "--strict-script",
                   "-m", "Please pay 5", "--store", "memory")
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""


def test_strict_script_without_a_script_is_refused(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "--strict-script", "-m", "hi")
    assert proc.returncode == 2
    assert proc.stderr == ("phaseflow run: error: --strict-script checks the script of "
                           "--provider scripted:FILE\n")
