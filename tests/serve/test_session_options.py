"""The session options `serve` passes on to its agents: plan mode for new sessions and
history compaction - seen over HTTP, on a real server process."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.serve_server import REFUND_DESK, start


def test_plan_mode_and_compaction_reach_the_served_sessions(tmp_path: Path) -> None:
    server = start([*REFUND_DESK, "--store", str(tmp_path / "s.db"), "--mode", "plan",
                    "--max-history-tokens", "40"], tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            created = client.post("/v1/sessions", json={"workflow": "refund-desk"})
            assert created.status_code == 201, created.text
            sid = created.json()["id"]
            url = f"/v1/sessions/{sid}/messages"
            for text in ("Hi, I'm ada@example.com", "Rex", "Order O-9; it arrived broken"):
                answer = client.post(url, json={"text": text})
                assert answer.status_code == 200, answer.text
            events = client.get(f"/v1/sessions/{sid}/events",
                                params={"follow": "false"}).json()
            results = [e["status"] for e in events if e["type"] == "tool_result"]
            assert results[:2] == ["ok", "planned"]  # a lookup runs; verification is planned
            assert any(e["type"] == "history_compacted" for e in events)
    finally:
        server.stop()


def test_a_served_turn_continues_the_caller_s_trace(tmp_path: Path) -> None:
    """With the OTEL_* variables set, the turn a request starts is a child of the span
    its ``traceparent`` header names (the real OTLP/HTTP exporter, a loopback receiver)."""
    from tests.support.otlp_receiver import otlp_receiver
    from tests.support.phaseflow_cli import cli_env

    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with otlp_receiver() as (endpoint, received):
        env = cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="100")
        server = start([*REFUND_DESK, "--store", "memory"], tmp_path / "server.log", env=env)
        try:
            with httpx.Client(base_url=server.base, timeout=30) as client:
                sid = client.post("/v1/sessions", json={"workflow": "refund-desk"}).json()["id"]
                answer = client.post(f"/v1/sessions/{sid}/messages",
                                     json={"text": "Hi, I'm ada@example.com"},
                                     headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
                assert answer.status_code == 200, answer.text
            spans = received.wait_for(lambda ss: any(
                s.name.startswith("invoke_agent") for s in ss))
        finally:
            server.stop()
    turn = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert (turn.trace_id, turn.parent_span_id) == (trace_id, parent_id)
    assert turn.attributes.get("gen_ai.conversation.id") == sid
