"""`phaseflow graph`: the output is accepted by the real renderers (Graphviz, Mermaid)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.bundled import bundled_workflows
from tests.support.commands import run_cli

BUNDLED = bundled_workflows()
IN_CI = os.environ.get("CI") == "true"

TRICKY = """\
phaseflow: 1
name: tricky
initial: end
phases:
  end:
    goal: 'A phase named like a Mermaid keyword, with "quotes" and <angles>'
    transitions:
      - to: graph
        when: state.note == "a|b" and state.x < 3 or state['k'] != '{x}'
      - to: subgraph
        trigger: model
  graph:
    goal: g
    transitions: [{to: subgraph}]
  subgraph:
    goal: s
    terminal: true
"""


def _mmdc() -> str | None:
    found = os.environ.get("PHASEFLOW_MMDC") or shutil.which("mmdc")
    if found and Path(found).exists():
        return found
    local = Path(__file__).resolve().parents[2] / ".ci" / "node_modules" / ".bin" / "mmdc"
    return str(local) if local.exists() else None


def _need(tool: str | None, name: str) -> str:
    if tool is None:
        if IN_CI:
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} not installed here (CI installs it: see .ci/run)")
    return tool


def test_bundled_workflows_exist() -> None:
    assert len(BUNDLED) >= 4


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_dot_output_renders_in_graphviz(path: Path, tmp_path: Path) -> None:
    dot = _need(shutil.which("dot"), "Graphviz dot")
    proc = run_cli("graph", str(path), "--format", "dot")
    assert proc.returncode == 0, proc.stderr
    rendered = subprocess.run(
        [dot, "-Tsvg"], input=proc.stdout, capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "<svg" in rendered.stdout
    # every phase is drawn, terminal phases double-bordered
    from phaseflow.spec.loader import compile_file

    workflow = compile_file(str(path))
    for name, phase in workflow.phases.items():
        line = next(
            line for line in proc.stdout.splitlines() if line.strip().startswith(f'"{name}" [')
        )
        assert ("peripheries=2" in line) == phase.terminal


def test_model_transitions_are_dashed_and_edges_labelled(tmp_path: Path) -> None:
    src = tmp_path / "tricky.yaml"
    src.write_text(TRICKY)
    dot = run_cli("graph", str(src), "--format", "dot").stdout
    assert '"end" -> "subgraph" [label="model", style=dashed];' in dot
    assert '"graph" -> "subgraph" [label="always"];' in dot
    assert 'state.note == \\"a|b\\"' in dot
    mermaid = run_cli("graph", str(src)).stdout
    assert 'p_end -.->|"model"| p_subgraph' in mermaid
    assert 'p_graph -->|"always"| p_subgraph' in mermaid


def _render_mermaid(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    mmdc = _need(_mmdc(), "mermaid-cli (mmdc)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromium = _need(chromium, "Chromium")
    config = tmp_path / "puppeteer.json"
    config.write_text(
        json.dumps(
            {
                "executablePath": chromium,
                "args": [
                    "--no-sandbox",
                    "--headless",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ],
            }
        )
    )
    source = tmp_path / "graph.mmd"
    source.write_text(text)
    out = tmp_path / "graph.svg"
    return subprocess.run(
        [mmdc, "-p", str(config), "-i", str(source), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_mermaid_output_renders_in_mermaid_cli(tmp_path: Path) -> None:
    # One mermaid-cli run per file is slow (a browser start), so render all in one chart
    # file each, in one test, plus the tricky names.
    src = tmp_path / "tricky.yaml"
    src.write_text(TRICKY)
    for path in [*BUNDLED, src]:
        proc = run_cli("graph", str(path))
        assert proc.returncode == 0, proc.stderr
        rendered = _render_mermaid(proc.stdout, tmp_path)
        assert rendered.returncode == 0, f"{path.name}: {rendered.stderr}{rendered.stdout}"
        svg = (tmp_path / "graph.svg").read_text()
        assert "<svg" in svg and "Syntax error" not in svg


def test_mermaid_cli_rejects_broken_input(tmp_path: Path) -> None:
    """The renderer test can fail: mermaid-cli really refuses bad syntax."""
    rendered = _render_mermaid('flowchart TD\n  a -->|"x"| end\n  b[[[\n', tmp_path)
    assert rendered.returncode != 0


def test_graph_of_a_broken_workflow_reports_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "phaseflow: 1\nname: bad\ninitial: nowhere\nphases:\n  a: {goal: x, terminal: true}\n"
    )
    proc = run_cli("graph", str(bad))
    assert proc.returncode == 1
    assert "PF200" in proc.stderr
    assert run_cli("graph", str(tmp_path / "missing.yaml")).returncode == 2


def test_every_edge_is_labelled_with_its_condition_and_terminals_are_marked(
    tmp_path: Path,
) -> None:
    """Both formats: one edge per transition with its condition (or ``always``/``model``),
    model edges drawn differently from auto ones, terminal phases marked, the start."""
    from phaseflow.graph import to_dot, to_mermaid
    from phaseflow.spec.loader import compile_file

    src = tmp_path / "tricky.yaml"
    src.write_text(TRICKY)
    wf = compile_file(str(src))
    dot = to_dot(wf)
    assert '"__start__" -> "end";' in dot
    assert '"subgraph" [label="subgraph", peripheries=2];' in dot
    assert '"graph" [label="graph"];' in dot
    cond = "state.note == \\\"a|b\\\" and state.x < 3 or state['k'] != '{x}'"
    assert f'"end" -> "graph" [label="{cond}"];' in dot
    mermaid = to_mermaid(wf)
    assert "start__ --> p_end" in mermaid
    assert 'p_subgraph(["subgraph (final)"])' in mermaid and "class p_subgraph final" in mermaid
    assert 'p_graph["graph"]' in mermaid
    edge = next(line for line in mermaid.splitlines() if line.startswith("  p_end -->"))
    assert "state.note == #quot;a#124;b#quot; and state.x #60; 3" in edge
    for workflow_path in BUNDLED:
        wf = compile_file(str(workflow_path))
        edges = sum(len(p.transitions) for p in wf.phases.values())
        models = sum(t.trigger == "model" for p in wf.phases.values() for t in p.transitions)
        dot_edges = [line for line in to_dot(wf).splitlines()
                     if " -> " in line and "__start__" not in line]
        assert len(dot_edges) == edges
        assert sum("style=dashed" in line for line in dot_edges) == models
        assert all('label="' in line for line in dot_edges)
        m_edges = [line for line in to_mermaid(wf).splitlines()
                   if "-->" in line or "-.->" in line]
        assert len(m_edges) == edges + 1  # and the start arrow
        assert sum("-.->" in line for line in m_edges) == models


def test_drawn_edges_skip_a_target_that_is_no_phase_and_labels_say_the_condition() -> None:
    """What every drawing shares (the web view's graph too): an edge to an unknown phase
    has nothing to point at; a label is the condition on one line, or always/model."""
    from phaseflow.graph import drawn_edges, edge_label
    from phaseflow.spec.model import Phase, Transition, Workflow

    transitions = (Transition("nowhere"), Transition("b", "state.x\n   and state.y"),
                   Transition("b", trigger="model"), Transition("b", "state.z", trigger="model"),
                   Transition("a"))
    workflow = Workflow("g", "a", {"a": Phase("a", transitions=transitions),
                                   "b": Phase("b", terminal=True, transitions=(Transition("a"),))})
    edges = list(drawn_edges(workflow))
    assert [(name, t.to) for name, t in edges] == [("a", "b"), ("a", "b"), ("a", "b"),
                                                    ("a", "a"), ("b", "a")]
    assert [edge_label(t) for _, t in edges] == [
        "state.x and state.y", "model", "model: state.z", "always", "always"]
