"""``--provider ROLE=KIND:MODEL`` on ``phaseflow run`` maps a workflow's model roles
(real processes; the role's Anthropic provider through its SDK against a loopback
server), a role left unmapped is one line and exit 2, and ``validate --models`` names a
role the host does not map at the place it is written (PF430)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.phaseflow_cli import cli_env, run_phaseflow
from tests.support.run_cli import run
from tests.support.wire_scripts import anthropic_reply
from tests.support.wire_servers import WireServer

pytest.importorskip("anthropic")

WORKFLOW = """\
phaseflow: 1
name: refunds
initial: triage
model: fast
phases:
  triage:
    goal: Sort the request.
    transitions:
      - to: decide
        trigger: model
  decide:
    goal: Decide the refund.
    model: strong
    terminal: true
"""

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "invalid"


def _project(tmp_path: Path) -> Path:
    (tmp_path / "refunds.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "strong.yaml").write_text("- Refund approved.\n", encoding="utf-8")
    (tmp_path / "default.yaml").write_text("[]\n", encoding="utf-8")
    return tmp_path


def test_each_role_runs_on_the_provider_its_option_names(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    with WireServer("anthropic") as fast:
        fast.push(anthropic_reply("Moving on.", [("toolu_1", "go_to_phase",
                                                  '{"phase": "decide"}')]),
                  anthropic_reply("Refund approved."))
        proc = run(cwd, "refunds.yaml", "--provider", "scripted:default.yaml",
                   "--provider", "fast=anthropic:claude-fast",
                   "--provider", "strong=anthropic:claude-strong", "--json",
                   "-m", "I want my money back",
                   env=cli_env(ANTHROPIC_BASE_URL=fast.base_url, ANTHROPIC_API_KEY="k"))
        assert proc.returncode == 0, proc.stderr
        seen = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [e["reply"] for e in seen if e["type"] == "turn_finished"] == [
            "Refund approved."]
        assert [e["to_phase"] for e in seen if e["type"] == "phase_changed"] == ["decide"]
        assert [r.body["model"] for r in fast.requests] == ["claude-fast", "claude-strong"]


@pytest.mark.parametrize(("options", "message"), [
    (["--provider", "scripted:default.yaml", "--provider", "fast=scripted:strong.yaml"],
     "phaseflow run: error: workflow 'refunds' runs on model role(s) strong, which the "
     "agent does not map (providers: default, fast)"),
    (["--provider", "fast=anthropic"],
     "phaseflow run: error: --provider fast=anthropic: expected fast=anthropic:MODEL"),
    (["--provider", "fast=scripted:a.yaml", "--provider", "fast=scripted:b.yaml"],
     "phaseflow run: error: --provider fast=scripted:b.yaml: role 'fast' is given twice"),
])
def test_a_role_that_cannot_work_is_one_line_and_exit_2(tmp_path: Path, options: list[str],
                                                       message: str) -> None:
    cwd = _project(tmp_path)
    proc = run(cwd, "refunds.yaml", *options, "-m", "x")
    assert proc.returncode == 2
    assert proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_validate_models_names_an_unmapped_role_where_it_is_written() -> None:
    path = str(FIXTURES / "pf430_unmapped_role.yaml")
    proc = run_phaseflow("validate", "--models", "fast,strong", path, env=cli_env())
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0] == (
        f"{path}:13:12: error PF430 phase 'decide' runs on model role 'strnog', which the "
        "host does not map; did you mean 'strong'? (mapped: default, fast, strong)")
    proc = run_phaseflow("validate", "--models", "fast,strnog", path, env=cli_env())
    assert proc.returncode == 0, proc.stdout
    proc = run_phaseflow("validate", path, env=cli_env())  # without --models: no check
    assert proc.returncode == 0, proc.stdout
    proc = run_phaseflow("validate", "--models", "Fast", path, env=cli_env())
    assert proc.returncode == 2
    assert "--models Fast: expected model role names" in proc.stderr


def test_serve_maps_roles_and_refuses_an_unmapped_one(tmp_path: Path) -> None:
    import httpx

    from tests.support.serve_server import serving

    cwd = _project(tmp_path)
    with WireServer("anthropic") as claude:
        claude.push(anthropic_reply("Moving on.", [("toolu_1", "go_to_phase",
                                                    '{"phase": "decide"}')]),
                    anthropic_reply("Refund approved."))
        env = cli_env(ANTHROPIC_BASE_URL=claude.base_url, ANTHROPIC_API_KEY="k")
        with serving(["refunds.yaml", "--provider", "scripted:default.yaml", "--provider",
                      "fast=anthropic:claude-fast", "--provider",
                      "strong=anthropic:claude-strong", "--store", "memory"],
                     tmp_path / "server.log", cwd=cwd, env=env) as server, \
                httpx.Client(base_url=server.base, timeout=30) as client:
            created = client.post("/v1/sessions", json={"workflow": "refunds"})
            assert created.status_code == 201, created.text
            answer = client.post(f"/v1/sessions/{created.json()['id']}/messages",
                                 json={"text": "My money back"},
                                 headers={"Accept": "application/json"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["reply"] == "Refund approved."
        assert [r.body["model"] for r in claude.requests] == ["claude-fast", "claude-strong"]
    proc = run_phaseflow("serve", "refunds.yaml", "--provider", "scripted:default.yaml",
                         "--port", "0", cwd=cwd, env=cli_env())
    assert proc.returncode == 2
    assert "runs on model role(s) fast, strong, which the agent does not map" in proc.stderr
