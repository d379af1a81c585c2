"""What a provider needs back from its own replies, and the one rule for sending it.

A reply's provider-specific parts (Anthropic's thinking blocks with their signatures, the
Responses API's reasoning items, Gemini's thought signatures) travel as one
:class:`~phaseflow.turn.messages.Carried` value: the wire's name and JSON text holding a
list of ``[position, part]`` pairs, the part exactly as the server sent it and the
position where it sat among the parts of the reply as the adapter rebuilds it. The
session stores it with the assistant message (and so in every store, through a crash and
a resume); on the next request the adapter of the same wire puts each part back where it
was (:func:`restored`), and any other adapter sends the message without it: its text and
calls are the message's own, so nothing visible is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from phaseflow.turn.messages import AssistantMessage, Carried

__all__ = ["carried", "carried_parts", "restored"]


def carried(provider: str, parts: Sequence[tuple[int, Any]]) -> Carried | None:
    """The :class:`Carried` value of ``parts`` (``None`` when there are none)."""
    if not parts:
        return None
    return Carried(provider, json.dumps([[p, part] for p, part in parts],
                                        ensure_ascii=False, separators=(",", ":")))


def carried_parts(message: AssistantMessage, provider: str) -> list[tuple[int, Any]]:
    """The parts ``message`` carries for ``provider``: none when it carries them for
    another wire (or its data is not the list this module writes)."""
    held = message.carried
    if held is None or held.provider != provider:
        return []
    try:
        data = json.loads(held.data)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [(p[0], p[1]) for p in data
            if isinstance(p, list) and len(p) == 2 and type(p[0]) is int and p[0] >= 0]


def restored(rebuilt: list[Any], parts: Sequence[tuple[int, Any]],
             replaces: Callable[[Any], bool] | None = None) -> list[Any]:
    """``rebuilt`` (the parts made from the message's text and calls, in order) with each
    carried part put back at its position in the reply: inserted there, or, when
    ``replaces(part)`` (a call part that holds its own signature), standing in for the
    rebuilt part that would be there."""
    if not parts:
        return rebuilt
    out: list[Any] = []
    rest = iter(rebuilt)
    for position, part in sorted(parts, key=lambda p: p[0]):
        while len(out) < position:
            following = next(rest, _END)
            if following is _END:
                break
            out.append(following)
        if replaces is not None and replaces(part):
            next(rest, None)
        out.append(part)
    out.extend(rest)
    return out


_END = object()
