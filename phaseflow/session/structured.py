"""A phase's structured reply: is the model's final reply the JSON its ``reply`` schema
asks for, and which state keys does it set?

Pure: the session core asks :func:`check_reply` about the text of a reply that ends the
turn in a phase with a ``reply`` (docs/format.md, "Structured replies"). The schema is
compiled once per shape (:func:`phaseflow.tools.arguments.compile_validator`, the shared
JSON-Schema compiler), and a miss is one short sentence the model reads and corrects.
"""

from __future__ import annotations

import json
from typing import Any

from phaseflow.spec.model import ReplyShape
from phaseflow.tools.arguments import ArgumentValidator, compile_validator

__all__ = ["RETRY_TEXT", "check_reply", "recorded"]

#: what the model is told when its reply does not match (``{problem}`` filled in)
RETRY_TEXT = ("Your reply must be one JSON object matching the required schema, and it is "
              "not: {problem}. Reply again with only the corrected JSON object.")

_VALIDATORS: dict[int, tuple[ReplyShape, ArgumentValidator]] = {}


def _validator(shape: ReplyShape) -> ArgumentValidator:
    held = _VALIDATORS.get(id(shape))
    if held is None or held[0] is not shape:
        held = (shape, compile_validator(shape.schema_json()))
        _VALIDATORS[id(shape)] = held
    return held[1]


def _json_text(text: str) -> str:
    """The reply's text without one Markdown code fence around it (```json ... ```)."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        newline = body.find("\n")
        if newline >= 0 and not body[:newline].strip().startswith(("{", "[")):
            body = body[newline + 1:]
    return body.strip()


def check_reply(text: str, shape: ReplyShape) -> tuple[dict[str, Any] | None, str]:
    """``(value, "")`` when ``text`` is a JSON object matching ``shape.schema``; otherwise
    ``(None, PROBLEM)``, a sentence for the model."""
    try:
        value = json.loads(_json_text(text))
    except (ValueError, RecursionError):
        return None, "the reply is not JSON"
    if not isinstance(value, dict):
        return None, "the reply is not a JSON object"
    problem = _validator(shape)(value)
    if problem is not None:
        return None, problem.replace("the arguments", "the reply").replace(
            "required argument", "required property")
    return value, ""


def recorded(value: dict[str, Any], shape: ReplyShape) -> tuple[tuple[str, Any], ...]:
    """The state writes of a matching reply: each ``record`` key set to its property's
    value, when the reply has that property (in ``record``'s order)."""
    return tuple((key, value[prop]) for key, prop in shape.record.items() if prop in value)
