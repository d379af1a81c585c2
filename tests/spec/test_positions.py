"""Diagnostics inside a guard or a template point at the offending character of the file.

A guard or template is the *value* of a YAML scalar, which is not the text of the file:
quotes are doubled (``''``), escapes (``\\t``, ``\\u00e9``) stand for one character, folded
and plain scalars join lines, block scalars drop their indentation. The properties below
write the same expression in every scalar style, with random line folding, escapes,
indentation indicators, chomping, anchors, tags and comments, and check that PF300,
PF301, PF302 and PF303 name the line and column where the offending name starts.
"""

from __future__ import annotations

import re

import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.loader import check_text
from phaseflow.spec.scalar_positions import SourceText

PARENT = 8  # the column (0-based) of the `when:` / `instructions:` key below

GUARD_FILE = """\
phaseflow: 1
name: positions
initial: start
state:
  amount: {{type: number}}
  name: {{type: string}}
  note: {{type: string}}
  tags: {{type: array}}
phases:
  start:
    goal: Begin.
    transitions:
      - to: done
        when: {scalar}
  done:
    goal: Finish.
    terminal: true
"""

FLOW_GUARD_FILE = """\
phaseflow: 1
name: positions
initial: start
state:
  amount: {{type: number}}
  name: {{type: string}}
  note: {{type: string}}
  tags: {{type: array}}
phases:
  start:
    goal: Begin.
    transitions: [{{to: done,
        when: {scalar}}}]
  done:
    goal: Finish.
    terminal: true
"""

TEMPLATE_FILE = """\
phaseflow: 1
name: positions
initial: start
state:
  customer: {{type: string}}
phases:
  start:
    goal: Begin.
    terminal: true
    instructions: {scalar}
"""

# --- writing a value as a YAML scalar, in a random style -----------------------------


def _fold_spaces(draw: st.DrawFn, line: str, indent: str, extra: int = 2) -> str:
    """Replace some single spaces between two non-blanks by a line break (a fold)."""
    out: list[str] = []
    for i, char in enumerate(line):
        single = (
            char == " " and 0 < i < len(line) - 1
            and line[i - 1] not in " \t" and line[i + 1] not in " \t"
        )
        if single and draw(st.integers(0, 3)) == 0:
            out.append("\n" + indent + " " * draw(st.integers(0, extra)))
        else:
            out.append(char)
    return "".join(out)


def _runs(value: str) -> list[str]:
    """``value`` cut into text and runs of line breaks: text, breaks, text, ..."""
    return re.split(r"(\n+)", value)


def _flow_lines(draw: st.DrawFn, value: str, indent: str, escape: dict[str, str]) -> str:
    """A value as the inside of a plain or single-quoted scalar: a run of k line breaks
    is written as k + 1 (the first one alone would fold into a space), some spaces as
    folds."""
    out: list[str] = []
    for i, part in enumerate(_runs(value)):
        if i % 2:
            out.append("\n" * (len(part) + 1) + indent)
        else:
            out.append(_fold_spaces(draw, "".join(escape.get(c, c) for c in part), indent))
    return "".join(out)


def plain(draw: st.DrawFn, value: str, indent: str) -> str:
    assume("\n " not in value and " \n" not in value and "\t\n" not in value)
    assume("\n\t" not in value and not value.startswith((" ", "\t", "\n")))
    assume(not value.endswith((" ", "\t", "\n")) and ": " not in value and " #" not in value)
    assume(value[:1] not in "-?:,[]{}#&*!|>'\"%@`")
    return _flow_lines(draw, value, indent, {})


def single(draw: st.DrawFn, value: str, indent: str) -> str:
    assume("\n " not in value and " \n" not in value and "\t\n" not in value)
    assume("\n\t" not in value)
    return "'" + _flow_lines(draw, value, indent, {"'": "''"}) + "'"


def double(draw: st.DrawFn, value: str, indent: str) -> str:
    out: list[str] = ['"']
    for i, char in enumerate(value):
        free = (
            0 < i < len(value) - 1 and value[i - 1] not in " \t\n"
            and value[i + 1] not in " \t\n"
        )
        in_word = i and (value[i - 1].isalnum() or value[i - 1] == "_")
        if i and not in_word and draw(st.integers(0, 5)) == 0:
            out.append("\\\n" + indent)  # an escaped line break: nothing is added
            if char in " \t":
                out.append("\\ " if char == " " else "\\t")
                continue
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\n\n" + indent if free and draw(st.booleans()) else "\\n")
        elif char == "\t":
            out.append(draw(st.sampled_from(["\\t", "\\x09", "\\u0009", "\\\t"])))
        elif char == " " and free and draw(st.integers(0, 3)) == 0:
            out.append("\n" + indent)
        elif ord(char) > 127:
            code = ord(char)
            out.append(draw(st.sampled_from(
                [char, f"\\u{code:04x}", f"\\U{code:08x}"]
                + ([f"\\x{code:02x}"] if code < 256 else [])
            )))
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def block(draw: st.DrawFn, value: str, folded: bool) -> str:
    """A literal or folded block scalar, without its last line break (the file's)."""
    assume(all(c >= " " or c in "\t\n" for c in value))
    assume(value.strip(" \t\n") and not value.startswith("\n"))
    body = value.rstrip("\n")
    trailing = len(value) - len(body)
    chomp = "-" if trailing == 0 else "" if trailing == 1 else "+"
    if trailing == 1 and draw(st.booleans()):
        chomp = "+"  # keeping one trailing break is what clipping does too
    parts = _runs(body)
    texts = parts[::2]
    assume(all(t.strip(" \t") for t in texts))  # no all-blank line
    content = " " * (PARENT + draw(st.integers(1, 3)))
    needs_indicator = texts[0][:1] in (" ", "\t")
    indicator = str(len(content) - PARENT) if needs_indicator or draw(st.booleans()) else ""
    header = (">" if folded else "|") + (
        indicator + chomp if draw(st.booleans()) else chomp + indicator
    )
    if draw(st.booleans()):
        header += "  # a comment"
    out = [header, "\n"]
    for i, part in enumerate(parts):
        if i % 2 == 0:
            if folded and part[0] not in " \t":
                part = _fold_spaces(draw, part, content, extra=0)
            out.append(content + part)
            continue
        before, after = parts[i - 1], parts[i + 1]
        folds = folded and before[0] not in " \t" and after[0] not in " \t"
        out.append("\n" * (len(part) + (1 if folds else 0)))
    out.append("\n" * max(trailing - 1, 0))
    return "".join(out)


@st.composite
def scalars(draw: st.DrawFn, value: str, blocks: bool = True) -> str:
    """``value`` written as a YAML scalar whose first line follows a key at PARENT."""
    indent = " " * (PARENT + draw(st.integers(1, 3)))
    styles = ["plain", "single", "double"] + (["literal", "folded"] if blocks else [])
    style = draw(st.sampled_from(styles))
    event(style)
    if style == "plain":
        written = plain(draw, value, indent)
    elif style == "single":
        written = single(draw, value, indent)
    elif style == "double":
        written = double(draw, value, indent)
    else:
        written = block(draw, value, style == "folded")
    prefix = draw(st.sampled_from(["", "&anchor ", "!!str ", "&a !!str ", "!!str\n" + indent]))
    if prefix.endswith(indent) and style in ("literal", "folded"):
        prefix = "!!str "
    return prefix + written


def _parsed_value(text: str, key: str) -> object:
    data = yaml.safe_load(text)
    phase = data["phases"]["start"]
    return phase[key] if key == "instructions" else phase["transitions"][0]["when"]


def _pointed_at(text: str, diagnostic: Diagnostic) -> str:
    index = SourceText(text).index_of(diagnostic.line, diagnostic.column)
    line_start = text.rfind("\n", 0, index) + 1
    assert text.count("\n", 0, index) + 1 == diagnostic.line  # the column is on its line
    assert index - line_start + 1 == diagnostic.column
    return text[index:]


# --- the values -----------------------------------------------------------------------

FRAGMENTS = [
    "state.amount > 1",
    "state.name == 'é'",
    "state.name == 'it''s'",
    "state.note != 'a\tb'",
    "'x' in state.tags",
    'state.name != "q\\"uote"',
    "turn >= 3",
    "not state.amount",
    "len(state.tags) == 2",
    "state.note == 'ünï ċödé'",
]
JOINS = [" and ", " or ", "\nand ", " and\n", "\tand ", " or  ", " and\n\n", "\n  or "]


@st.composite
def guards_around(draw: st.DrawFn, middle: str) -> tuple[str, int]:
    """A guard with ``middle`` somewhere in it, and the offset of ``middle``."""
    left = draw(st.lists(st.sampled_from(FRAGMENTS), max_size=3))
    right = draw(st.lists(st.sampled_from(FRAGMENTS), max_size=3))
    parts = [*left, middle, *right]
    joins = [draw(st.sampled_from(JOINS)) for _ in parts[1:]]
    source = parts[0]
    for join, part in zip(joins, parts[1:], strict=True):
        source += join + part
    lead = draw(st.sampled_from(["", "", "  ", "\t"]))
    tail = draw(st.sampled_from(["", "", "\n", " ", "\n\n"]))
    return lead + source + tail, 0


SETTINGS = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@st.composite
def guard_files(draw: st.DrawFn, middle: str) -> tuple[str, str]:
    source, _ = draw(guards_around(middle))
    flow = draw(st.integers(0, 4)) == 0
    scalar = draw(scalars(source, blocks=not flow))
    text = (FLOW_GUARD_FILE if flow else GUARD_FILE).format(scalar=scalar)
    try:
        parsed = _parsed_value(text, "when")
    except yaml.YAMLError:
        parsed = None
    assume(parsed == source)  # the writer above made a scalar YAML reads back as ``source``
    return text, source


@SETTINGS
@given(guard_files("zzq_bogus"))
def test_pf300_points_at_the_offending_name_in_every_style(case: tuple[str, str]) -> None:
    text, _ = case
    found = [d for d in check_text(text).diagnostics if d.code == "PF300"]
    assert len(found) == 1, (text, found)
    assert "unknown name 'zzq_bogus'" in found[0].message
    assert _pointed_at(text, found[0]).startswith("zzq_bogus"), (text, found[0])


@SETTINGS
@given(st.sampled_from(["state.amout > 2", "state['amout'] > 2", 'state["amout"] > 2']).flatmap(
    guard_files))
def test_pf301_points_at_the_key_in_every_style(case: tuple[str, str]) -> None:
    text, _ = case
    found = [d for d in check_text(text).diagnostics if d.code == "PF301"]
    assert len(found) == 1, (text, found)
    assert _pointed_at(text, found[0]).startswith("amout"), (text, found[0])


TEMPLATE_LINES = [
    "Greet the customer.",
    "Be polite: it's {{ phase.name }}.",
    "  (indented) {{ turn }}",
    "Ünïcödé \"quoted\" text",
    "a\ttab",
    "",
]


@st.composite
def template_files(draw: st.DrawFn, middle: str) -> tuple[str, str]:
    before = draw(st.lists(st.sampled_from(TEMPLATE_LINES), max_size=3))
    after = draw(st.lists(st.sampled_from(TEMPLATE_LINES), max_size=3))
    source = "\n".join(["Hello", *before, middle, *after])
    source += draw(st.sampled_from(["", "\n", "\n\n"]))
    scalar = draw(scalars(source))
    text = TEMPLATE_FILE.format(scalar=scalar)
    try:
        parsed = _parsed_value(text, "instructions")
    except yaml.YAMLError:
        parsed = None
    assume(parsed == source)
    return text, source


@SETTINGS
@given(template_files("Dear {{ state.custmer }}, welcome"))
def test_pf303_points_at_the_key_in_every_style(case: tuple[str, str]) -> None:
    text, _ = case
    found = [d for d in check_text(text).diagnostics if d.code == "PF303"]
    assert len(found) == 1, (text, found)
    assert _pointed_at(text, found[0]).startswith("custmer"), (text, found[0])


@SETTINGS
@given(template_files("Dear {{ stat.customer }}, welcome"))
def test_pf302_points_at_the_unknown_name_in_every_style(case: tuple[str, str]) -> None:
    text, _ = case
    found = [d for d in check_text(text).diagnostics if d.code == "PF302"]
    assert len(found) == 1, (text, found)
    pointed = _pointed_at(text, found[0])
    assert pointed.startswith("stat") and pointed[4] != "e", (text, found[0])


@SETTINGS
@given(template_files("{% if state.customer %}broken{% endfi %}"))
def test_pf302_syntax_error_names_the_line_in_every_style(case: tuple[str, str]) -> None:
    text, _ = case
    found = [d for d in check_text(text).diagnostics if d.code == "PF302"]
    assert len(found) == 1, (text, found)
    # at the first character of the template line holding the broken tag
    assert _pointed_at(text, found[0]).startswith("{"), (text, found[0])


# --- the cases the issue names, written out -------------------------------------------


def _one(text: str, code: str) -> Diagnostic:
    found = [d for d in check_text(text).diagnostics if d.code == code]
    assert len(found) == 1, found
    return found[0]


def _guard(scalar: str) -> str:
    return GUARD_FILE.format(scalar=scalar)


def test_single_quoted_with_doubled_quotes() -> None:
    text = _guard("'state.name == ''it''''s'' and zzq_bogus'")
    d = _one(text, "PF300")
    assert (d.line, d.column) == (14, 46)
    assert _pointed_at(text, d).startswith("zzq_bogus")


def test_double_quoted_with_escapes() -> None:
    text = _guard('"state.note == \'\\t\\u00e9\' and zzq_bogus"')
    d = _one(text, "PF300")
    assert (d.line, d.column) == (14, 45)
    assert _pointed_at(text, d).startswith("zzq_bogus")


def test_folded_block_column_is_on_the_line() -> None:
    text = _guard(">\n          state.amount > 1 and\n          zzq_bogus")
    d = _one(text, "PF300")
    assert (d.line, d.column) == (16, 11)


def test_folded_block_with_an_empty_line_and_more_indented_lines() -> None:
    text = _guard(">-\n          state.amount > 1\n\n            and\n          zzq_bogus")
    d = _one(text, "PF300")
    assert (d.line, d.column) == (18, 11)


def test_plain_scalar_over_two_lines() -> None:
    text = _guard("state.amount > 1 and\n          zzq_bogus")
    d = _one(text, "PF300")
    assert (d.line, d.column) == (15, 11)


def test_literal_block_with_indentation_indicator_and_keep() -> None:
    text = _guard("|2+\n           state.amount > 1 and\n          zzq_bogus\n")
    d = _one(text, "PF300")
    assert (d.line, d.column) == (16, 11)


def test_crlf_line_ends() -> None:
    text = _guard(">\n          state.amount > 1 and\n          zzq_bogus").replace("\n", "\r\n")
    d = _one(text, "PF300")
    assert (d.line, d.column) == (16, 11)


def test_pf302_in_a_folded_block_names_the_line_of_the_name() -> None:
    text = TEMPLATE_FILE.format(
        scalar=">\n      Greet the customer\n      politely.\n\n      Hello {{ stat.x }}\n"
    )
    d = _one(text, "PF302")
    assert (d.line, d.column) == (14, 16)


def test_pf302_syntax_error_in_a_folded_block_is_at_its_line() -> None:
    text = TEMPLATE_FILE.format(
        scalar=">\n      Greet the customer\n      politely.\n\n      {% if x %}\n"
    )
    d = _one(text, "PF302")
    assert d.line == 14


def test_pf303_in_a_literal_block_points_at_the_key() -> None:
    text = TEMPLATE_FILE.format(scalar="|\n      Hello\n      {{ state['custmer'] }}\n")
    d = _one(text, "PF303")
    assert (d.line, d.column) == (12, 17)


def test_pf301_names_the_first_read_of_the_key() -> None:
    text = _guard("state.amout > 1 or state.amout < 0")
    d = _one(text, "PF301")
    assert (d.line, d.column) == (14, 21)


def test_a_name_in_a_string_is_not_the_read() -> None:
    text = _guard("\"'state.amout' != state.name and state.amout > 1\"")
    d = _one(text, "PF301")
    assert _pointed_at(text, d).startswith("amout > 1")


def test_a_name_in_template_text_is_not_the_read() -> None:
    text = TEMPLATE_FILE.format(scalar="'state.custmer is {{ state.custmer }}'")
    d = _one(text, "PF303")
    assert _pointed_at(text, d).startswith("custmer }}")
