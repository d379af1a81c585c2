"""Model adapters behind the session's ``Provider`` protocol.

``ScriptedProvider`` answers from replies written in advance (tests, demos,
``phaseflow test``); ``OpenAIProvider`` talks to any OpenAI-compatible server through the
official ``openai`` SDK. Names load lazily: importing this package never imports the SDK,
so a host without the ``openai`` extra (or a CLI that only validates) pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaseflow.providers.openai import OpenAIProvider as OpenAIProvider
    from phaseflow.providers.scripted import ScriptedProvider as ScriptedProvider
    from phaseflow.providers.scripted import ScriptedReply as ScriptedReply
    from phaseflow.providers.scripted import ScriptIncomplete as ScriptIncomplete
    from phaseflow.providers.wire_names import WireNames as WireNames

_LAZY = {
    "OpenAIProvider": "phaseflow.providers.openai",
    "ScriptedProvider": "phaseflow.providers.scripted",
    "ScriptedReply": "phaseflow.providers.scripted",
    "ScriptIncomplete": "phaseflow.providers.scripted",
    "WireNames": "phaseflow.providers.wire_names",
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
