"""A message's attachments as the HTTP API and AG-UI receive them, checked before the
message is accepted: each a ``data:`` URL (or, for an image, an ``http(s):`` URL), or the
bytes of a file part of a form (an :class:`Upload`), whose
bytes are within :data:`~phaseflow.turn.media.MAX_ATTACHMENT_BYTES` and of a type the
served agent's provider takes. A refusal is ``422 attachment_refused`` naming the
attachment and the ``reason``; the session stores what passes once, by its digest
(:mod:`phaseflow.session.attachments`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from phaseflow.providers.media import accepted_media
from phaseflow.serve.problems import Problem
from phaseflow.serve.served import Served
from phaseflow.turn.media import MediaRefused, check_media, data_url, read_data_url
from phaseflow.turn.messages import Content, MediaPart, TextPart

__all__ = ["MAX_ATTACHMENTS", "Attachment", "Upload", "message_content", "refused"]

#: the most attachments one message takes
MAX_ATTACHMENTS = 16

#: a media type that says nothing of the bytes (a browser's default for a file it does
#: not know): the bytes say what they are
_UNTYPED = ("", "application/octet-stream")


@dataclass(frozen=True, slots=True)
class Upload:
    """The bytes of a file part of a form and the media type it declared (``None``:
    none, or ``application/octet-stream``)."""

    data: bytes
    media_type: str | None


#: an attachment as a request carries it: a URL and an optional media type, or bytes
Attachment = tuple[str, str | None] | Upload


def refused(refusal: MediaRefused, field: str) -> Problem:
    return Problem(422, "attachment_refused", refusal.message, field=field,
                   reason=refusal.reason)


def _part(item: Attachment, accepted: frozenset[str], field: str) -> MediaPart:
    if isinstance(item, Upload):
        declared = None if (item.media_type or "") in _UNTYPED else item.media_type
        kind = check_media(item.data, declared, accepted)
        if isinstance(kind, MediaRefused):
            raise refused(kind, field)
        return MediaPart(kind, data_url(kind, item.data))
    url, media_type = item
    if url.startswith(("http://", "https://")):
        kind = (media_type or "").split(";")[0].strip().lower()
        if kind not in accepted or not kind.startswith("image/"):
            raise refused(MediaRefused("unsupported_type", "an attachment by URL must be an "
                                       "image with its mime_type (image/png, image/jpeg, "
                                       "image/gif, image/webp)"), field)
        return MediaPart(kind, url)
    read = read_data_url(url)
    if isinstance(read, MediaRefused):
        raise refused(read, field)
    declared, data = read
    checked = check_media(data, declared or media_type, accepted)
    if isinstance(checked, MediaRefused):
        raise refused(checked, field)
    return MediaPart(checked, url)


def message_content(text: str, attachments: Sequence[Attachment],
                    served: Served, field: str = "attachments") -> Content:
    """``text`` with ``attachments`` (each a URL and an optional media type, or an
    :class:`Upload`) as the content of one message; 422 for one that cannot be sent."""
    if not attachments:
        return text
    if len(attachments) > MAX_ATTACHMENTS:
        raise Problem(422, "attachment_refused", f"a message takes at most "
                      f"{MAX_ATTACHMENTS} attachments", field=field, reason="too_many")
    accepted = accepted_media(served.agent.provider)
    parts: list[TextPart | MediaPart] = [TextPart(text)] if text else []
    for index, item in enumerate(attachments):
        parts.append(_part(item, accepted, f"{field}[{index}]"))
    return tuple(parts)
