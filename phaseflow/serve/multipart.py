"""A ``multipart/form-data`` body (RFC 7578) read into its parts, with no I/O: the
boundary from the ``Content-Type`` header, then each part's name, file name, media type
and bytes.

The body is already in memory and within the server's body limit (read by
:func:`phaseflow.serve.bodies.read_body`, which refuses a larger one before buffering
it), so this parser only has to be exact and linear: every scan is a ``bytes.find``
from where the last one stopped, never a backtracking pattern. What a hostile body may
try is bounded: the boundary's length and characters (RFC 2046), the number of parts
(:data:`MAX_PARTS`), the bytes of a part's headers (:data:`MAX_HEADER_BYTES`), header
text that is not UTF-8, a part without ``Content-Disposition: form-data; name=...``, a
transfer encoding other than the identity (RFC 7578 § 4.7), a body that is never closed.
Each is a :class:`MultipartRefused` value naming what is wrong; the HTTP layer answers it
``400 invalid_multipart``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MAX_BOUNDARY",
    "MAX_HEADER_BYTES",
    "MAX_PARTS",
    "MultipartRefused",
    "Part",
    "boundary_of",
    "parse_form",
]

#: the longest boundary (RFC 2046 § 5.1.1)
MAX_BOUNDARY = 70
#: the most parts a form may have
MAX_PARTS = 64
#: the most bytes of one part's header lines
MAX_HEADER_BYTES = 8 * 1024

#: the characters a boundary may be made of (RFC 2046's ``bchars``)
_BCHARS = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ")
#: the transfer encodings that leave a part's bytes as they are
_IDENTITY = ("7bit", "8bit", "binary")


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a form: its field ``name``, the ``filename`` a file part carries
    (``None`` for a plain field), its declared ``media_type`` (lowercase, without
    parameters; ``None`` when not given) and its bytes."""

    name: str
    filename: str | None
    media_type: str | None
    data: bytes

    @property
    def is_file(self) -> bool:
        """A file part: one with a file name, or with a media type other than plain
        text (RFC 7578 leaves the file name optional; httpx leaves out an empty one)."""
        return self.filename is not None or self.media_type not in (None, "text/plain")


@dataclass(frozen=True, slots=True)
class MultipartRefused:
    """A form body that cannot be read, and why (for a person)."""

    message: str

    def __str__(self) -> str:
        return self.message


def _split_params(value: str) -> list[str] | None:
    """``value`` split at the semicolons outside quoted strings; ``None`` when a quoted
    string is not closed."""
    items, current, quoted, escaped = [], [], False, False
    for char in value:
        if escaped:
            current.append(char)
            escaped = False
        elif quoted and char == "\\":
            current.append(char)
            escaped = True
        elif char == '"':
            current.append(char)
            quoted = not quoted
        elif char == ";" and not quoted:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if quoted:
        return None
    items.append("".join(current))
    return items


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner, out, escaped = value[1:-1], [], False
        for char in inner:
            if escaped or char != "\\":
                out.append(char)
                escaped = False
            else:
                escaped = True
        return "".join(out)
    return value


def _header_value(value: str) -> tuple[str, dict[str, str]] | MultipartRefused:
    """A header value as its first token (lowercase) and its ``;``-parameters (names
    lowercase, values unquoted)."""
    items = _split_params(value)
    if items is None:
        return MultipartRefused(f"a quoted string is not closed in {value[:80]!r}")
    params: dict[str, str] = {}
    for item in items[1:]:
        name, equals, raw = item.partition("=")
        name = name.strip().lower()
        if not item.strip():
            continue
        if not equals or not name:
            return MultipartRefused(f"a parameter without a value: {item.strip()[:80]!r}")
        if name in params:
            return MultipartRefused(f"the parameter {name!r} is given twice")
        params[name] = _unquote(raw.strip())
    return items[0].strip().lower(), params


def boundary_of(content_type: str) -> str | MultipartRefused:
    """The boundary of a ``multipart/form-data`` ``Content-Type`` header."""
    read = _header_value(content_type)
    if isinstance(read, MultipartRefused):
        return read
    kind, params = read
    if kind != "multipart/form-data":
        return MultipartRefused(f"the body is {kind}, not multipart/form-data")
    boundary = params.get("boundary")
    if not boundary:
        return MultipartRefused("the Content-Type has no boundary parameter")
    if len(boundary) > MAX_BOUNDARY:
        return MultipartRefused(f"the boundary is longer than {MAX_BOUNDARY} characters")
    if not set(boundary) <= _BCHARS or boundary.endswith(" "):
        return MultipartRefused("the boundary has a character RFC 2046 does not allow")
    return boundary


def _headers(raw: bytes) -> dict[str, str] | MultipartRefused:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return MultipartRefused("a part's headers are not UTF-8")
    headers: dict[str, str] = {}
    if not text:
        return headers
    for line in text.split("\r\n"):
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not name or " " in name:
            return MultipartRefused(f"a part has a header line that is not NAME: VALUE: "
                                    f"{line[:80]!r}")
        if name in headers:
            return MultipartRefused(f"a part has the header {name!r} twice")
        headers[name] = value.strip()
    return headers


def _part(raw_headers: bytes, data: bytes) -> Part | MultipartRefused:
    headers = _headers(raw_headers)
    if isinstance(headers, MultipartRefused):
        return headers
    disposition = headers.get("content-disposition")
    if disposition is None:
        return MultipartRefused("a part has no Content-Disposition header")
    read = _header_value(disposition)
    if isinstance(read, MultipartRefused):
        return read
    kind, params = read
    if kind != "form-data":
        return MultipartRefused(f"a part's Content-Disposition is {kind!r}, not form-data")
    name = params.get("name")
    if not name:
        return MultipartRefused("a part's Content-Disposition has no name")
    encoding = headers.get("content-transfer-encoding", "binary").lower()
    if encoding not in _IDENTITY:
        return MultipartRefused(f"the part {name!r} is encoded as {encoding!r}; send its "
                                "bytes as they are (binary)")
    media_type = None
    if "content-type" in headers:
        typed = _header_value(headers["content-type"])
        if isinstance(typed, MultipartRefused):
            return typed
        media_type = typed[0] or None
    return Part(name, params.get("filename"), media_type, data)


def parse_form(body: bytes, boundary: str) -> tuple[Part, ...] | MultipartRefused:
    """The parts of a ``multipart/form-data`` ``body`` delimited by ``boundary``."""
    dash = b"--" + boundary.encode("ascii")
    between = b"\r\n" + dash
    if body.startswith(dash):
        pos = len(dash)
    else:
        first = body.find(between)
        if first < 0:
            return MultipartRefused("the body has no part: its boundary is not in it")
        pos = first + len(between)
    parts: list[Part] = []
    while True:
        if body.startswith(b"--", pos):
            return tuple(parts)  # the closing delimiter; what follows is the epilogue
        while pos < len(body) and body[pos] in b" \t":
            pos += 1
        if not body.startswith(b"\r\n", pos):
            return MultipartRefused("a boundary line does not end with CRLF (or the body "
                                    "is not closed with --BOUNDARY--)")
        pos += 2
        if len(parts) == MAX_PARTS:
            return MultipartRefused(f"the form has more than {MAX_PARTS} parts")
        if body.startswith(b"\r\n", pos):
            raw_headers, start = b"", pos + 2
        else:
            end = body.find(b"\r\n\r\n", pos, pos + MAX_HEADER_BYTES + 4)
            if end < 0:
                if len(body) - pos > MAX_HEADER_BYTES:
                    return MultipartRefused(f"a part's headers are longer than "
                                            f"{MAX_HEADER_BYTES} bytes")
                return MultipartRefused("a part's headers do not end (no empty line)")
            raw_headers, start = body[pos:end], end + 4
        close = body.find(between, start)
        if close < 0:
            return MultipartRefused("the body is not closed with --BOUNDARY--")
        part = _part(raw_headers, body[start:close])
        if isinstance(part, MultipartRefused):
            return part
        parts.append(part)
        pos = close + len(between)
