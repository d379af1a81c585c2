"""The one reading of a media part for every provider: its bytes (a stored attachment
the request carries, or a ``data:`` URL), a URL the provider fetches itself, or neither
(a reference the request does not carry: named in text, never sent as bytes it is not).

Each provider's wire module turns :class:`Media` into its API's form; which media types
a provider takes is its ``media_types`` (:func:`accepted_media`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

from phaseflow.turn.media import FILE_TYPES, IMAGE_TYPES, MediaRefused, read_data_url
from phaseflow.turn.messages import Content, MediaPart, TextPart

__all__ = ["ALL_MEDIA", "Media", "accepted_media", "has_media", "media_of", "note"]

#: what the providers phaseflow ships take: images and PDF files
ALL_MEDIA = IMAGE_TYPES | FILE_TYPES


@dataclass(frozen=True, slots=True)
class Media:
    """A media part as a provider sends it: ``data`` (bytes) or ``url`` (fetched by the
    provider), never both."""

    media_type: str
    data: bytes | None = None
    url: str | None = None

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data or b"").decode("ascii")

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.base64}"

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")


def media_of(part: MediaPart, attachments: Mapping[str, bytes]) -> Media | None:
    """``part``'s bytes or URL, or ``None`` when the request has neither."""
    data = attachments.get(part.token)
    if data is not None:
        return Media(part.media_type, data=data)
    if part.token.startswith("data:"):
        read = read_data_url(part.token)
        if isinstance(read, MediaRefused):
            return None
        return Media(read[0] or part.media_type, data=read[1])
    if part.token.startswith(("http://", "https://")):
        return Media(part.media_type, url=part.token)
    return None


def note(part: MediaPart) -> str:
    """A media part named in text (where a role takes only text)."""
    return f"[attachment {part.media_type}: {part.token}]"


def has_media(content: Content) -> bool:
    return not isinstance(content, str) and any(not isinstance(p, TextPart) for p in content)


def accepted_media(provider: object) -> frozenset[str]:
    """The media types ``provider`` takes: its ``media_types``, else images only."""
    types = getattr(provider, "media_types", None)
    return frozenset(types) if types is not None else IMAGE_TYPES
