"""`phaseflow describe`: the instructions and navigation block the model would see."""

from __future__ import annotations

from pathlib import Path

from tests.support.bundled import bundled_workflows
from tests.support.commands import run_cli

SPEC_EXAMPLE = """\
phaseflow: 1
name: refund-desk
initial: greet
state:
  customer_id: {type: string}
  order_id: {type: string}
  amount: {type: number, default: 0}
  policy: {type: object}
tools:
  lookup_customer: {writes: [customer_id]}
  find_order: {writes: [order_id, amount]}
phases:
  greet:
    goal: Learn who the customer is.
    instructions: Ask for the email address. Turn {{ turn }}.
    tools: [lookup_customer]
    transitions:
      - {to: locate_order, when: state.customer_id, description: Customer verified}
  locate_order:
    goal: Identify the order to refund.
    requires: [customer_id]
    needs: [order_id]
    instructions: |
      Customer {{ state.customer_id }} wants a refund of {{ state.amount }}.
    tools: [find_order]
    transitions:
      - {to: done, when: state.amount <= 500, description: Small refund}
      - {to: done, trigger: model, description: The customer gives up}
  done:
    goal: Close politely.
    terminal: true
"""


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "desk.yaml"
    path.write_text(SPEC_EXAMPLE)
    return path


def test_describe_defaults_to_the_initial_phase_and_declared_defaults(tmp_path: Path) -> None:
    proc = run_cli("describe", str(_write(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[Instructions]\nAsk for the email address. Turn 0.\n\n")
    assert "[Navigation]\nCurrent phase: greet — Learn who the customer is.\n" in proc.stdout
    assert "Tools: lookup_customer" in proc.stdout
    assert "→ locate_order: Customer verified (waiting for: customer_id)" in proc.stdout


def test_describe_a_phase_for_a_given_state(tmp_path: Path) -> None:
    proc = run_cli(
        "describe",
        str(_write(tmp_path)),
        "--phase",
        "locate_order",
        "--state",
        '{"customer_id": "C-7", "amount": 900}',
    )
    assert proc.returncode == 0, proc.stderr
    assert "Customer C-7 wants a refund of 900." in proc.stdout
    assert "Still needed: order_id" in proc.stdout
    assert "→ done: Small refund (when: state.amount <= 500)" in proc.stdout
    assert "(you may ask for this)" in proc.stdout


def test_describe_reads_the_state_from_a_file(tmp_path: Path) -> None:
    state = tmp_path / "state.yaml"
    state.write_text("customer_id: C-9\n")
    proc = run_cli(
        "describe", str(_write(tmp_path)), "--phase", "locate_order", "--state", str(state)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Customer C-9 wants" in proc.stdout


def test_describe_shows_missing_requires_after_a_programmatic_move(tmp_path: Path) -> None:
    proc = run_cli("describe", str(_write(tmp_path)), "--phase", "locate_order")
    assert "Blocked until required state is available: customer_id" in proc.stdout


def test_describe_usage_errors(tmp_path: Path) -> None:
    path = _write(tmp_path)
    bad_phase = run_cli("describe", str(path), "--phase", "locate_ordr")
    assert bad_phase.returncode == 2
    assert "did you mean 'locate_order'" in bad_phase.stderr
    bad_state = run_cli("describe", str(path), "--state", "[1, 2]")
    assert bad_state.returncode == 2 and "mapping" in bad_state.stderr
    broken = run_cli("describe", str(path), "--state", "{a: [")
    assert broken.returncode == 2
    assert run_cli("describe", str(tmp_path / "nope.yaml")).returncode == 2


def test_describe_works_on_every_bundled_workflow_and_phase() -> None:
    from phaseflow.spec.loader import compile_file

    for path in bundled_workflows():
        workflow = compile_file(str(path))
        for phase in workflow.phases:
            proc = run_cli("describe", str(path), "--phase", phase)
            assert proc.returncode == 0, proc.stderr
            # the default block and coding-agent's own template both name phase and goal
            assert f"{phase} — {workflow.phases[phase].goal}" in proc.stdout, proc.stdout
            assert "[template error" not in proc.stdout, (path.name, phase, proc.stdout)


def test_describe_uses_the_declared_defaults_as_state(tmp_path: Path) -> None:
    # amount defaults to 0: the instructions print it and the guard amount <= 500 holds
    proc = run_cli("describe", str(_write(tmp_path)), "--phase", "locate_order",
                   "--state", '{"customer_id": "C-1"}')
    assert proc.returncode == 0, proc.stderr
    assert "Customer C-1 wants a refund of 0." in proc.stdout
    assert "→ done: Small refund (ready)" in proc.stdout
    # a given state is added to the defaults, overriding them
    proc = run_cli("describe", str(_write(tmp_path)), "--phase", "locate_order",
                   "--state", '{"amount": 900}')
    assert "wants a refund of 900." in proc.stdout
    assert "Blocked until required state is available: customer_id" in proc.stdout
