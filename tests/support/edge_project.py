"""The edge desk: the small project where a turn meets its edges over AG-UI and in the
web view: a sync tool whose thread a cancel waits for (``slow``: it runs while the file
``$EDGE_HOLDS/<session id>`` exists, and marks that it started in
``$EDGE_HOLDS/<session id>.started``), then a reply cut at the model's output limit and
continued."""

from __future__ import annotations

from pathlib import Path

WORKFLOW = """\
phaseflow: 1
name: edge-desk
initial: work
phases:
  work:
    goal: Help the customer.
    tools: [slow]
"""

TOOLS = '''\
import os
import time

from phaseflow.tools import ToolContext, tool


@tool(timeout=30)
def slow(ctx: ToolContext) -> str:
    """Work for a while (a sync tool: a thread of its own)."""
    holds = os.environ["EDGE_HOLDS"]
    path = os.path.join(holds, ctx.session_id)
    with open(path + ".started", "w") as marker:
        marker.write("started")
    deadline = time.monotonic() + 30
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return "worked"


TOOLS = [slow]
'''

#: the first turn calls ``slow`` (and is cancelled while it runs); the second turn's
#: reply is cut at the output limit and continued
SCRIPT = """\
- calls:
    - slow: {}
- text: "Once upon a "
  stop: max_tokens
- "time, the end."
"""

#: the stitched reply of the second turn
CONTINUED = "Once upon a time, the end."


def write_edges(folder: Path) -> list[str]:
    """The edge desk project in ``folder``; the serve arguments that run it (cwd:
    folder, ``EDGE_HOLDS`` in the server's environment)."""
    (folder / "edges.yaml").write_text(WORKFLOW, encoding="utf-8")
    (folder / "edge_tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "edges.script.yaml").write_text(SCRIPT, encoding="utf-8")
    return [str(folder / "edges.yaml"), "--provider",
            f"scripted:{folder / 'edges.script.yaml'}", "--tools", "edge_tools:TOOLS",
            "--store", str(folder / "sessions.db")]
