"""Reading a file's text: the size limit, UTF-8, a diagnostic instead of an exception."""

from __future__ import annotations

import os
import stat

from phaseflow.spec.diagnostics import Diagnostic

__all__ = ["MAX_FILE_BYTES", "decode_text", "read_text"]

#: Files larger than this are refused (PF001) before anything is parsed.
MAX_FILE_BYTES = 64 * 1024 * 1024


def read_text(path: str) -> str | Diagnostic:
    """The file's text, or a PF001 diagnostic saying why it cannot be read."""
    too_big = f"file is larger than the limit of {MAX_FILE_BYTES:,} bytes"
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            # a folder, a device (/dev/zero never ends), a FIFO (would block)
            return Diagnostic(path, 1, 1, "PF001", "cannot read file: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return Diagnostic(path, 1, 1, "PF001", too_big)
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)  # the file may grow after stat()
        if len(data) > MAX_FILE_BYTES:
            return Diagnostic(path, 1, 1, "PF001", too_big)
    except OSError as exc:
        return Diagnostic(path, 1, 1, "PF001", f"cannot read file: {exc.strerror or exc}")
    return decode_text(data, path, "file")


def decode_text(data: bytes, path: str, what: str = "file") -> str | Diagnostic:
    """``data`` as UTF-8 text (a byte-order mark dropped), or a PF001 diagnostic at the
    first byte that cannot be decoded; ``what`` names the source in the message."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        return Diagnostic(
            path,
            line,
            column,
            "PF001",
            f"{what} is not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded",
        )
