"""OpenAIProvider's settings are checked when it is built, and its key never leaves it:
not in a ConfigError, not in a failure's message, not in its repr."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaseflow.errors import ConfigError
from phaseflow.providers import OpenAIProvider
from phaseflow.providers.protocol import ProviderFailure, ProviderReply
from phaseflow.providers.settings import header_problem, redact, shown_url, url_problem
from phaseflow.turn.messages import UserMessage
from tests.support.fake_openai_server import Fail, FakeOpenAIServer, text_reply
from tests.support.provider_streams import assemble, collect, request

KEY = "sk-proj-Zq81xT0pS3cr3tK3y"

BAD_KEYS = {
    "a trailing newline": (KEY + "\n", "ends with a line break"),
    "a trailing CRLF": (KEY + "\r\n", "ends with a line break"),
    "a leading space": (" " + KEY, "begins or ends with whitespace"),
    "a space inside": (KEY[:6] + " " + KEY[6:], "contains whitespace"),
    "a line break inside": (KEY[:6] + "\n" + KEY[6:], "contains a line break"),
    "a control character": (KEY[:6] + "\x1b" + KEY[6:], "contains a control character"),
    "a non-ASCII character": (KEY[:6] + "é" + KEY[6:], "contains a non-ASCII character"),
    "a curly quote": ("\u201c" + KEY + "\u201d", "contains a non-ASCII character"),
}


@pytest.fixture(autouse=True)
def _no_sdk_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def _refusal(**options: object) -> str:
    with pytest.raises(ConfigError) as raised:
        OpenAIProvider("m", **options)  # type: ignore[arg-type]
    return str(raised.value)


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_a_key_that_cannot_be_a_header_is_refused_by_name_without_its_text(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key, problem = BAD_KEYS[case]
    given = _refusal(api_key=key, base_url="http://127.0.0.1:1/v1")
    assert given.startswith(f"api_key: {problem}"), given
    monkeypatch.setenv("OPENAI_API_KEY", key)
    from_env = _refusal()
    assert from_env.startswith(f"OPENAI_API_KEY: {problem}"), from_env
    for message in (given, from_env):
        assert "\n" not in message  # one line
        assert KEY not in message and KEY[6:] not in message and "Zq81" not in message


@pytest.mark.parametrize("variable", ["OPENAI_ORG_ID", "OPENAI_PROJECT_ID"])
def test_the_sdks_other_header_variables_are_checked_too(
        variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, "org-123\n")
    assert _refusal(api_key=KEY).startswith(f"{variable}: ends with a line break")


@pytest.mark.parametrize(("url", "problem"), [
    ("127.0.0.1:8080/v1", "'127.0.0.1:8080/v1' has no scheme: write http://127.0.0.1:8080/v1"),
    ("localhost/v1", "has no scheme"),
    ("ftp://example.com/v1", "the scheme must be http or https, not 'ftp'"),
    ("http:///v1", "names no host"),
    ("http://example.com:99999/v1", "is not a URL"),
    ("http://exa mple.com/v1", "contains whitespace or a control character"),
    ("http://example.com/v1\n", "contains whitespace or a control character"),
])
def test_a_base_url_that_cannot_work_is_refused_by_name(
        url: str, problem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _refusal(base_url=url).startswith("base_url: ")
    assert problem in _refusal(base_url=url)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert _refusal().startswith("OPENAI_BASE_URL: ")


def test_credentials_in_a_base_url_are_never_shown() -> None:
    url = "http://ada:hunter2-pass@127.0.0.1:1/v1?api-key=q-secret-77"
    provider = OpenAIProvider("m", base_url=url)
    assert "hunter2" not in repr(provider) and "q-secret" not in repr(provider)
    assert provider.server == "http://127.0.0.1:1/v1"
    failure = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure)
    assert "hunter2" not in failure.message and "q-secret" not in failure.message
    assert "ada:" not in _refusal(base_url="ada:hunter2-pass@example.com/v1")
    assert "hunter2" not in _refusal(base_url="ada:hunter2-pass@example.com/v1")


def test_a_refused_connection_names_the_server_and_never_the_key() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = OpenAIProvider("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    failure = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure) and failure.retryable
    assert f"the model server at http://127.0.0.1:{port}/v1 failed" in failure.message
    assert KEY not in failure.message


def test_a_server_echoing_the_key_is_redacted(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(Fail(401, f"Incorrect API key provided: {KEY}. Get one at ...",
                          type="invalid_request_error"))
    provider = OpenAIProvider("m", base_url=fake_openai.base_url, api_key=KEY)
    failure = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure) and failure.status == 401
    assert failure.message == ("the server answered 401: Incorrect API key provided: ***. "
                               "Get one at ...")
    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_given_clients_key_is_redacted_too(fake_openai: FakeOpenAIServer) -> None:
    from openai import AsyncOpenAI

    fake_openai.push(Fail(403, f"key {KEY} is not allowed", type="permission_error"))
    client = AsyncOpenAI(api_key=KEY, base_url=fake_openai.base_url, max_retries=0)
    failure = assemble(collect(OpenAIProvider("m", client=client),
                               request(UserMessage("Hi"))))
    assert isinstance(failure, ProviderFailure) and KEY not in failure.message


# -- the output limit -----------------------------------------------------------------

@pytest.mark.parametrize("field", ["max_completion_tokens", "max_tokens"])
def test_max_tokens_reaches_the_wire_in_the_chosen_field(
        field: str, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("short"), text_reply("short"))
    provider = OpenAIProvider("m", base_url=fake_openai.base_url, max_tokens=64,
                              max_tokens_field=field)  # type: ignore[arg-type]
    reply = assemble(collect(provider, request(UserMessage("Hi"))))
    assert isinstance(reply, ProviderReply)
    body = fake_openai.requests[0].body
    assert body[field] == 64
    other = {"max_completion_tokens", "max_tokens"} - {field}
    assert not other & set(body)
    collect(provider, request(UserMessage("Hi"), max_output_tokens=7))  # the request wins
    assert fake_openai.requests[1].body[field] == 7


def test_without_max_tokens_no_limit_is_sent(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("hi"))
    collect(OpenAIProvider("m", base_url=fake_openai.base_url), request(UserMessage("Hi")))
    assert not {"max_completion_tokens", "max_tokens"} & set(fake_openai.requests[0].body)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "100"])
def test_max_tokens_must_be_a_positive_integer(value: object) -> None:
    assert _refusal(base_url="http://127.0.0.1:1/v1", max_tokens=value).startswith(
        "max_tokens: expected a positive integer")


@pytest.mark.parametrize("value", [0, -3, float("nan"), float("inf"), True, "10"])
def test_timeout_must_be_a_positive_number_of_seconds(value: object) -> None:
    assert _refusal(base_url="http://127.0.0.1:1/v1", timeout=value).startswith(
        "timeout: expected a positive number of seconds")


def test_the_limit_field_must_be_one_of_two() -> None:
    assert _refusal(base_url="http://127.0.0.1:1/v1", max_tokens_field="max").startswith(
        "max_tokens_field: ")


# -- properties ---------------------------------------------------------------------------

SECRETS = st.text(min_size=8, max_size=40).map(lambda s: "sk-" + s)


@given(SECRETS)
def test_any_key_is_accepted_or_refused_without_being_quoted(key: str) -> None:
    problem = header_problem(key)
    visible_ascii = all(0x21 <= ord(c) <= 0x7E for c in key)
    assert (problem is None) == visible_ascii
    if problem is not None:
        assert key not in problem and key.strip() not in problem


@given(SECRETS, st.text(max_size=30), st.text(max_size=30))
def test_redaction_leaves_no_form_of_the_key(key: str, before: str, after: str) -> None:
    for shown in (key, repr(key)[1:-1], repr(key.encode("utf-8", "replace"))[2:-1]):
        text = redact(before + shown + after, [key])
        assert key not in text and "***" in text


@given(st.text(max_size=60))
def test_url_problems_never_quote_a_password(url: str) -> None:
    secret_url = "http://u:pw-9f8e7d@" + url
    problem = url_problem(secret_url)
    assert problem is None or "pw-9f8e7d" not in problem
    assert "pw-9f8e7d" not in shown_url(secret_url)
