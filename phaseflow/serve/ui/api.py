"""The API route the web view's workflow page reads: ``GET
/v1/workflows/{name}/describe``, what the model is told in a phase for a state (the
JSON form of ``phaseflow describe``). Under ``/v1/``, so it wants a token like the rest
of the API."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from phaseflow.expr.describe import did_you_mean_or_list
from phaseflow.serve.problems import Problem
from phaseflow.serve.ui.describe import called_workflow, describe_json


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


async def describe(request: Request) -> Response:
    """``GET /v1/workflows/{name}/describe?phase=P&state=JSON``: what the model is told
    in phase ``P`` for the declared defaults plus ``state`` (a JSON object).
    ``?path=verify/ask_email`` names a phase inside a called workflow instead."""
    hub = request.app.state.hub
    name = request.path_params["name"]
    served = hub.served.get(name)
    if served is None:
        raise Problem(404, "workflow_not_found",
                      f"no workflow {name!r} here (served: {', '.join(hub.served)})",
                      workflow=name)
    workflow = served.agent.workflow
    phase = request.query_params.get("phase") or workflow.initial
    walk = request.query_params.get("path")
    if walk:
        # a phase inside a called workflow: the phases from the top, "/" between them
        found = called_workflow(workflow, walk.split("/"))
        if isinstance(found, str):
            raise Problem(404, "phase_not_found", found, field="path")
        workflow, phase = found
    if phase not in workflow.phases:
        hint = did_you_mean_or_list(phase, workflow.phases, "phases")
        raise Problem(404, "phase_not_found", f"no phase {phase!r}{hint}", field="phase")
    raw = request.query_params.get("state") or "{}"
    try:
        extra = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise Problem(400, "invalid_parameter", "?state= must be a JSON object, such as "
                      '{"amount": 120}', field="state") from None
    if not isinstance(extra, dict):
        raise Problem(400, "invalid_parameter", "?state= must be a JSON object (keys to "
                      'values), such as {"amount": 120}', field="state")
    # a default or an on_enter value YAML read as a date is shown as its text
    body = json.loads(json.dumps(describe_json(workflow, phase, extra), default=str))
    return JSONResponse(body)
