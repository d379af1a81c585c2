"""``--provider anthropic|openai|responses|gemini|scripted:FILE``: the commands build each
provider from its SDK's environment variables and ``--base-url``, refuse what cannot work
in one line (exit 2), and run a turn against each loopback server through the real SDK,
the provider's own parts going back on the next request of the turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phaseflow.cli.providers import CHOICES, check_provider, make_provider
from phaseflow.errors import ConfigError
from phaseflow.providers import AnthropicProvider, GeminiProvider, OpenAIResponsesProvider
from tests.support.phaseflow_cli import cli_env
from tests.support.run_cli import project, run
from tests.support.wire_scripts import (
    anthropic_reply,
    gemini_reply,
    responses_reply,
    signature,
)
from tests.support.wire_servers import WireServer

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")

VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
             "GEMINI_API_KEY", "GOOGLE_API_KEY")


@pytest.fixture(autouse=True)
def _no_sdk_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_every_choice_is_read_and_a_bad_one_named() -> None:
    assert CHOICES == "anthropic|openai|responses|gemini|scripted:FILE"
    for kind in ("anthropic", "openai", "responses", "gemini"):
        assert check_provider(kind) == (kind, "")
    assert check_provider("scripted:x.yaml") == ("scripted", "x.yaml")
    with pytest.raises(ConfigError, match=r"^--provider claude: expected 'anthropic'"):
        check_provider("claude")
    with pytest.raises(ConfigError, match=r"^--base-url: 'localhost:8080' has no scheme"):
        check_provider("anthropic", "localhost:8080")


@pytest.mark.parametrize(("kind", "variable", "made"), [
    ("anthropic", "ANTHROPIC_API_KEY", AnthropicProvider),
    ("responses", "OPENAI_API_KEY", OpenAIResponsesProvider),
    ("gemini", "GEMINI_API_KEY", GeminiProvider),
])
def test_each_provider_takes_its_sdks_key_variable(
        kind: str, variable: str, made: type, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=f"^--provider {kind} needs --model"):
        make_provider(kind)
    with pytest.raises(ConfigError, match=f"^--provider {kind} needs an API key: set "
                                          f"{variable}"):
        make_provider(kind, "m")
    monkeypatch.setenv(variable, "k-123456\n")
    with pytest.raises(ConfigError, match=f"^{variable}: ends with a line break"):
        make_provider(kind, "m")
    monkeypatch.setenv(variable, "k-123456")
    provider = make_provider(kind, "m", max_tokens=50)
    assert isinstance(provider, made) and "k-123456" not in repr(provider)
    local = make_provider(kind, "m", "http://127.0.0.1:9")
    assert "127.0.0.1:9" in repr(local)


def test_a_bad_provider_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--provider", "anthropic", "--model", "m", "-m", "x",
               env=cli_env())
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "phaseflow run: error: --provider anthropic needs an API key: set ANTHROPIC_API_KEY "
        "(a local server given by --base-url or ANTHROPIC_BASE_URL needs none)"]


SCRIPTS = {
    "anthropic": (anthropic_reply("", [("toolu_1", "pay", '{"amount": 5}')],
                                  thinking=[("Pay five.", "sig/anthropic+==")]),
                  anthropic_reply("Paid, thanks.")),
    "responses": (responses_reply("", [("call_1", "pay", '{"amount": 5}')],
                                  reasoning=[("rs_1", "Pay five.", "gAAAenc+/==")]),
                  responses_reply("Paid, thanks.")),
    "gemini": (gemini_reply("", [("pay", '{"amount": 5}')], signed="sig-gemini"),
               gemini_reply("Paid, thanks.")),
}


def _carried_back(kind: str, body: dict[str, object]) -> object:
    """What the second request sent back of the first reply's provider parts."""
    if kind == "anthropic":
        [assistant] = [m for m in body["messages"] if m["role"] == "assistant"]  # type: ignore[attr-defined]
        return assistant["content"][0]
    if kind == "responses":
        return next(i for i in body["input"] if i.get("type") == "reasoning")  # type: ignore[attr-defined]
    [model] = [c for c in body["contents"] if c["role"] == "model"]  # type: ignore[attr-defined]
    return model["parts"][0]["thoughtSignature"]


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_a_turn_runs_through_each_provider(tmp_path: Path, kind: str) -> None:
    with WireServer(kind) as server:  # type: ignore[arg-type]
        server.push(*SCRIPTS[kind])
        cwd = project(tmp_path)
        key = {"anthropic": "ANTHROPIC_API_KEY", "responses": "OPENAI_API_KEY",
               "gemini": "GEMINI_API_KEY"}[kind]
        proc = run(cwd, "desk.yaml", "--provider", kind, "--base-url", server.base_url,
                   "--model", "loop-model", "--tools", "desk_tools:TOOLS", "--approve", "all",
                   "--json", "-m", "Please pay 5", env=cli_env(**{key: "k-loopback"}))
        assert proc.returncode == 0, proc.stderr
        seen = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [e["name"] for e in seen if e["type"] == "tool_result"] == ["pay"]
        assert [e["reply"] for e in seen if e["type"] == "turn_finished"] == ["Paid, thanks."]
        assert len(server.requests) == 2
        back = _carried_back(kind, server.requests[1].body)
    if kind == "anthropic":
        assert back == {"type": "thinking", "thinking": "Pay five.",
                        "signature": "sig/anthropic+=="}
    elif kind == "responses":
        assert isinstance(back, dict) and back["encrypted_content"] == "gAAAenc+/=="
    else:
        import base64
        assert isinstance(back, str)
        assert base64.urlsafe_b64decode(back.replace("+", "-").replace("/", "_")) == \
            base64.b64decode(signature("sig-gemini"))
