"""`phaseflow graph` of workflows that compose: called workflows as Mermaid subgraphs and
DOT clusters, hand-offs as nodes, each rendered by the real tools."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.commands import WORKFLOWS, run_cli

DESKS = WORKFLOWS / "desks"


def test_a_called_workflow_is_a_mermaid_subgraph_entered_and_returned_from() -> None:
    proc = run_cli("graph", str(DESKS / "billing-desk.yaml"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert 'subgraph p_verify__sub["identity: identity-check"]' in out
    assert '    p_verify__find["find"]' in out
    assert 'p_verify ==>|"call"| p_verify__find' in out
    assert 'p_verify__verified ==>|"returns verified"| p_verify' in out
    assert 'p_verify -->|"returned == \'verified\'"| p_invoices' in out


def test_hand_offs_are_nodes_and_the_dot_clusters_render_in_graphviz() -> None:
    dot = shutil.which("dot")
    if dot is None:
        pytest.skip("Graphviz dot not installed here (CI installs it: see .ci/run)")
    proc = run_cli("graph", str(DESKS / "triage.yaml"), "--format", "dot")
    assert proc.returncode == 0, proc.stderr
    assert '"handoff: billing" [shape=parallelogram];' in proc.stdout
    assert '"listen" -> "handoff: billing" [label="model", style=dashed];' in proc.stdout
    desk = run_cli("graph", str(DESKS / "tech-desk.yaml"), "--format", "dot").stdout
    assert 'subgraph "cluster_verify__" {' in desk
    assert '"verify" -> "verify__find" [label="call", style=bold];' in desk
    for text in (proc.stdout, desk):
        rendered = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True,
                                  timeout=60)
        assert rendered.returncode == 0, rendered.stderr
        assert "<svg" in rendered.stdout


def test_describe_takes_a_path_into_a_called_workflow() -> None:
    proc = run_cli("describe", str(DESKS / "billing-desk.yaml"), "--phase", "verify/question")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:3] == [
        "Path: billing-desk › verify › identity-check › question",
        "You are inside a call from phase 'verify': it resumes when this workflow reaches "
        "failed or verified.",
        "What returns to it: customer_id.",
    ]
    assert "Tools: crm.verify_identity" in proc.stdout
    wrong = run_cli("describe", str(DESKS / "billing-desk.yaml"), "--phase", "verify/qestion")
    assert wrong.returncode == 2
    assert "identity-check has no phase 'qestion'; did you mean 'question'?" in wrong.stderr
