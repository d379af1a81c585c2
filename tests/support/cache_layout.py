"""What a request recorded by a loopback wire server (``tests/support/wire_servers.py``)
leaves to a prompt cache, and a short conversation that records some.

:func:`cache_order` lays a body out as its API's cache reads it: the stable prefix (the
system text and the tool definitions, in the API's order), then every block of every
turn, each as the JSON the SDK sent (``cache_control`` markers left out: they say where
a cache entry ends, they are not content). A request's prefix up to its trailing block
is then ``cache_order(body)[:-1]``.
"""

from __future__ import annotations

import json
from typing import Any

from phaseflow.api import load_workflow_text
from phaseflow.providers.protocol import Provider
from phaseflow.session import Agent
from phaseflow.stores import MemoryStore
from tests.support.wire_servers import WireServer

__all__ = ["WORKFLOW", "cache_order", "converse"]

#: one phase, a tool that writes no state: the block is the same in every request
WORKFLOW = """\
phaseflow: 1
name: desk
initial: help
tools:
  lookup:
    description: Find the user's account by email address.
    parameters: {type: object, properties: {email: {type: string}}, required: [email]}
phases:
  help:
    goal: Help the user.
    instructions: Look the user up with lookup before you answer.
    tools: [lookup]
"""

SYSTEM = "Be brief."


def lookup(email: str) -> dict[str, str]:
    return {"account": "A-1"}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _text(value: Any) -> str:
    return json.dumps(_plain(value), ensure_ascii=False, sort_keys=False)


def cache_order(api: str, body: dict[str, Any]) -> list[str]:
    """``body`` as its API's prompt cache reads it, one JSON text an element."""
    if api == "anthropic":  # tools, system, messages
        head = [*body.get("tools", []), *body.get("system", [])]
        turns = [(m["role"], m["content"]) for m in body["messages"]]
    elif api == "responses":  # instructions, tools, input
        head = [body.get("instructions"), *body.get("tools", [])]
        return [_text(x) for x in head] + [_text(item) for item in body["input"]]
    else:  # gemini: system instruction, tools, contents
        head = [body.get("systemInstruction"), *body.get("tools", [])]
        turns = [(c["role"], c["parts"]) for c in body["contents"]]
    return [_text(x) for x in head] + [f"{role}: {_text(block)}"
                                        for role, blocks in turns for block in blocks]


async def converse(provider: Provider, server: WireServer, *replies: Any,
                   **options: Any) -> list[str]:
    """A session on ``WORKFLOW`` through ``provider``: "hello" (answered by the first
    replies: a ``lookup`` call, then text) and "thanks"; the provider's client closed in
    the same event loop. Returns the blocks the session sent (``ProviderRequest.context``
    of each request, in order)."""
    sent: list[str] = []

    class Recording:
        def stream(self, request: Any) -> Any:
            sent.append(request.context)
            return provider.stream(request)

    server.push(*replies)
    agent = Agent(load_workflow_text(WORKFLOW), Recording(), tools=[lookup],
                  store=MemoryStore(), system=SYSTEM, **options)
    session = await agent.session("s")
    try:
        for text in ("hello", "thanks"):
            await session.reply(text)
    finally:
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()
    return sent
