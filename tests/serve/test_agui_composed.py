"""AG-UI's step events inside composed workflows (the bundled desks), read as the
official client reads them (``ag-ui-protocol``'s models): a triage that hands off to the
billing desk, which calls the identity check, names the whole path in its step."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ag_ui.core import (
    Event,
    RunAgentInput,
    RunFinishedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    UserMessage,
)
from pydantic import TypeAdapter

from tests.support.phaseflow_cli import ROOT
from tests.support.serve_server import Server, frames, serving

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)
DESKS = ROOT / "workflows" / "desks"
SCRIPT = """\
- calls:
    - record: {email: ada@example.com, topic: billing}
- "Let me hand you to billing and look you up."
- "Which invoice?"
"""


@pytest.fixture(scope="module")
def desks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder: Path = tmp_path_factory.mktemp("agui-desks")
    (folder / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    with serving([str(DESKS / "triage.yaml"), str(DESKS / "billing-desk.yaml"),
                  "--provider", f"scripted:{folder / 'script.yaml'}",
                  "--store", str(folder / "s.db")], folder / "server.log") as server:
        yield server


def _run(client: httpx.Client, thread: str, text: str) -> list[Event]:
    run = RunAgentInput(thread_id=thread, run_id=f"run-{uuid.uuid4().hex[:6]}", state={},
                        messages=[UserMessage(id=uuid.uuid4().hex, content=text)],
                        tools=[], context=[], forwarded_props={})
    with client.stream("POST", "/v1/ag-ui/triage",
                       json=run.model_dump(by_alias=True, exclude_none=True),
                       headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200, response.read()
        return [EVENTS.validate_python(f.data) for f in frames(response.iter_lines())
                if f.data is not None]


def test_steps_name_the_path_across_a_hand_off_and_a_call(desks: Server) -> None:
    thread = uuid.uuid4().hex
    with httpx.Client(base_url=desks.base, timeout=60) as client:
        first = _run(client, thread, "Hi, a question about my invoice; ada@example.com")
        second = _run(client, thread, "It is invoice I-3")
    started = [e.step_name for e in first if isinstance(e, StepStartedEvent)]
    finished = [e.step_name for e in first if isinstance(e, StepFinishedEvent)]
    # the top workflow's phase by its name; inside the callee, the whole path
    assert started == ["listen", "billing-desk › verify › identity-check › find"], started
    assert finished == started
    end = first[-1]
    assert isinstance(end, RunFinishedEvent)
    assert end.result["phase"] == "find"
    assert end.result["path"] == ["billing-desk", "verify", "identity-check", "find"]
    # the next run starts where the last one ended: inside the call
    again = [e.step_name for e in second if isinstance(e, StepStartedEvent)]
    assert again == ["billing-desk › verify › identity-check › find"], again
