"""Request bodies: read within a size limit, parsed as a JSON object of bounded depth,
and their fields checked one by one, each mistake a 4xx :class:`Problem` naming the
field.

A hostile body is refused before it costs anything: a ``Content-Length`` over the limit
at once (413), a body that grows past the limit while it streams in as soon as it does,
JSON nested deeper than :data:`MAX_DEPTH` (400), ``NaN`` and ``Infinity`` (not JSON),
text that is not UTF-8. A ``multipart/form-data`` body (:func:`read_form`) is refused for
a bad boundary before it is read, and read into its parts by
:mod:`phaseflow.serve.multipart` (400 ``invalid_multipart`` for a body that is not one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from phaseflow.expr.describe import json_kind
from phaseflow.serve.multipart import MultipartRefused, Part, boundary_of, parse_form
from phaseflow.serve.problems import Problem

#: how deep a body's objects and arrays may nest
MAX_DEPTH = 32


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any, limit: int) -> bool:
    """Whether ``value`` nests at most ``limit`` levels (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return True


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, at most ``limit`` bytes (413 beyond)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise Problem(400, "bad_request", "Content-Length is not a number") from None
        if size > limit:
            raise Problem(413, "body_too_large",
                          f"the body has {size} bytes; this server takes at most {limit}",
                          limit=limit)
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise Problem(413, "body_too_large",
                          f"the body is over {limit} bytes, the most this server takes",
                          limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_object(request: Request, limit: int, *, empty_ok: bool = False
                      ) -> dict[str, Any]:
    """The body as a JSON object (``{}`` for an empty body when ``empty_ok``)."""
    raw = await read_body(request, limit)
    if not raw.strip():
        if empty_ok:
            return {}
        raise Problem(400, "invalid_json", "the body is empty; a JSON object was expected")
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if kind and kind != "application/json" and not kind.endswith("+json"):
        raise Problem(415, "unsupported_media_type",
                      f"the body is {kind}; send application/json")
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise Problem(400, "invalid_json", "the body is not UTF-8 text") from None
    except RecursionError:
        raise Problem(400, "invalid_json",
                      f"the JSON nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise Problem(400, "invalid_json", f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Problem(400, "invalid_json",
                      f"the body must be a JSON object, not {json_kind(value)}")
    if not _depth(value, MAX_DEPTH):
        raise Problem(400, "invalid_json", f"the JSON nests deeper than {MAX_DEPTH} levels")
    return value


def media_type(request: Request, default: str = "application/json") -> str:
    """The body's media type (lowercase, without parameters)."""
    return request.headers.get("content-type", default).split(";")[0].strip().lower()


async def read_form(request: Request, limit: int) -> tuple[Part, ...]:
    """The parts of a ``multipart/form-data`` body of at most ``limit`` bytes (413
    beyond; 400 ``invalid_multipart`` for a boundary or a body that cannot be read)."""
    boundary = boundary_of(request.headers.get("content-type", ""))
    if isinstance(boundary, MultipartRefused):
        raise Problem(400, "invalid_multipart", boundary.message)
    parts = parse_form(await read_body(request, limit), boundary)
    if isinstance(parts, MultipartRefused):
        raise Problem(400, "invalid_multipart", parts.message)
    return parts


def known_fields(body: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """400 for a field the resource does not take (a typo must not pass unseen)."""
    for name in body:
        if name not in allowed:
            raise Problem(400, "unknown_field",
                          f"unknown field {name!r}; this request takes: {', '.join(allowed)}",
                          field=name)


def _invalid(name: str, what_is_wrong: str) -> Problem:
    """The 400 of a field that is there but wrong: ``the field 'x' <what_is_wrong>``."""
    return Problem(400, "invalid_field", f"the field {name!r} {what_is_wrong}", field=name)


def text_field(body: Mapping[str, Any], name: str, *, required: bool = False,
               default: str | None = None, max_chars: int | None = None,
               choices: tuple[str, ...] | None = None) -> str | None:
    """A string field; 400 naming it when it is of another type or not one of
    ``choices``."""
    if name not in body:
        if required:
            raise Problem(400, "missing_field", f"the field {name!r} is required", field=name)
        return default
    value = body[name]
    if not isinstance(value, str):
        raise _invalid(name, f"must be a string, not {json_kind(value)}")
    if required and not value:
        raise _invalid(name, "must not be empty")
    if max_chars is not None and len(value) > max_chars:
        raise _invalid(name, f"is longer than {max_chars} characters")
    if choices is not None and value not in choices:
        raise _invalid(name, f"must be one of {', '.join(choices)}, not {value!r}")
    return value


def object_field(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """An optional JSON-object field; 400 naming it when it is of another type."""
    if name not in body:
        return None
    value = body[name]
    if not isinstance(value, dict):
        raise _invalid(name, f"must be an object, not {json_kind(value)}")
    return value
