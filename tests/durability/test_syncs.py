"""How many times a turn waits for the disk: the durable commits of
``docs/durability.md``, counted with ``strace`` on a real process writing a real SQLite
file (``synchronous=FULL``).

The workload is the benchmark's: one user message, a reply with two tool calls, a final
text; once without writes, once with the lookup writing the state. Four commits wait for
the disk: the prompt; the reply with its admissions; the results with the boundary (which
calls nothing outside the process here); the final reply. Taking
the session's lease is written without waiting, and letting it go is part of the last
commit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent('''\
    import sys
    from phaseflow import load_workflow_text
    from phaseflow.providers import ScriptedProvider
    from phaseflow.session import Agent
    from phaseflow.stores import SQLiteStore

    WORKFLOW = """\\
    phaseflow: 1
    name: order-desk
    initial: help
    state:
      closed: {type: boolean}
      customer_id: {type: string}
    tools:
      lookup_customer:
        description: Find a customer.
        writes: WRITES
        parameters: {type: object, properties: {email: {type: string}}, required: [email]}
      find_order:
        description: Find the order.
        parameters: {type: object, properties: {customer_id: {type: string}}}
    phases:
      help:
        goal: Say where the order is.
        tools: [lookup_customer, find_order]
        transitions:
          - to: done
            when: state.closed
      done:
        goal: Say goodbye.
    """

    def lookup_customer(email: str) -> dict:
        return {"customer_id": "C-1"}

    def find_order(customer_id: str) -> dict:
        return {"order_id": "O-9"}

    path, turns, writes = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    WORKFLOW = WORKFLOW.replace("WRITES", writes)
    script = []
    for _ in range(turns):
        script += [{"calls": [{"lookup_customer": {"email": "a@b"}},
                              {"find_order": {"customer_id": "C-1"}}]}, "Shipped."]
    agent = Agent(load_workflow_text(WORKFLOW), ScriptedProvider(script),
                  tools=[lookup_customer, find_order], store=SQLiteStore(path))
    session = agent.session_sync("s")
    for i in range(turns):
        assert session.reply_sync(f"where is it? {i}") == "Shipped.", i
''')

SYNC = re.compile(r"\b(fsync|fdatasync)\(\d+<([^>]*)>")


def _syncs(tmp_path: Path, turns: int, writes: str) -> int:
    trace = tmp_path / f"strace-{turns}-{len(writes)}.txt"
    db = tmp_path / f"sessions-{turns}-{len(writes)}.db"
    subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o",
                    str(trace), sys.executable, "-c", CHILD, str(db), str(turns), writes],
                   check=True, timeout=120)
    return sum(1 for line in trace.read_text().splitlines() if SYNC.search(line))


@pytest.mark.parametrize("writes", ["[]", "[customer_id]"])
def test_a_turn_with_a_tool_group_waits_for_the_disk_four_times(tmp_path: Path,
                                                                writes: str) -> None:
    # With a write too: the phase's boundaries call nothing outside the process, so the
    # boundary that applies it is committed with the group's results.
    if shutil.which("strace") is None:
        if os.environ.get("PHASEFLOW_REQUIRE_STRACE") == "1":
            pytest.fail("strace is required here (PHASEFLOW_REQUIRE_STRACE=1)")
        pytest.skip("strace is not installed (.ci/run installs it)")
    # The difference between 2 and 12 turns: opening the file, creating the schema and
    # the session's first turn are the same in both.
    few, more = _syncs(tmp_path, 2, writes), _syncs(tmp_path, 12, writes)
    assert (more - few) / 10 == 4
