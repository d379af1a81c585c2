"""PostgreSQL connection strings as messages show them: every password replaced by
``***``, the rest as it was written (so a user recognises the store they named).

Both forms libpq reads are masked: a URL's ``user:password@`` and its
``?password=`` parameter, and a ``key=value`` string's ``password=...`` (quoted or not,
with libpq's backslash escapes). ``sslpassword`` (the client key's) is a password too. A
string that cannot be read as either is masked from the first password keyword on, so a
value libpq would misread is never shown either. Pure string work: no psycopg, so the
command line can name a store without loading the driver.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["LIBPQ_KEYWORDS", "MASK", "URL_SCHEMES", "keywords", "masked"]

MASK = "***"

#: what a PostgreSQL URL starts with (case-insensitively)
URL_SCHEMES = ("postgresql://", "postgres://")

#: the keywords of a libpq connection string (PostgreSQL 16's list)
LIBPQ_KEYWORDS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
    "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
})

#: the keywords whose values are secrets
_SECRETS = frozenset({"password", "sslpassword"})

#: one ``key = value`` of a libpq string: a quoted value (backslash escapes), one whose
#: quote never closes (all the rest), or an unquoted one (up to white space, quotes
#: included; a backslash escapes the next character, white space too)
_PAIR = re.compile(r"""(\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*)"""
                   r"""('(?:\\.|[^'\\])*'|'.*|(?:\\.|[^\s\\])*\\?)""", re.DOTALL)
_SECRET_WORD = re.compile(r"(ssl)?password\s*=", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _pairs(text: str) -> tuple[list[tuple[str, str, str, str]], int]:
    """The ``(space, key, equals, value)`` parts of ``text`` from its start, and where
    they stop (``len(text)`` when the whole text is pairs, ignoring trailing space)."""
    pairs = []
    at = 0
    while at < len(text) and text[at:].strip():
        match = _PAIR.match(text, at)
        if match is None or match.end() == at:
            break
        pairs.append((match[1], match[2], match[3], match[4]))
        at = match.end()
    if not text[at:].strip():
        at = len(text)
    return pairs, at


def keywords(text: str) -> list[str] | None:
    """The keys of a ``key=value`` connection string (``None``: ``text`` is not one)."""
    pairs, end = _pairs(text)
    if not pairs or end != len(text):
        return None
    return [key for _, key, _, _ in pairs]


def masked(dsn: str) -> str:
    """``dsn`` with every password shown as ``***`` (a URL of any scheme: its
    ``user:password@`` and ``password`` parameters)."""
    if _URL.match(dsn):
        return _masked_url(dsn)
    pairs, _ = _pairs(dsn)
    out = []
    secret = False
    for space, key, equals, value in pairs:
        secret = key.lower() in _SECRETS
        out.append(f"{space}{key}{equals}{MASK if secret else value}")
    shown = "".join(out)
    rest = dsn[len("".join("".join(p) for p in pairs)):]
    if secret and rest.strip():  # what follows a password unreadably may be part of it
        return f"{shown} {MASK}"
    found = _SECRET_WORD.search(rest)  # what cannot be read: shown up to a password
    return shown + (rest if found is None else rest[:found.end()] + MASK)


def _masked_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    # The credentials end at the last '@' (a password may hold '@', '/' or '?' that were
    # not percent-encoded): masking too much is better than showing a password.
    credentials, at, after = rest.rpartition("@")
    if at and ":" in credentials:
        user = credentials.split(":", 1)[0]
        rest = f"{user}:{MASK}@{after}"
    where, question, query = rest.partition("?")
    if not question:
        return f"{scheme}://{rest}"
    parts = []
    for part in query.split("&"):
        key, equals, _ = part.partition("=")
        secret = unquote(key).strip().lower() in _SECRETS
        parts.append(f"{key}={MASK}" if equals and secret else part)
    return f"{scheme}://{where}?{'&'.join(parts)}"
