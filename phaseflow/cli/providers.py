"""Which model a command talks to: the ``--provider``, ``--model`` and ``--base-url``
values of ``phaseflow run``, ``phaseflow serve`` and ``phaseflow sessions recover``.

``openai`` is any OpenAI-compatible server's Chat Completions; ``responses`` the OpenAI
Responses API; ``anthropic`` the Anthropic Messages API; ``gemini`` the Gemini API. Each
reads its SDK's standard environment variables (:data:`SERVERS`: the key, and the base
URL where the SDK has one), and ``--base-url`` names another server. ``scripted:FILE``
replays replies written in advance (a YAML list, see
:meth:`~phaseflow.providers.scripted.ScriptedProvider.from_file`), which is how a
workflow's conversations are tried and tested without a model. A recovering worker
replays the same file: a scripted provider answers by the number of assistant messages
in the history, so it continues a turn where the stopped worker left it.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, NamedTuple

from phaseflow.errors import ConfigError, PhaseflowError, install_hint

if TYPE_CHECKING:
    from phaseflow.providers.protocol import Provider


class Server(NamedTuple):
    """A model server's ``--provider`` kind: its SDK, the extra that installs it, the
    environment variables of its key (any one) and of its base URL, and the provider."""

    module: str
    extra: str
    keys: tuple[str, ...]
    base_variable: str | None
    provider: str


SERVERS: dict[str, Server] = {
    "openai": Server("openai", "openai", ("OPENAI_API_KEY",), "OPENAI_BASE_URL",
                     "phaseflow.providers.openai:OpenAIProvider"),
    "responses": Server("openai", "openai", ("OPENAI_API_KEY",), "OPENAI_BASE_URL",
                        "phaseflow.providers.responses:OpenAIResponsesProvider"),
    "anthropic": Server("anthropic", "anthropic", ("ANTHROPIC_API_KEY",),
                        "ANTHROPIC_BASE_URL", "phaseflow.providers.anthropic:AnthropicProvider"),
    "gemini": Server("google.genai", "gemini", ("GEMINI_API_KEY", "GOOGLE_API_KEY"), None,
                     "phaseflow.providers.gemini:GeminiProvider"),
}

#: the ``--provider`` values, for help texts
CHOICES = "anthropic|openai|responses|gemini|scripted:FILE"

#: the ``--provider`` help of every command
HELP = ("the model: 'openai' (default: any OpenAI-compatible server, OPENAI_API_KEY and "
        "OPENAI_BASE_URL are read), 'responses' (the OpenAI Responses API), 'anthropic' "
        "(ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL), 'gemini' (GEMINI_API_KEY) or "
        "'scripted:FILE' (replies written in advance)")


def check_provider(spec: str, base_url: str | None = None) -> tuple[str, str]:
    """``(KIND, "")`` for a model server, or ``("scripted", FILE)``: the choice read
    before anything is loaded (bad options are reported first, a ``--base-url`` that
    cannot work included). :class:`ConfigError` otherwise."""
    if spec in SERVERS:
        if base_url is not None:
            from phaseflow.providers.settings import check_base_url

            check_base_url(base_url, "--base-url")
        return spec, ""
    kind, sep, path = spec.partition(":")
    if kind == "scripted" and sep and path:
        if base_url:
            raise ConfigError("--base-url is for --provider openai, responses, anthropic "
                              "or gemini")
        return "scripted", path
    raise ConfigError(f"--provider {spec}: expected 'anthropic', 'openai', 'responses', "
                      "'gemini' or 'scripted:FILE'")


def make_provider(spec: str, model: str | None = None, base_url: str | None = None, *,
                  max_tokens: int | None = None) -> Provider:
    """The provider ``spec`` names; every problem (no model, no key, a bad script file,
    the SDK missing, a ``--base-url`` that cannot work) is a :class:`ConfigError` to show
    as it is. ``max_tokens`` (``--max-tokens``) caps a model server's replies; a script's
    replies are written in advance: ignored."""
    kind, script = check_provider(spec, base_url)
    if kind == "scripted":
        from phaseflow.providers.scripted import ScriptedProvider

        try:
            return ScriptedProvider.from_file(script)
        except PhaseflowError as exc:
            raise ConfigError(f"--provider scripted: {exc}") from None
    server = SERVERS[kind]
    if not model:
        raise ConfigError(f"--provider {kind} needs --model (the model the server should run)")
    base_set = bool(base_url or (server.base_variable and os.environ.get(server.base_variable)))
    if not (base_set or any(os.environ.get(v) for v in server.keys)):
        local = (f"--base-url or {server.base_variable}" if server.base_variable
                 else "--base-url")
        raise ConfigError(f"--provider {kind} needs an API key: set {server.keys[0]} (a "
                          f"local server given by {local} needs none)")
    import importlib

    try:  # imported, not only found: a package that is there but cannot load is missing
        importlib.import_module(server.module)
    except ImportError:
        raise ConfigError(f"--provider {kind} needs the {server.module} package: "
                          + install_hint(server.extra)) from None
    module, _, name = server.provider.partition(":")
    make = getattr(importlib.import_module(module), name)
    try:
        provider: Provider = make(model, base_url=base_url, max_tokens=max_tokens)
    except PhaseflowError as exc:
        raise ConfigError(str(exc)) from None
    return provider


async def close_provider(provider: object) -> None:
    """Close the provider's connections when it has any (``aclose``)."""
    closing = getattr(provider, "aclose", None)
    if callable(closing):
        await closing()


#: a ``--provider ROLE=SPEC`` value (a role name cannot hold ':', so ``scripted:FILE``
#: with a '=' in its path is never one)
_ROLE_VALUE = re.compile(r"([a-z][a-z0-9_-]*)=(.+)", re.DOTALL)

#: the help of a repeated ``--provider`` naming a role
ROLE_HELP = (" Repeat as ROLE=KIND:MODEL (or ROLE=scripted:FILE) to map a model role the "
             "workflow names ('model: fast'): --provider fast=anthropic:MODEL; a role's "
             "server comes from its SDK's variables (--base-url is the default role's)")


def split_providers(values: list[str] | str | None) -> tuple[str, dict[str, str]]:
    """The repeated ``--provider`` values as ``(DEFAULT, {ROLE: SPEC})``: a plain value
    (or ``default=...``) is the default role's, ``openai`` when none is given. Each is
    checked as :func:`check_provider` checks (:class:`ConfigError`)."""
    given = [values] if isinstance(values, str) else list(values or [])
    default: str | None = None
    roles: dict[str, str] = {}
    for value in given:
        match = _ROLE_VALUE.fullmatch(value)
        role, spec = (match.group(1), match.group(2)) if match else ("default", value)
        if role == "default":
            default = spec  # (a later plain value wins, as for any repeated option)
            continue
        if role in roles:
            raise ConfigError(f"--provider {value}: role {role!r} is given twice")
        kind, _, rest = spec.partition(":")
        if kind in SERVERS and not rest:
            raise ConfigError(f"--provider {value}: expected {role}={kind}:MODEL (the "
                              "model the role runs on)")
        check_provider(spec if kind == "scripted" else kind)
        roles[role] = spec
    return default or "openai", roles


def make_role_providers(roles: dict[str, str], *, max_tokens: int | None = None
                        ) -> dict[str, Provider]:
    """The providers of ``--provider ROLE=SPEC`` values (from :func:`split_providers`),
    each made as :func:`make_provider` makes one, its server from its SDK's variables."""
    out: dict[str, Provider] = {}
    for role, spec in roles.items():
        kind, _, rest = spec.partition(":")
        try:
            if kind == "scripted":
                out[role] = make_provider(spec)
            else:
                out[role] = make_provider(kind, rest, max_tokens=max_tokens)
        except ConfigError as exc:
            raise ConfigError(f"--provider {role}={spec}: {exc}") from None
    return out
