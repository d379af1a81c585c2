"""The rules of an attachment (an image or a file in a message or a tool's result), with
no I/O: which media types exist, how big one may be, what its bytes must look like, and
how a ``data:`` URL is read.

An attachment is kept once, by the SHA-256 of its bytes, in the session's store (a
capture of the session: :func:`phaseflow.stores.base.capture_reference`); a message
names it by that reference in a :class:`~phaseflow.turn.messages.MediaPart`. Each
provider turns the bytes into its own API's form when it sends a request.

A refusal is a value, :class:`MediaRefused`: its ``reason`` is one of
:data:`REASONS` and its ``message`` says what to do.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

__all__ = [
    "FILE_TYPES",
    "IMAGE_TYPES",
    "MAX_ATTACHMENT_BYTES",
    "MEDIA_TYPES",
    "REASONS",
    "MediaRefused",
    "check_media",
    "data_url",
    "read_data_url",
    "sniff",
]

#: the images every provider takes
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: the files a provider may take (each provider says which it does: ``media_types``)
FILE_TYPES = frozenset({"application/pdf"})
MEDIA_TYPES = IMAGE_TYPES | FILE_TYPES

#: the largest attachment, in bytes (5 MiB: the smallest per-image limit of the
#: providers phaseflow speaks to)
MAX_ATTACHMENT_BYTES = 5 * 1024 * 1024

#: why an attachment is refused
REASONS = ("not_found", "too_large", "unsupported_type", "malformed", "empty")

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


@dataclass(frozen=True, slots=True)
class MediaRefused:
    """An attachment that was not taken: ``reason`` (one of :data:`REASONS`) and a
    message for a person."""

    reason: str
    message: str

    def __str__(self) -> str:
        return self.message


def sniff(data: bytes) -> str | None:
    """The media type ``data``'s first bytes say it is (of :data:`MEDIA_TYPES`), or
    ``None``."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_media(data: bytes, media_type: str | None, accepted: frozenset[str],
                limit: int = MAX_ATTACHMENT_BYTES) -> str | MediaRefused:
    """The media type of ``data`` (given, or read from its bytes when ``None``) when it
    may be attached for a provider that takes ``accepted``; else why not. The bytes must
    be what the type says (a ``.png`` that is not a PNG is refused)."""
    if not data:
        return MediaRefused("empty", "the attachment is empty")
    if len(data) > limit:
        return MediaRefused("too_large", f"the attachment is {len(data):,} bytes; the limit "
                            f"is {limit:,} bytes")
    found = sniff(data)
    declared = None if media_type is None else media_type.split(";")[0].strip().lower()
    kind = declared or found
    if kind is None:
        return MediaRefused("unsupported_type", "the attachment is of no type phaseflow "
                            f"takes ({', '.join(sorted(MEDIA_TYPES))})")
    if kind not in accepted:
        return MediaRefused("unsupported_type", f"the provider does not take {kind} "
                            f"(it takes {', '.join(sorted(accepted))})")
    if found != kind:
        return MediaRefused("malformed", f"the attachment's bytes are not {kind}")
    return kind


def read_data_url(url: str) -> tuple[str, bytes] | MediaRefused:
    """The media type and bytes of a ``data:TYPE;base64,...`` URL."""
    if not isinstance(url, str) or not url.startswith("data:") or "," not in url:
        return MediaRefused("malformed", "an attachment must be a data: URL "
                            "(data:TYPE;base64,DATA)")
    header, _, payload = url[5:].partition(",")
    fields = header.split(";")
    if "base64" not in fields[1:]:
        return MediaRefused("malformed", "an attachment's data: URL must be base64")
    if len(payload) > MAX_ATTACHMENT_BYTES * 4 // 3 + 8:
        return MediaRefused("too_large", "the attachment is larger than the limit of "
                            f"{MAX_ATTACHMENT_BYTES:,} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return MediaRefused("malformed", "an attachment's data: URL is not valid base64")
    return fields[0].strip().lower(), data


def data_url(media_type: str, data: bytes) -> str:
    """``data`` as a ``data:`` URL."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
