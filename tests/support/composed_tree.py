"""The three-level tree of workflows the composed-session tests drive (top calls mid,
mid calls inner: an order desk), its tools and scripts: shared by those tests and by the
worker process one of them starts and kills."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOP = """\
phaseflow: 1
name: top
initial: chat
uses: {mid: mid.yaml}
state:
  go: {type: boolean}
phases:
  chat:
    goal: Chat until the user wants the order desk.
    collect: [go]
    transitions:
      - to: enter
        when: state.go
  enter:
    goal: The order desk.
    call: mid
    history: HISTORY
    transitions:
      - to: end
        when: returned == 'finished'
  end:
    goal: Done.
    terminal: true
"""

MID = """\
phaseflow: 1
name: mid
initial: desk
uses: {inner: inner.yaml}
phases:
  desk:
    goal: Run the order work.
    call: inner
    history: HISTORY
    transitions:
      - to: finished
        when: returned == 'closed'
  finished:
    goal: Finished.
    terminal: true
"""

INNER = """\
phaseflow: 1
name: inner
initial: work
state:
  closed: {type: boolean}
tools:
  orders.find: {description: Find an order., read_only: true}
  orders.cancel: {description: Cancel an order., approval: always}
  orders.note: {description: Leave a note on an order.}
phases:
  work:
    goal: Help with orders.
    tools: [orders.find, orders.cancel, orders.note]
    collect: [closed]
    transitions:
      - to: closed
        when: state.closed
  closed:
    goal: Closed.
    terminal: true
"""

DEEP = ("top", "enter", "mid", "desk", "inner", "work")


def tree(folder: Path, history: str = "full") -> str:
    for name, text in (("top", TOP), ("mid", MID), ("inner", INNER)):
        (folder / f"{name}.yaml").write_text(text.replace("HISTORY", history),
                                             encoding="utf-8")
    return str(folder / "top.yaml")


RUNS: list[str] = []
TOOLS = {"orders.find": lambda order_id: {"order_id": order_id, "status": "paid"},
         "orders.cancel": lambda order_id: RUNS.append(order_id) or "cancelled"}
ENTER = {"calls": [{"record": {"go": True}}]}


CRASH_SCRIPT: list[Any] = [ENTER, "In the order desk.",
                           {"calls": [{"orders.note": {"order_id": "O-9"}}]},
                           "The note is on O-9.",
                           {"calls": [{"record": {"closed": True}}]}, "Closed. Bye."]
