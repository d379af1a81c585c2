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
