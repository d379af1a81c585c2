"""A session's attachments (images and files in its messages and its tools' results),
kept once by digest and checked before a message that names them is taken.

An attachment is stored as a capture of its session (``Store.put_capture`` with the
session's id: the same bytes twice are one capture, and it goes when the session is
deleted); a :class:`~phaseflow.turn.messages.MediaPart` names it by that reference.
The rules (limit, types, a ``data:`` URL) are :mod:`phaseflow.turn.media`'s; which
types a provider takes is its ``media_types``. Every entry point (``Session.attach``,
``Session.send``, HTTP, AG-UI, ``run -m @FILE``) goes through :func:`attach` and
:func:`admit`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from phaseflow.errors import PhaseflowError
from phaseflow.stores.base import Store, capture_owner
from phaseflow.turn.media import MediaRefused, check_media, read_data_url
from phaseflow.turn.messages import Content, MediaPart, Message, TextPart

__all__ = ["AttachmentRefused", "admit", "attach", "history_media", "load"]


class AttachmentRefused(PhaseflowError):
    """A message names an attachment that cannot be sent: ``refusal`` says why
    (``not_found``, ``too_large``, ``unsupported_type``, ``malformed``, ``empty``)."""

    def __init__(self, refusal: MediaRefused) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal

    @property
    def reason(self) -> str:
        return self.refusal.reason


#: a stored attachment's reference (:func:`~phaseflow.stores.base.capture_reference`)
_REFERENCE = re.compile(r"[0-9a-f]{16}-[0-9a-f]{64}")


def _owned(session_id: str, token: str) -> bool:
    return token.startswith(capture_owner(session_id) + "-")


async def attach(store: Store, session_id: str, data: bytes, media_type: str | None,
                 accepted: frozenset[str]) -> MediaPart | MediaRefused:
    """Keep ``data`` as an attachment of the session (once, by its digest); the part
    that names it, or why it was refused (nothing is stored then)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        return MediaRefused("malformed", "an attachment's data must be bytes")
    data = bytes(data)
    kind = check_media(data, media_type, accepted)
    if isinstance(kind, MediaRefused):
        return kind
    reference = await store.put_capture(data, session_id=session_id)
    return MediaPart(kind, reference)


async def admit(store: Store, session_id: str, content: Content,
                accepted: frozenset[str], known: frozenset[str] = frozenset()) -> Content:
    """``content`` as it may be sent: a ``data:`` URL part stored as an attachment, an
    attachment of the session checked to exist and to be of a type the provider takes,
    an image by ``http(s):`` URL kept as it is. Anything else raises
    :class:`AttachmentRefused` (an unknown token, another session's attachment that
    the session's history does not already name: ``known``, e.g. a fork's)."""
    if isinstance(content, str) or all(isinstance(p, TextPart) for p in content):
        return content
    out: list[TextPart | MediaPart] = []
    for part in content:
        if isinstance(part, TextPart):
            out.append(part)
        else:
            out.append(await _admit_part(store, session_id, part, accepted, known))
    return tuple(out)


async def _admit_part(store: Store, session_id: str, part: MediaPart,
                      accepted: frozenset[str], known: frozenset[str]) -> MediaPart:
    token = part.token
    if token.startswith("data:"):
        read = read_data_url(token)
        if isinstance(read, MediaRefused):
            raise AttachmentRefused(read)
        made = await attach(store, session_id, read[1], read[0] or part.media_type, accepted)
        if isinstance(made, MediaRefused):
            raise AttachmentRefused(made)
        return made
    kind = part.media_type.split(";")[0].strip().lower()
    if kind not in accepted:
        raise AttachmentRefused(MediaRefused(
            "unsupported_type", f"the provider does not take {kind} (it takes "
            f"{', '.join(sorted(accepted))})"))
    if token.startswith(("http://", "https://")):
        if not kind.startswith("image/"):
            raise AttachmentRefused(MediaRefused(
                "unsupported_type", "only an image may be given by URL; send a file's bytes"))
        return part
    ours = _owned(session_id, token) or token in known
    if not ours or await store.read_capture(token, 0, 0) is None:
        raise AttachmentRefused(MediaRefused(
            "not_found", f"no attachment {token!r} in this session (attach its bytes "
            "first, or send a data: URL)"))
    return part


def history_media(messages: Iterable[Message]) -> set[str]:
    """The stored attachments ``messages`` name (a session's own, or, in a fork, those
    its history took from the session it was forked from)."""
    found: set[str] = set()
    for message in messages:
        content = message.content
        if type(content) is tuple:
            for part in content:
                if type(part) is MediaPart and _REFERENCE.fullmatch(part.token):
                    found.add(part.token)
    return found


async def load(store: Store, references: Iterable[str],
               cache: dict[str, bytes]) -> Mapping[str, bytes]:
    """The bytes of each reference (read once per session: ``cache`` keeps them); a
    reference no longer stored is left out (the provider names it in text)."""
    out: dict[str, bytes] = {}
    for reference in references:
        data = cache.get(reference)
        if data is None:
            data = await store.get_capture(reference)
            if data is None:
                continue
            cache[reference] = data
        out[reference] = data
    return out
