"""The ``Provider`` protocol, its stream events, and the model adapters behind it.

The protocol (``Provider``, ``ProviderRequest``, ``ToolSpec``, the stream events,
``ProviderFailure``, ``ProviderReply``) is :mod:`phaseflow.providers.protocol`; a stream
is checked and assembled into a reply in :mod:`phaseflow.providers.assembly`.

``ScriptedProvider`` answers from replies written in advance (tests, demos,
``phaseflow test``); ``OpenAIProvider`` talks to any OpenAI-compatible server through the
official ``openai`` SDK. ``AnthropicProvider`` (the ``anthropic`` SDK's Messages API),
``OpenAIResponsesProvider`` (the ``openai`` SDK's Responses API) and ``GeminiProvider``
(``google-genai``) speak those APIs natively, each carrying back what its model needs
(:mod:`phaseflow.providers.carry`). Names load lazily: importing this package never
imports an SDK, so a host without an extra (or a CLI that only validates) pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaseflow.providers.anthropic import AnthropicProvider as AnthropicProvider
    from phaseflow.providers.gemini import GeminiProvider as GeminiProvider
    from phaseflow.providers.openai import OpenAIProvider as OpenAIProvider
    from phaseflow.providers.protocol import Provider as Provider
    from phaseflow.providers.protocol import ProviderEvent as ProviderEvent
    from phaseflow.providers.protocol import ProviderFailure as ProviderFailure
    from phaseflow.providers.protocol import ProviderReply as ProviderReply
    from phaseflow.providers.protocol import ProviderRequest as ProviderRequest
    from phaseflow.providers.protocol import ReasoningDelta as ReasoningDelta
    from phaseflow.providers.protocol import StreamEnd as StreamEnd
    from phaseflow.providers.protocol import TextDelta as TextDelta
    from phaseflow.providers.protocol import ToolCallDelta as ToolCallDelta
    from phaseflow.providers.protocol import ToolCallEnd as ToolCallEnd
    from phaseflow.providers.protocol import ToolCallStart as ToolCallStart
    from phaseflow.providers.protocol import ToolSpec as ToolSpec
    from phaseflow.providers.protocol import Usage as Usage
    from phaseflow.providers.responses import OpenAIResponsesProvider as OpenAIResponsesProvider
    from phaseflow.providers.scripted import ScriptedProvider as ScriptedProvider
    from phaseflow.providers.scripted import ScriptedReply as ScriptedReply
    from phaseflow.providers.scripted import ScriptIncomplete as ScriptIncomplete
    from phaseflow.providers.wire_names import WireNames as WireNames
    from phaseflow.turn.messages import Carried as Carried

_LAZY = {
    **dict.fromkeys(
        ("Provider", "ProviderEvent", "ProviderFailure", "ProviderReply", "ProviderRequest",
         "ReasoningDelta", "StreamEnd", "TextDelta", "ToolCallDelta", "ToolCallEnd",
         "ToolCallStart", "ToolSpec", "Usage"),
        "phaseflow.providers.protocol",
    ),
    "OpenAIProvider": "phaseflow.providers.openai",
    "AnthropicProvider": "phaseflow.providers.anthropic",
    "OpenAIResponsesProvider": "phaseflow.providers.responses",
    "GeminiProvider": "phaseflow.providers.gemini",
    "ScriptedProvider": "phaseflow.providers.scripted",
    "ScriptedReply": "phaseflow.providers.scripted",
    "ScriptIncomplete": "phaseflow.providers.scripted",
    "WireNames": "phaseflow.providers.wire_names",
    "Carried": "phaseflow.turn.messages",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'phaseflow.providers' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
