"""A small caller workflow (``desk``) that calls a callee (``work``) where the tools are:
the tree the composed-edges tests drive through the API, ``phaseflow run``, ``phaseflow
serve`` and a conversation test file. The caller has a catalogue of its own, so that
whatever reads only the top workflow's catalogue (start-up checks, ``missing_tools``,
``offer_tools="workflow"``, ``serve --tools``) misses the callee's tools."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from phaseflow.tools import tool

DESK = """\
phaseflow: 1
name: desk
initial: chat
uses: {work: work.yaml}
state:
  go: {type: boolean}
  again: {type: boolean}
  outcome: {type: string}
tools:
  desk.hello: {description: Say hello., read_only: true}
phases:
  chat:
    goal: Chat until the user wants the work desk.
    tools: [desk.hello]
    collect: [go]
    transitions:
      - to: working
        when: state.go
  working:
    goal: The work desk.
    call: work
    history: HISTORY
    returns: {outcome: outcome}
    transitions:
      - to: after
        when: returned == 'closed'
  after:
    goal: Follow up on the work.
    tools: [desk.hello]
    collect: [again]
    transitions:
      - to: working
        when: state.again
"""

WORK = """\
phaseflow: 1
name: work
initial: work
state:
  closed: {type: boolean}
  outcome: {type: string}
tools:
  logs.dump: {description: The whole log., read_only: true}
  orders.refund: {description: Refund an order., approval: always}
  slow.block: {description: Block a while., timeout: 30}
phases:
  work:
    goal: Do the work.
    tools: [logs.dump, orders.refund, slow.block]
    collect: [closed]
    on_exit:
      - call: summarise
        transcript: 3
    transitions:
      - to: closed
        when: state.closed
  closed:
    goal: Closed.
    terminal: true
"""

#: where the conversation is inside the callee, and after it returned
INSIDE = ("desk", "working", "work", "work")
AFTER = ("desk", "after")

LOG = "".join(f"line {n:04d} " + "x" * 20 + "\n" for n in range(1, 301))
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(48))

#: the model's first reply: it records ``go``, the conversation enters the callee
ENTER: dict[str, Any] = {"calls": [{"record": {"go": True}}]}
CLOSE: dict[str, Any] = {"calls": [{"record": {"closed": True}}]}
#: in the caller after the call returned: the model records ``again``, the call again
AGAIN: dict[str, Any] = {"calls": [{"record": {"again": True}}]}


def tree(folder: Path, history: str = "full") -> Path:
    """The two files in ``folder``; the caller's path."""
    (folder / "desk.yaml").write_text(DESK.replace("HISTORY", history), encoding="utf-8")
    (folder / "work.yaml").write_text(WORK, encoding="utf-8")
    return folder / "desk.yaml"


class Desk:
    """The host's side: the tools (each records its runs), the hook (what it was given)
    and the events a sync tool's thread is held by."""

    def __init__(self) -> None:
        self.refunded: list[str] = []
        self.transcripts: list[tuple[dict[str, Any], ...]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.log: list[str] = []

    def tools(self) -> list[Any]:
        @tool(name="desk.hello")
        def hello() -> str:
            """Say hello."""
            return "hello"

        @tool(name="logs.dump")
        def dump() -> str:
            """The whole log."""
            return LOG

        @tool(name="orders.refund")
        def refund(order_id: str) -> str:
            """Refund an order."""
            self.refunded.append(order_id)
            return f"refunded {order_id}"

        @tool(name="slow.block")
        def block() -> str:
            """Block until released (its timeout, from the callee's catalogue, runs it
            in a thread of its own)."""
            self.started.set()
            self.release.wait(30)
            self.log.append("effect")
            return "unblocked"

        return [hello, dump, refund, block]

    def hooks(self) -> dict[str, Any]:
        def summarise(ctx: Any) -> dict[str, Any]:
            self.transcripts.append(tuple(ctx.transcript))
            said = [str(m["content"]) for m in ctx.transcript if m["role"] == "user"]
            return {"outcome": " / ".join(said)}

        return {"summarise": summarise}


#: the same tools and hook as a module a ``phaseflow run``/``serve`` command imports
TOOLS_MODULE = '''\
from phaseflow.tools import tool

LOG = "".join(f"line {n:04d} " + "x" * 20 + "\\n" for n in range(1, 301))


@tool(name="desk.hello")
def hello() -> str:
    """Say hello."""
    return "hello"


@tool(name="logs.dump")
def dump() -> str:
    """The whole log."""
    return LOG


@tool(name="orders.refund")
def refund(order_id: str) -> str:
    """Refund an order."""
    return "refunded " + order_id


@tool(name="slow.block")
def block() -> str:
    """Block a while."""
    return "unblocked"


def summarise(ctx):
    said = [str(m["content"]) for m in ctx.transcript if m["role"] == "user"]
    return {"outcome": " / ".join(said)}


TOOLS = [hello, dump, refund, block]
HOOKS = {"summarise": summarise}
'''


def project(folder: Path, history: str = "full") -> Path:
    """The tree and ``desk_tools.py`` (``desk_tools:TOOLS``, ``desk_tools:HOOKS``)."""
    tree(folder, history)
    (folder / "desk_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    (folder / "photo.png").write_bytes(PNG)
    return folder / "desk.yaml"
