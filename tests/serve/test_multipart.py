"""The ``multipart/form-data`` parser (:mod:`phaseflow.serve.multipart`): what a real
client sends is read exactly, and every hostile body is a refusal naming what is wrong,
never an exception."""

from __future__ import annotations

import time

import httpx
import pytest

from phaseflow.serve.multipart import (
    MAX_HEADER_BYTES,
    MAX_PARTS,
    MultipartRefused,
    Part,
    boundary_of,
    parse_form,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def _encoded(data: dict[str, str], files: list[tuple[str, tuple[str, bytes, str]]]
             ) -> tuple[str, bytes]:
    """A form as httpx (a real client) encodes it: its Content-Type and body."""
    request = httpx.Request("POST", "http://x/", data=data, files=files)
    return request.headers["content-type"], request.read()


def _parse(content_type: str, body: bytes) -> tuple[Part, ...] | MultipartRefused:
    boundary = boundary_of(content_type)
    if isinstance(boundary, MultipartRefused):
        return boundary
    return parse_form(body, boundary)


def test_a_form_from_httpx_is_read_exactly() -> None:
    kind, body = _encoded({"text": "Was ist das? \u00e9", "busy": "queue"},
                          [("attachments", ("a.png", PNG, "image/png")),
                           ("attachments", ("b c\".bin", b"\r\n--x\r\n", "application/pdf"))])
    parts = _parse(kind, body)
    assert parts == (
        Part("text", None, None, "Was ist das? \u00e9".encode()),
        Part("busy", None, None, b"queue"),
        Part("attachments", "a.png", "image/png", PNG),
        # a quote in a file name is sent as %22 (as browsers do, per the WHATWG)
        Part("attachments", "b c%22.bin", "application/pdf", b"\r\n--x\r\n"))


def test_a_preamble_an_epilogue_and_padding_after_a_boundary_are_allowed() -> None:
    body = (b"ignored preamble\r\n--b1 \t\r\nContent-Disposition: form-data; name=text\r\n"
            b"\r\nhi\r\n--b1--\r\nepilogue")
    assert _parse("multipart/form-data; boundary=b1", body) == (
        Part("text", None, None, b"hi"),)
    quoted = _parse('Multipart/Form-Data; charset=utf-8; boundary="a b=c?"',
                    b'--a b=c?\r\nContent-Disposition: form-data; name="t"\r\n\r\n\r\n--a b=c?--')
    assert quoted == (Part("t", None, None, b""),)
    escaped = parse_form(_one(b'Content-Disposition: form-data; name="f"; '
                              b'filename="a\\"; b.png"\r\nContent-Type: IMAGE/PNG; x=1'), "b")
    assert escaped == (Part("f", 'a"; b.png', "image/png", b"x"),)


@pytest.mark.parametrize(("content_type", "says"), [
    ("multipart/form-data", "no boundary"),
    ("multipart/form-data; boundary=", "no boundary"),
    ("multipart/form-data; boundary=" + "a" * 71, "longer than 70"),
    ("multipart/form-data; boundary=\"a\u00e9\"", "does not allow"),
    ("multipart/form-data; boundary=\"abc", "not closed"),
    ("multipart/form-data; boundary=a; boundary=b", "twice"),
    ("multipart/mixed; boundary=a", "not multipart/form-data"),
    ("multipart/form-data; boundary", "without a value"),
])
def test_a_bad_boundary_is_refused(content_type: str, says: str) -> None:
    refused = boundary_of(content_type)
    assert isinstance(refused, MultipartRefused) and says in refused.message


def _one(headers: bytes, data: bytes = b"x") -> bytes:
    return b"--b\r\n" + headers + b"\r\n\r\n" + data + b"\r\n--b--\r\n"


@pytest.mark.parametrize(("body", "says"), [
    (b"", "boundary is not in it"),
    (b"no boundary here", "boundary is not in it"),
    (b"--b\r\nContent-Disposition: form-data; name=t\r\n\r\nnever closed", "not closed"),
    (b"--b\r\nContent-Disposition: form-data; name=t\r\n\r\nx\r\n--b", "does not end"),
    (b"--bX\r\n", "does not end with CRLF"),
    (b"--b\r\nContent-Disposition: form-data; name=t", "headers do not end"),
    (b"--b\r\n" + b"X-A: " + b"a" * (MAX_HEADER_BYTES + 10), "longer than"),
    (_one(b"Content-Disposition: form-data; name=t\r\nBroken"), "not NAME: VALUE"),
    (_one(b"Content-Disposition: form-data; name=t\r\ncontent-disposition: x"), "twice"),
    (_one(b"Content-Type: text/plain"), "no Content-Disposition"),
    (b"--b\r\n\r\nx\r\n--b--", "no Content-Disposition"),
    (_one(b"Content-Disposition: attachment; name=t"), "not form-data"),
    (_one(b"Content-Disposition: form-data; filename=a.png"), "has no name"),
    (_one(b'Content-Disposition: form-data; name="t'), "not closed"),
    (_one(b"Content-Disposition: form-data; name=\xff\xfe"), "not UTF-8"),
    (_one(b"Content-Disposition: form-data; name=t\r\n"
          b"Content-Transfer-Encoding: base64"), "encoded as 'base64'"),
    (b"--b\r\n" + b"Content-Disposition: form-data; name=t\r\n\r\nx\r\n--b\r\n"
     * (MAX_PARTS + 1) + b"--b--", f"more than {MAX_PARTS} parts"),
])
def test_a_hostile_body_is_a_refusal_never_an_exception(body: bytes, says: str) -> None:
    refused = parse_form(body, "b")
    assert isinstance(refused, MultipartRefused), refused
    assert says in refused.message


def test_a_large_body_of_near_boundaries_is_read_in_linear_time() -> None:
    """A body full of almost-delimiters (CRLF and dashes) costs no more than one scan."""
    near = b"\r\n--" * (2 << 20)
    started = time.perf_counter()
    refused = parse_form(b"--" + b"B" * 70 + near, "B" * 70)
    assert isinstance(refused, MultipartRefused)
    body = _one(b"Content-Disposition: form-data; name=t", near)
    assert isinstance(parse_form(body, "b"), tuple)
    assert time.perf_counter() - started < 2.0
