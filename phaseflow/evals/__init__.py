"""``phaseflow eval``: does a real model follow the workflow?

Eval files (``*.eval.yaml``, read by :mod:`~phaseflow.evals.evalfile`) give scenarios:
a simulated user (a persona and a goal, or a script for CI), the tools' stand-ins and
data, and criteria (:mod:`~phaseflow.evals.criteria`). The runner
(:mod:`~phaseflow.evals.runner`) plays each scenario's trials as real sessions; the pure
core scores them (:mod:`~phaseflow.evals.scoring`: criteria and pass^k), follows them
through the phases (:mod:`~phaseflow.evals.funnel`), builds the report
(:mod:`~phaseflow.evals.report`) and compares two reports
(:mod:`~phaseflow.evals.compare`); the reporters render it for the terminal and JUnit
(:mod:`~phaseflow.evals.text`) and as one HTML page (:mod:`~phaseflow.evals.html`).
See docs/evals.md.
"""
