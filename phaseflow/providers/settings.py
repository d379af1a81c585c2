"""A model server's settings, checked where they are given, and its secrets kept out of
every message.

A setting that cannot work (a key that cannot be an HTTP header, a base URL without a
scheme) is a :class:`~phaseflow.errors.ConfigError` when the provider is built: one line
naming the setting (``OPENAI_API_KEY: ...``, ``--base-url: ...``), never its secret
value. Left to the first request it would be a "connection failure", retried for
seconds, with the header's text (the key) in every retry's message.

A key is refused, not repaired: one that ends with a line break (as an env file, or a
file read whole, can leave it) is named with the problem, so the fix is made where the
key is kept. (The ``openai`` SDK sends a key as it is given, too.)

:func:`redact` is the one function that takes secrets out of text leaving a provider
(its failures' messages), and :func:`shown_url` is how a server's URL is named in them:
without a user, a password, a query or a fragment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from urllib.parse import urlsplit

from phaseflow.errors import ConfigError

__all__ = [
    "MIN_SECRET",
    "check_base_url",
    "check_header",
    "check_max_tokens",
    "check_timeout",
    "header_problem",
    "redact",
    "shown_url",
    "url_problem",
    "url_secrets",
]

#: secrets shorter than this are not looked for in text (every "ab" of a message would
#: be starred); a key that short is no secret anyway
MIN_SECRET = 4

#: what stands for a secret in a message
REDACTED = "***"

_LINE_BREAKS = "\r\n"


#: the key sent to a local server that needs none (the SDKs refuse no key at all); never
#: a secret
PLACEHOLDER_KEY = "not-needed"

def header_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP header's value (as a key in
    ``Authorization: Bearer KEY``), or ``None``. The message never quotes ``value``."""
    if not value:
        return "is empty"
    core = value.rstrip(_LINE_BREAKS)
    if core != value and core and core.strip() == core:
        return ("ends with a line break, which an env file or a file read whole may "
                "leave: remove it where the value is kept")
    if value.strip() != value:
        return "begins or ends with whitespace: remove it where the value is kept"
    if any(c in _LINE_BREAKS for c in value):
        return "contains a line break"
    if any(c.isspace() for c in value):
        return "contains whitespace: it must be one word"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "contains a control character"
    if not value.isascii():
        return ("contains a non-ASCII character, such as a curly quote or a long dash "
                "pasted from a document: an HTTP header is ASCII")
    return None


def check_header(value: str, setting: str) -> None:
    """:class:`ConfigError` ``SETTING: problem`` when ``value`` cannot be a header."""
    problem = header_problem(value)
    if problem is not None:
        raise ConfigError(f"{setting}: {problem} (the value is not shown)")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a model server's base URL, or ``None``."""
    if not url:
        return "is empty"
    shown = shown_url(url)
    if url.strip() != url or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F
                                 for c in url):
        return f"{shown!r} contains whitespace or a control character"
    if "://" not in url:
        return (f"{shown!r} has no scheme: write http://{shown} (a server on your "
                f"machine) or https://{shown}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks it
    except ValueError as exc:
        return f"{shown!r} is not a URL: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        return f"{shown!r}: the scheme must be http or https, not {parts.scheme!r}"
    if not parts.hostname:
        return f"{shown!r} names no host"
    return None


def check_base_url(url: str, setting: str) -> None:
    """:class:`ConfigError` ``SETTING: problem`` when ``url`` cannot be a base URL."""
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(f"{setting}: {problem}")


def check_max_tokens(value: object, setting: str) -> int | None:
    """``value`` when it is ``None`` or a positive integer; :class:`ConfigError` else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{setting}: expected a positive integer (the most tokens a "
                          f"reply may have), got {value!r}")
    return value


def check_timeout(value: object, setting: str) -> float:
    """``value`` as seconds when it is a positive finite number; :class:`ConfigError`
    else."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ConfigError(f"{setting}: expected a positive number of seconds, got "
                          f"{value!r}")
    return float(value)


def shown_url(url: str) -> str:
    """``url`` as messages name it: no ``user:password@``, no query, no fragment (a
    query may carry a key: ``?api-key=...``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    ends = [i for i in (rest.find(c) for c in "/?#") if i != -1]
    end = min(ends, default=len(rest))
    host = rest[:end].rpartition("@")[2]  # (as a URL parser reads it: the last "@")
    path = rest[end:].split("#", 1)[0].split("?", 1)[0]
    return f"{scheme}{sep}{host}{path}"


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The parts of ``url`` that may be secret (the user's password, the query)."""
    if not url:
        return ()
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return ()
    return tuple(s for s in (password, parts.query) if s)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret of ``secrets`` (of at least :data:`MIN_SECRET`
    characters) replaced by ``***``, as it is and as a ``repr`` or an encoded header
    would show it (``\\n`` for a line break)."""
    forms: set[str] = set()
    for secret in secrets:
        if not secret:
            continue
        for form in (secret, secret.strip(), repr(secret)[1:-1],
                     repr(secret.encode("utf-8", "replace"))[2:-1]):
            if len(form) >= MIN_SECRET:
                forms.add(form)
    for form in sorted(forms, key=len, reverse=True):  # a longer form first: whole
        text = text.replace(form, REDACTED)
    return text
