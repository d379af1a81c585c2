"""The chat desk: the small project the AG-UI clients drive (the official
``@ag-ui/client`` from Node, and the example chat page in headless Chromium). Every
kind of AG-UI event in a few turns: a text reply, a reply with text and a tool call
that writes state, a tool that fails, a tool that waits, and a payment that needs
approval, after which the conversation goes on (rejected) or ends (approved).

``hold`` waits while the file ``$CHAT_HOLDS/<session id>`` exists: a test makes a
turn run as long as it needs (to send a second run meanwhile), with no sleep to tune.
"""

from __future__ import annotations

from pathlib import Path

WORKFLOW = """\
phaseflow: 1
name: chat-desk
initial: work
state:
  note: {type: string}
  paid: {type: boolean}
tools:
  note:
    description: Keep a note
    writes: [note]
  check:
    description: Check the note (this one always fails)
  hold:
    description: Wait while the session's hold file exists
  pay:
    description: Pay an amount
    approval: always
    writes: [paid]
phases:
  work:
    goal: Help the customer.
    tools: [note, check, hold, pay]
    transitions:
      - to: finished
        when: state.paid
        description: Paid
  finished:
    goal: Say goodbye.
    terminal: true
"""

TOOLS = '''\
import asyncio
import os
import time

from phaseflow.tools import ToolContext, tool


@tool
def note(text: str) -> dict:
    """Keep a note."""
    return {"note": text}


@tool
def check() -> str:
    """Check the note."""
    raise RuntimeError("the checker is out of order")


@tool
async def hold(ctx: ToolContext) -> str:
    """Wait while the hold file exists."""
    path = os.path.join(os.environ.get("CHAT_HOLDS", ""), ctx.session_id)
    deadline = time.monotonic() + 30
    while os.environ.get("CHAT_HOLDS") and os.path.exists(path) \\
            and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return "held"


@tool
def pay(amount: float) -> dict:
    """Pay."""
    return {"paid": True}


TOOLS = [note, check, hold, pay]
'''

#: the model's replies (the same for every session: a reply is chosen by the history)
SCRIPT = """\
- "Hello! What can I do for you?"
- text: "Let me write that down."
  calls:
    - note: {text: the kettle is broken}
- calls:
    - check: {}
- "Noted, though the checker failed."
- calls:
    - hold: {}
- calls:
    - pay: {amount: 5}
- "Understood."
- "Anything else?"
"""

#: what the customer says, turn by turn (the third turn ends waiting for approval; the
#: fifth finds the script without a reply left: a failed turn)
MESSAGES = ["Hello", "Please note: the kettle is broken", "Pay me 5, please", "Thanks",
            "One more thing"]


def write_chat(folder: Path) -> list[str]:
    """The chat desk project in ``folder``; the serve arguments that run it (cwd:
    folder, ``CHAT_HOLDS`` in the server's environment)."""
    (folder / "chat.yaml").write_text(WORKFLOW, encoding="utf-8")
    (folder / "chat_tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "chat.script.yaml").write_text(SCRIPT, encoding="utf-8")
    return [str(folder / "chat.yaml"), "--provider",
            f"scripted:{folder / 'chat.script.yaml'}", "--tools", "chat_tools:TOOLS",
            "--store", str(folder / "sessions.db")]
