"""The graph ``langgraph dev`` serves for ``bench_serve_langgraph.py``: the session
benchmark's LangGraph variant, unchanged (``bench_session.langgraph_graph``: a scripted
chat model node, async, and ``ToolNode`` with the two tools, the edge
``tools_condition``), compiled without a checkpointer because the server supplies its own.

The server imports this file by path, so the benchmarks folder is put on ``sys.path``
here. With ``BENCH_LANGGRAPH_WAKE=1`` in the server's environment the run queue's poll is
patched first (``wake.py``), for the "poll patched" measurement; without it the server
runs as shipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent), str(HERE)]

import bench_session  # noqa: E402 - the session benchmark's graph

if os.environ.get("BENCH_LANGGRAPH_WAKE") == "1":
    import wake

    wake.apply()

graph = bench_session.langgraph_graph(None, use_async=True)
