"""``phaseflow sessions tick`` as cron runs it: the due timers of the workflow's
sessions fired once each (a second run fires nothing), ``sessions show`` saying when the
next one is due; ``validate`` refusing a bad duration at its position."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.phaseflow_cli import RunCli, cli_env

WORKFLOW = """\
phaseflow: 1
name: waiter
initial: wait
phases:
  wait:
    goal: Wait for the customer.
    transitions:
      - to: follow_up
        after: 1s
  follow_up:
    goal: Follow up with the customer.
    terminal: true
"""


def test_tick_fires_each_due_timer_once(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    # the scripted model's replies are numbered through the conversation
    (tmp_path / "replies.yaml").write_text("- Hello.\n- Any news?\n")
    store = str(tmp_path / "s.db")
    ran = phaseflow_cli("run", "wf.yaml", "--provider", "scripted:replies.yaml", "--store",
                        store, "--session", "c1", "-m", "hi", cwd=tmp_path, env=cli_env())
    assert ran.returncode == 0, ran.stderr
    shown = json.loads(phaseflow_cli("sessions", "show", "c1", "--store", store,
                                     "--json", env=cli_env()).stdout)
    assert shown["phase"] == "wait" and shown["next_timer_at"] > shown["updated_at"]
    assert "next timer due" in phaseflow_cli("sessions", "show", "c1", "--store", store,
                                            env=cli_env()).stdout
    time.sleep(max(0.0, shown["next_timer_at"] - time.time()) + 0.1)
    tick = ("sessions", "tick", "--store", store, "--workflow", "wf.yaml", "--provider",
            "scripted:replies.yaml")
    first = phaseflow_cli(*tick, cwd=tmp_path, env=cli_env())
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "fired 1 timer(s) of waiter"
    again = phaseflow_cli(*tick, cwd=tmp_path, env=cli_env())
    assert again.stdout.strip() == "fired 0 timer(s) of waiter"
    shown = json.loads(phaseflow_cli("sessions", "show", "c1", "--store", store,
                                     "--json", env=cli_env()).stdout)
    assert (shown["phase"], shown["turn"], shown["next_timer_at"]) == ("follow_up", 2, None)
    assert shown["history"][-1]["content"] == "Any news?"
    assert "[timer]" in json.dumps(shown["history"][-2])


def test_validate_refuses_a_bad_duration_at_its_position(tmp_path: Path,
                                                          phaseflow_cli: RunCli) -> None:
    (tmp_path / "wf.yaml").write_text(WORKFLOW.replace("after: 1s", "after: soon"))
    checked = phaseflow_cli("validate", "wf.yaml", cwd=tmp_path, env=cli_env())
    assert checked.returncode == 1
    assert "wf.yaml:9:16: error PF105" in checked.stdout
    assert "'after' must be a duration" in checked.stdout


def test_tick_names_a_damaged_session_exits_1_and_fires_the_others(
        tmp_path: Path, phaseflow_cli: RunCli) -> None:
    import sqlite3

    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    (tmp_path / "replies.yaml").write_text("- Hello.\n- Any news?\n")
    store = str(tmp_path / "s.db")
    for sid in ("c1", "c2", "c3"):
        ran = phaseflow_cli("run", "wf.yaml", "--provider", "scripted:replies.yaml",
                            "--store", store, "--session", sid, "-m", "hi", cwd=tmp_path,
                            env=cli_env())
        assert ran.returncode == 0, ran.stderr
    db = sqlite3.connect(store, isolation_level=None)
    db.execute("UPDATE sessions SET snapshot = '{\"broken\": ' WHERE id = 'c2'")
    due = db.execute("SELECT max(due_at) FROM timers").fetchone()[0]
    db.close()
    time.sleep(max(0.0, due - time.time()) + 0.1)
    tick = ("sessions", "tick", "--store", store, "--workflow", "wf.yaml", "--provider",
            "scripted:replies.yaml", "--concurrency", "2")
    first = phaseflow_cli(*tick, cwd=tmp_path, env=cli_env())
    assert first.returncode == 1, first.stderr
    assert first.stdout.strip() == "fired 2 timer(s) of waiter"
    assert "Traceback" not in first.stderr
    [line] = first.stderr.splitlines()
    assert line.startswith("c2: its timer cannot fire: session 'c2'"), line
    for sid in ("c1", "c3"):
        shown = json.loads(phaseflow_cli("sessions", "show", sid, "--store", store,
                                         "--json", env=cli_env()).stdout)
        assert (shown["phase"], shown["turn"]) == ("follow_up", 2)
    again = phaseflow_cli(*tick, cwd=tmp_path, env=cli_env())
    assert (again.returncode, again.stdout.strip()) == (1, "fired 0 timer(s) of waiter")
    refused = phaseflow_cli(*tick[:-1], "0", cwd=tmp_path, env=cli_env())
    assert refused.returncode == 2 and "--concurrency" in refused.stderr
