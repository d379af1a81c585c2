"""Where in a guard's or a template's source a name is written.

A diagnostic about a name (PF301 ``state.amout``, PF302 ``{{ stat.x }}``, PF303
``{{ state.nme }}``) points at the name itself, not at the start of the expression. The
compiled guard and template know *which* names they read, not where; these functions find
the first place, as an offset into the source, by reading its tokens again (Python's
tokenizer for a guard, Jinja's lexer for a template), so a name inside a string or in a
template's plain text is never mistaken for a read. They run only for a diagnostic, and
return ``None`` when the name cannot be found (the caller then points at the expression).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import unicodedata
from functools import lru_cache

from phaseflow.template import TemplateCompileError, environment

#: The messages of :mod:`phaseflow.template.compiler` that are about one name.
_NAMED_ERROR = re.compile(r"unknown (?:name|filter|test) '([^']+)'")


def _line_offsets(source: str) -> list[int]:
    """Offset of the start of each line (lines split at ``\\n``, as the compilers do)."""
    return [0] + [i + 1 for i, c in enumerate(source) if c == "\n"]


def guard_read_offset(source: str, key: str) -> int | None:
    """Offset of the first ``state.<key>`` or ``state['<key>']`` read in a guard: of the
    key's name (after the quote for a subscript)."""
    return _guard_reads(source).get(key)


@lru_cache(maxsize=16)  # a guard with many undeclared keys is read once
def _guard_reads(source: str) -> dict[str, int]:
    """Every key the guard reads, with the offset of its first read."""
    wrapped = "(" + source + "\n)"  # as the guard compiler reads it: newlines are joins
    try:
        tokens = [
            t for t in tokenize.generate_tokens(io.StringIO(wrapped).readline)
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
        ]
    except (tokenize.TokenError, SyntaxError):
        return {}
    starts = _line_offsets(source)
    reads: dict[str, int] = {}
    for i, tok in enumerate(tokens[:-2]):
        if tok.type != tokenize.NAME or tok.string != "state":
            continue
        op, name = tokens[i + 1], tokens[i + 2]
        key: object = None
        start = name.start
        if op.string == "." and name.type == tokenize.NAME:
            key = unicodedata.normalize("NFKC", name.string)
        elif op.string == "[" and name.type == tokenize.STRING:
            key = _literal(name.string)
            quote = len(name.string) - len(name.string.lstrip("rRbBuUfF"))
            triple = name.string[quote : quote + 3] in ('"""', "'''")
            start = (start[0], start[1] + quote + (3 if triple else 1))
        offset = _offset(starts, start)
        if isinstance(key, str) and offset is not None:
            reads.setdefault(key, offset)
    return reads


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _offset(starts: list[int], start: tuple[int, int]) -> int | None:
    """Offset in the source of a token position in the wrapped text (line 1 has the
    opening parenthesis in front)."""
    line, column = start
    if not 1 <= line <= len(starts):
        return None
    return starts[line - 1] + column - (1 if line == 1 else 0)


@lru_cache(maxsize=4)
def _template_tokens(source: str) -> tuple[tuple[str, str, int], ...] | None:
    """Every token of a template with its offset: (type, text, offset).

    Jinja's lexer gives lines, not columns; each token's text is found in the source from
    where the previous one ended (tokens come in order, and whitespace that ``-`` strips
    is simply skipped).
    """
    tokens: list[tuple[str, str, int]] = []
    position = 0
    try:
        for _, kind, text in environment().lexer.tokeniter(source, None):
            found = source.find(text, position)
            if found < 0:
                return None
            tokens.append((kind, text, found))
            position = found + len(text)
    except Exception:  # any lexer failure only means "no position"
        return None
    return tuple(tokens)


def template_read_offset(source: str, key: str) -> int | None:
    """Offset of the first ``state.<key>`` or ``state['<key>']`` in a template: of the
    key's name (after the quote for a subscript)."""
    return _template_reads(source).get(key)


@lru_cache(maxsize=16)  # a template with many undeclared keys is lexed once
def _template_reads(source: str) -> dict[str, int]:
    """Every key the template reads, with the offset of its first read."""
    tokens = [t for t in _template_tokens(source) or () if t[0] != "whitespace"]
    reads: dict[str, int] = {}
    for i, (kind, text, _) in enumerate(tokens[:-2]):
        if kind != "name" or text != "state":
            continue
        (_, op, _), (name_kind, name, offset) = tokens[i + 1], tokens[i + 2]
        if op == "." and name_kind == "name":
            reads.setdefault(name, offset)
        elif op == "[" and name_kind == "string":
            key = _literal(name)
            if isinstance(key, str):
                reads.setdefault(key, offset + 1)
    return reads


def template_error_offset(source: str, error: TemplateCompileError) -> int:
    """Where a template compile error points: at the name an "unknown name, filter or
    test" error is about, otherwise at the first character of its line written."""
    starts = _line_offsets(source)
    line = min(max(error.line, 1), len(starts))
    line_start = starts[line - 1]
    line_end = starts[line] - 1 if line < len(starts) else len(source)
    named = _NAMED_ERROR.search(error.message)
    if named is not None:
        for kind, text, offset in _template_tokens(source) or ():
            if kind == "name" and text == named.group(1) and line_start <= offset <= line_end:
                return offset
    text = source[line_start:line_end]
    return line_start + len(text) - len(text.lstrip())
