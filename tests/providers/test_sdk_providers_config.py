"""The Anthropic, Responses and Gemini providers check their settings when built, as
OpenAIProvider does (one line naming the setting, never the key), and import their SDK
only when used."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phaseflow.errors import ConfigError
from phaseflow.providers import AnthropicProvider, GeminiProvider, OpenAIResponsesProvider

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-Zq81xT0pS3cr3tK3y"

#: (the provider, the SDK's key variable, the SDK's base URL variable or None)
PROVIDERS: dict[str, tuple[Callable[..., Any], str, str | None]] = {
    "anthropic": (AnthropicProvider, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "responses": (OpenAIResponsesProvider, "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "gemini": (GeminiProvider, "GEMINI_API_KEY", None),
}


@pytest.fixture(autouse=True)
def _no_sdk_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
                 "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _refusal(make: Callable[..., Any], **options: object) -> str:
    with pytest.raises(ConfigError) as raised:
        make("m", **options)
    message = str(raised.value)
    assert "\n" not in message and KEY not in message and "Zq81" not in message
    return message


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_a_key_with_a_line_break_is_refused_by_name(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, variable, _ = PROVIDERS[name]
    assert _refusal(make, api_key=KEY + "\n").startswith("api_key: ends with a line break")
    monkeypatch.setenv(variable, KEY + "\n")
    assert _refusal(make).startswith(f"{variable}: ends with a line break")


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_a_base_url_without_a_scheme_is_refused_by_name(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, _, variable = PROVIDERS[name]
    message = _refusal(make, api_key=KEY, base_url="127.0.0.1:8080")
    assert message.startswith("base_url: '127.0.0.1:8080' has no scheme")
    if variable is not None:
        monkeypatch.setenv(variable, "localhost:8080")
        assert _refusal(make, api_key=KEY).startswith(f"{variable}: 'localhost:8080' has no")


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_no_key_and_no_server_is_refused(name: str) -> None:
    make, variable, _ = PROVIDERS[name]
    assert "needs an API key" in _refusal(make)
    assert variable in _refusal(make)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_the_key_is_never_in_the_repr(name: str) -> None:
    make, _, _ = PROVIDERS[name]
    provider = make("m", api_key=KEY, base_url="http://user:pw@127.0.0.1:1/?k=secret")
    assert KEY not in repr(provider) and "secret" not in repr(provider)
    assert "pw" not in repr(provider)


def test_adapter_parameters_cannot_be_extras() -> None:
    with pytest.raises(ConfigError, match="'messages' is set by the adapter"):
        AnthropicProvider("m", api_key=KEY, messages=[])
    with pytest.raises(ConfigError, match="'input' is set by the adapter"):
        OpenAIResponsesProvider("m", api_key=KEY, input=[])
    with pytest.raises(ConfigError, match="'contents' is set by the adapter"):
        GeminiProvider("m", api_key=KEY, contents=[])


def test_no_sdk_is_imported_until_a_provider_is_used() -> None:
    probe = ("import phaseflow, phaseflow.providers\n"
             "from phaseflow.providers import AnthropicProvider, GeminiProvider, "
             "OpenAIResponsesProvider\n"
             "import sys\nprint('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                                text=True, timeout=60, check=True).stdout.split())
    assert "phaseflow.providers.anthropic" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("anthropic", "openai", "google")}
