"""Which model a command talks to: the ``--provider``, ``--model`` and ``--base-url``
values of ``phaseflow run`` and ``phaseflow sessions recover``.

``openai`` is any OpenAI-compatible server (``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``
are read); ``scripted:FILE`` replays replies written in advance (a YAML list, see
:meth:`~phaseflow.providers.scripted.ScriptedProvider.from_file`), which is how a
workflow's conversations are tried and tested without a model. A recovering worker
replays the same file: a scripted provider answers by the number of assistant messages
in the history, so it continues a turn where the stopped worker left it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from phaseflow.errors import ConfigError, PhaseflowError, install_hint

if TYPE_CHECKING:
    from phaseflow.providers.protocol import Provider

#: the ``--provider`` values, for help texts
CHOICES = "openai|scripted:FILE"


def check_provider(spec: str, base_url: str | None = None) -> tuple[str, str]:
    """``("openai", "")`` or ``("scripted", FILE)``: the choice read before anything is
    loaded (bad options are reported first, a ``--base-url`` that cannot work
    included). :class:`ConfigError` otherwise."""
    if spec == "openai":
        if base_url is not None:
            from phaseflow.providers.settings import check_base_url

            check_base_url(base_url, "--base-url")
        return "openai", ""
    kind, sep, path = spec.partition(":")
    if kind == "scripted" and sep and path:
        if base_url:
            raise ConfigError("--base-url is for --provider openai")
        return "scripted", path
    raise ConfigError(f"--provider {spec}: expected 'openai' or 'scripted:FILE'")


def make_provider(spec: str, model: str | None = None, base_url: str | None = None, *,
                  max_tokens: int | None = None) -> Provider:
    """The provider ``spec`` names; every problem (no model, no key, a bad script file,
    the openai package missing, a ``--base-url`` that cannot work) is a
    :class:`ConfigError` to show as it is. ``max_tokens`` (``--max-tokens``) caps an
    OpenAI provider's replies; a script's replies are written in advance: ignored."""
    kind, script = check_provider(spec, base_url)
    if kind == "scripted":
        from phaseflow.providers.scripted import ScriptedProvider

        try:
            return ScriptedProvider.from_file(script)
        except PhaseflowError as exc:
            raise ConfigError(f"--provider scripted: {exc}") from None
    if not model:
        raise ConfigError("--provider openai needs --model (the model the server should run)")
    if not (base_url or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")):
        raise ConfigError("--provider openai needs an API key: set OPENAI_API_KEY (a local "
                          "server given by --base-url or OPENAI_BASE_URL needs none)")
    try:
        import openai  # noqa: F401 - only to know it is there
    except ImportError:
        raise ConfigError("--provider openai needs the openai package: "
                          + install_hint("openai")) from None
    from phaseflow.providers.openai import OpenAIProvider

    try:
        return OpenAIProvider(model, base_url=base_url, max_tokens=max_tokens)
    except PhaseflowError as exc:
        raise ConfigError(str(exc)) from None


async def close_provider(provider: object) -> None:
    """Close the provider's connections when it has any (``aclose``)."""
    closing = getattr(provider, "aclose", None)
    if callable(closing):
        await closing()
