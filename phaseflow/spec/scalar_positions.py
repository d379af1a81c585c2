"""Where each character of a YAML scalar's value was written in the file.

A guard or a template is the *value* of a scalar, and YAML changes the text on the way:
``''`` becomes ``'``, ``\\u00e9`` becomes one character, a folded block joins its lines
with spaces, a block drops its indentation, a plain scalar over two lines becomes one.
So "column 7 of the expression" is not "column 7 after the scalar's start". This module
reads the scalar's source text again, the way libyaml's scanner does, pairing every
character of the value with the file index it came from; every diagnostic inside a
guard or a template (PF300-PF304) is placed through :meth:`SourceText.value_position`.

Nothing here runs while a valid file is read: the pairing is computed only for a scalar a
diagnostic is about, and the result is checked against the value libyaml produced, so a
case the re-scan gets wrong (none is known) falls back to the scalar's own position
instead of pointing at the wrong place.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from phaseflow.spec.yamlnodes import Scalar

#: libyaml's line breaks: CR LF, CR, LF, NEL, LS, PS (all of them count as a new line).
_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
_BREAKS = frozenset("\r\n\x85\u2028\u2029")
_BLANKS = frozenset(" \t")
_SIMPLE_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
    "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "'": "'",
    "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
#: At most this many candidate indentations are tried for a block scalar.
_MAX_INDENT_TRIES = 64

#: (the value's character, its file index, how many file characters produced it)
_Piece = tuple[str, int, int]


class SourceText:
    """A file's text, with positions of file indices and of characters inside scalars."""

    def __init__(self, text: str) -> None:
        self.text = text
        #: libyaml does not count a byte-order mark: line 1 starts after it
        self._base = 1 if text.startswith("\ufeff") else 0
        self._starts: list[int] | None = None
        self._pieces: dict[int, list[tuple[int, int]] | None] = {}

    def _line_starts(self) -> list[int]:
        if self._starts is None:
            self._starts = [self._base] + [m.end() for m in _BREAK.finditer(self.text)]
        return self._starts

    def line_column(self, index: int) -> tuple[int, int]:
        """1-based (line, column) of the character at ``index``, counted as libyaml does."""
        starts = self._line_starts()
        line = max(bisect.bisect_right(starts, index), 1)
        return line, index - starts[line - 1] + 1

    def index_of(self, line: int, column: int) -> int:
        """The index of 1-based (line, column); clamped to the text."""
        starts = self._line_starts()
        line = min(max(line, 1), len(starts))
        return min(starts[line - 1] + max(column, 1) - 1, len(self.text))

    def value_position(self, node: Scalar, offset: int) -> tuple[int, int]:
        """File (line, column) of character ``offset`` of ``node``'s value.

        ``offset == len(value)`` is the place just after the value's last character (for
        an error at the end of an expression). A scalar the re-scan cannot pair up gives
        the scalar's own position.
        """
        if id(node) not in self._pieces:
            self._pieces[id(node)] = self._pair(node)
        pieces = self._pieces[id(node)]
        if not pieces:
            return node.line, node.column
        if offset < len(pieces):
            return self.line_column(pieces[max(offset, 0)][0])
        index, width = pieces[-1]
        return self.line_column(index + width)

    def _pair(self, node: Scalar) -> list[tuple[int, int]] | None:
        value = node.text
        if not value:
            return None
        start = _skip_properties(self.text, self.index_of(node.line, node.column))
        for pieces in _candidates(self.text, start, node.style, value):
            if pieces is not None:
                return [(i, w) for _, i, w in pieces]
        return None


def offset_in(source: str, line: int, column: int) -> int:
    """The offset in ``source`` of 1-based ``line`` and 0-based ``column`` (the positions
    the guard compiler gives; lines split at ``\\n``), clamped to the source."""
    offset = 0
    for _ in range(max(line, 1) - 1):
        found = source.find("\n", offset)
        if found < 0:
            return len(source)
        offset = found + 1
    end = source.find("\n", offset)
    end = len(source) if end < 0 else end
    return min(offset + max(column, 0), end)


def _skip_properties(text: str, i: int) -> int:
    """Past the anchor and tag (``&a !!str``) and any blanks, breaks and comments between
    them and the scalar itself: the event's position is the first property's."""
    n = len(text)
    while i < n and text[i] in "&!":
        while i < n and text[i] not in _BLANKS and text[i] not in _BREAKS:
            i += 1
        while i < n and (text[i] in _BLANKS or text[i] in _BREAKS or text[i] == "#"):
            if text[i] == "#":
                while i < n and text[i] not in _BREAKS:
                    i += 1
            else:
                i += 1
    return i


def _candidates(
    text: str, start: int, style: str | None, value: str
) -> Iterator[list[_Piece] | None]:
    """The re-scans of the scalar that give exactly ``value`` (``None`` for one that does
    not): one for the flow styles, one per candidate indentation for a block."""
    if style is None:
        yield _matching(_plain(text, start), value)
    elif style == "'":
        yield _matching(_quoted(text, start, double=False), value)
    elif style == '"':
        yield _matching(_quoted(text, start, double=True), value)
    elif style in ("|", ">"):
        for indent in _indents(text, start, value):
            yield _matching(_block(text, start, indent), value)


def _matching(pieces: Iterator[_Piece], value: str) -> list[_Piece] | None:
    """The first ``len(value)`` pieces if they spell ``value``; stops at the first
    character that differs, so a wrong guess costs little."""
    taken: list[_Piece] = []
    for piece, expected in zip(pieces, value, strict=False):
        if piece[0] != expected:
            return None
        taken.append(piece)
    return taken if len(taken) == len(value) else None


def _line_break(text: str, i: int) -> tuple[str, int]:
    """The character a line break at ``i`` becomes (libyaml's READ_LINE), and its end."""
    if text.startswith("\r\n", i):
        return "\n", i + 2
    char = text[i]
    return ("\n" if char in "\r\n\x85" else char), i + 1


def _plain(text: str, i: int) -> Iterator[_Piece]:
    """libyaml's plain scalar: blanks at a line's ends dropped, lines folded."""
    n = len(text)
    leading: _Piece | None = None
    trailing: list[_Piece] = []
    spaces: list[_Piece] = []
    while i < n:
        while i < n and text[i] not in _BLANKS and text[i] not in _BREAKS:
            if leading is not None:
                yield from _fold(leading, trailing)
                leading, trailing = None, []
            else:
                yield from spaces
            spaces = []
            yield text[i], i, 1
            i += 1
        while i < n and (text[i] in _BLANKS or text[i] in _BREAKS):
            if text[i] in _BLANKS:
                if leading is None:
                    spaces.append((text[i], i, 1))
                i += 1
            else:
                char, end = _line_break(text, i)
                if leading is None:
                    spaces, leading = [], (char, i, end - i)
                else:
                    trailing.append((char, i, end - i))
                i = end


def _fold(leading: _Piece, trailing: list[_Piece]) -> Iterator[_Piece]:
    """A line break and the empty lines after it: one space, or the empty lines' breaks
    (an LS or PS break is kept as written)."""
    if leading[0] == "\n":
        if trailing:
            yield from trailing
        else:
            yield " ", leading[1], leading[2]
    else:
        yield leading
        yield from trailing


def _quoted(text: str, i: int, double: bool) -> Iterator[_Piece]:
    """libyaml's single- and double-quoted scalars: ``''``, escapes, folded lines."""
    n = len(text)
    quote = '"' if double else "'"
    i += 1  # the opening quote
    while i < n:
        joined = False  # an escaped line break: the lines join without a space
        while i < n and text[i] not in _BLANKS and text[i] not in _BREAKS:
            char = text[i]
            if not double and char == "'" and text.startswith("''", i):
                yield "'", i, 2
                i += 2
            elif char == quote:
                return
            elif double and char == "\\" and i + 1 < n and text[i + 1] in _BREAKS:
                i = _line_break(text, i + 1)[1]
                joined = True
                break
            elif double and char == "\\" and i + 1 < n:
                piece = _escape(text, i)
                if piece is None:
                    return
                yield piece
                i += piece[2]
            else:
                yield char, i, 1
                i += 1
        spaces: list[_Piece] = []
        leading: _Piece | None = None
        trailing: list[_Piece] = []
        while i < n and (text[i] in _BLANKS or text[i] in _BREAKS):
            if text[i] in _BLANKS:
                if leading is None and not joined:
                    spaces.append((text[i], i, 1))
                i += 1
            else:
                char, end = _line_break(text, i)
                if leading is None and not joined:
                    spaces, leading = [], (char, i, end - i)
                else:
                    trailing.append((char, i, end - i))
                i = end
        if joined:
            yield from trailing
        elif leading is not None:
            yield from _fold(leading, trailing)
        else:
            yield from spaces


def _escape(text: str, i: int) -> _Piece | None:
    kind = text[i + 1]
    if kind in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[kind], i, 2
    digits = _HEX_ESCAPES.get(kind)
    if digits is None:
        return None
    code = text[i + 2 : i + 2 + digits]
    try:
        return chr(int(code, 16)), i, 2 + digits
    except (ValueError, OverflowError):
        return None


def _block_header(text: str, i: int) -> tuple[bool, int, int]:
    """(literal?, chomping -1/0/+1, index of the first content line) of a block scalar."""
    n = len(text)
    literal = text[i] == "|"
    i += 1
    chomping = 0
    while i < n and (text[i] in "+-" or text[i].isdigit()):
        if text[i] in "+-":
            chomping = 1 if text[i] == "+" else -1
        i += 1
    while i < n and text[i] in _BLANKS:
        i += 1
    if i < n and text[i] == "#":
        while i < n and text[i] not in _BREAKS:
            i += 1
    if i < n:
        i = _line_break(text, i)[1]
    return literal, chomping, i


def _indents(text: str, start: int, value: str) -> Iterator[int]:
    """Candidate indentations of a block scalar, the likeliest first.

    The indentation is the first content line's spaces minus the spaces its value keeps
    (an indentation indicator can leave some); the parent's indentation, which libyaml
    also uses, is not known here, so the others are tried too (each is checked).
    """
    _, _, i = _block_header(text, start)
    n = len(text)
    first = 0
    while i < n:
        j = i
        while j < n and text[j] == " ":
            j += 1
        if j < n and text[j] in _BREAKS:
            i = _line_break(text, j)[1]
            continue
        first = j - i
        break
    kept_line = value.lstrip("\n").split("\n", 1)[0]
    kept = len(kept_line) - len(kept_line.lstrip(" "))
    likely = [first - kept, first]
    tried: set[int] = set()
    for indent in [*likely, *range(1, first + 1)][:_MAX_INDENT_TRIES]:
        if indent >= 1 and indent not in tried:
            tried.add(indent)
            yield indent


def _block(text: str, start: int, indent: int) -> Iterator[_Piece]:
    """libyaml's literal (``|``) and folded (``>``) block scalars at a given indentation."""
    literal, chomping, i = _block_header(text, start)
    n = len(text)
    line_start = i
    trailing: list[_Piece] = []

    def breaks(i: int, line_start: int) -> tuple[int, int]:
        while True:
            while i < n and i - line_start < indent and text[i] == " ":
                i += 1
            if i < n and text[i] in _BREAKS:
                char, end = _line_break(text, i)
                trailing.append((char, i, end - i))
                i = line_start = end
            else:
                return i, line_start

    i, line_start = breaks(i, line_start)
    leading: _Piece | None = None
    leading_blank = False
    while i < n and i - line_start == indent:
        trailing_blank = text[i] in _BLANKS
        if (
            not literal and leading is not None and leading[0] == "\n"
            and not leading_blank and not trailing_blank
        ):
            if not trailing:
                yield " ", leading[1], leading[2]
        elif leading is not None:
            yield leading
        leading = None
        yield from trailing
        trailing.clear()
        leading_blank = text[i] in _BLANKS
        while i < n and text[i] not in _BREAKS:
            yield text[i], i, 1
            i += 1
        if i >= n:
            break
        char, end = _line_break(text, i)
        leading = (char, i, end - i)
        i = line_start = end
        i, line_start = breaks(i, line_start)
    if chomping != -1 and leading is not None:
        yield leading
    if chomping == 1:
        yield from trailing
