"""Which model roles a workflow names, checked against the roles a host maps.

A workflow's ``model`` and each phase's ``model`` name a role (``fast``, ``strong``); the
host maps roles to providers (``Agent(providers=...)``, ``--provider ROLE=...``). The role
``default`` is always mapped (the agent's own provider). One rule, used by ``phaseflow
validate --models`` (PF430, positioned at the name) and by the agent when it is made (a
:class:`~phaseflow.errors.ConfigError` naming every role it lacks).
"""

from __future__ import annotations

from collections.abc import Collection

from phaseflow.expr.describe import did_you_mean
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.model import DEFAULT_ROLE, Workflow

__all__ = ["role_diagnostics", "unmapped_roles"]


def unmapped_roles(workflow: Workflow, mapped: Collection[str]) -> list[str]:
    """The roles ``workflow`` names that ``mapped`` (with ``default``) lacks, sorted."""
    known = {*mapped, DEFAULT_ROLE}
    return sorted(role for role in workflow.model_roles() if role not in known)


def role_diagnostics(workflow: Workflow, path: str, mapped: Collection[str]
                     ) -> list[Diagnostic]:
    """PF430 at each place that names a role ``mapped`` (with ``default``) lacks."""
    known = {*mapped, DEFAULT_ROLE}
    out: list[Diagnostic] = []
    places = [(workflow.model, workflow.model_position, "the workflow")]
    places += [(p.model, p.model_position, f"phase '{p.name}'")
               for p in workflow.phases.values()]
    for role, position, owner in places:
        if role is None or role in known:
            continue
        line, column = (position.line, position.column) if position else (1, 1)
        out.append(Diagnostic(
            path, line, column, "PF430",
            f"{owner} runs on model role '{role}', which the host does not map"
            f"{did_you_mean(role, known)} (mapped: {', '.join(sorted(known))})"))
    return out
