"""Read YAML into a tree of positioned nodes, safely and in bounded time and memory.

PyYAML's composer is recursive (a C stack overflow at ~100,000 levels of ``[[[...``) and
its constructor keeps the last of two duplicate keys and reads ``no`` as False. So we take
only libyaml's *event* stream (an iterative parser) and compose the nodes here:

- every node keeps its 1-based line and column;
- a key written twice in one mapping is PF003, naming the line of the first one;
- plain scalars are resolved by the YAML 1.2 core schema: only ``true``/``false`` (any
  case) are booleans, ``yes``/``no``/``on``/``off`` stay strings, and there are no
  timestamps or sexagesimal numbers;
- tags that build objects (``!!python/...``, ``!custom``) are refused;
- nesting deeper than :data:`MAX_DEPTH` stops the parse early (no deep recursion anywhere);
- an alias is the *same* node, never a copy, and the size the document would have with
  every alias expanded is computed once per node; past :data:`MAX_EXPANDED_NODES` the file
  is refused, so a "billion laughs" file costs what its text costs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

try:  # libyaml's C parser when present; the pure-Python one otherwise
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML wheels ship libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

MAX_DEPTH = 64
MAX_EXPANDED_NODES = 2_000_000

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = re.compile(r"^(?:true|false)$", re.IGNORECASE)
_INT10 = re.compile(r"^[-+]?[0-9]+$")
_INT8 = re.compile(r"^0o[0-7]+$")
_INT16 = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")

#: The first characters a plain scalar that is not a string can start with.
_NON_STRING_STARTS = frozenset("0123456789+-.~nNtTfF")
#: The letters among them: a plain scalar starting with one is null, a boolean or a string.
_WORD_STARTS = frozenset("nNtTfF")

_STD = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_STD}{t}" for t in ("str", "int", "float", "bool", "null")}
_MERGE_TAG = f"{_STD}merge"


class YamlProblem(Exception):
    """A reason the file cannot be read as a workflow; carries a code and a position."""

    def __init__(self, code: str, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.column = column


@dataclass(eq=False, slots=True)
class Node:
    """Base of the three node kinds; ``line``/``column`` are 1-based."""

    line: int
    column: int


@dataclass(eq=False, slots=True)
class Scalar(Node):
    value: Any
    text: str = ""
    style: str | None = None  # None for plain; one of ' " | > otherwise


@dataclass(eq=False, slots=True)
class Sequence(Node):
    items: list[Node] = field(default_factory=list)
    #: The plain Python list, set by :func:`compose` as it closes the node (None otherwise).
    data: list[Any] | None = None


@dataclass(eq=False, slots=True)
class Mapping(Node):
    #: (key, value) pairs in the order written; keys are scalars holding strings.
    pairs: list[tuple[Scalar, Node]] = field(default_factory=list)
    #: The plain Python dict, set by :func:`compose` as it closes the node (None otherwise).
    data: dict[str, Any] | None = None
    #: Whether ``pairs`` has a merge key (``<<``), as :func:`compose` found while pairing
    #: them; ``None`` for a mapping made otherwise (a reader must look).
    merges: bool | None = None

    def get(self, key: str) -> Node | None:
        for k, v in self.pairs:
            if k.value == key:
                return v
        return None

    def key(self, key: str) -> Scalar | None:
        for k, _ in self.pairs:
            if k.value == key:
                return k
        return None


@dataclass(slots=True)
class Document:
    """A composed document: its root, the problems found while composing it, and the root
    as plain Python data (what :func:`to_python` gives for it, built in the same pass)."""

    root: Node | None
    problems: list[YamlProblem]
    data: Any = None


def resolve_plain(text: str) -> Any:
    """The value of a plain (unquoted, untagged) scalar under the YAML 1.2 core schema."""
    if text and text[0] not in _NON_STRING_STARTS:  # fast path: most scalars are words
        return text
    if _NULL.match(text):
        return None
    if _BOOL.match(text):
        return text.lower() == "true"
    if text[0] in _WORD_STARTS:  # no number starts with a letter (to, tools, type...)
        return text
    if _INT10.match(text):
        return int(text) if len(text) <= 4000 else text
    if _INT8.match(text):
        return int(text[2:], 8)
    if _INT16.match(text):
        return int(text[2:], 16)
    if _FLOAT.match(text):
        return float(text)
    if _INF.match(text):
        return -math.inf if text.startswith("-") else math.inf
    if _NAN.match(text):
        return math.nan
    return text


def _explicit(tag: str, text: str, line: int, column: int) -> Any:
    """The value of a scalar with a standard tag (``!!str 1``, ``!!int "3"``)."""
    kind = tag[len(_STD) :]
    if kind == "str":
        return text
    value = resolve_plain(text)
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "null": value is None,
    }[kind]
    if not ok:
        raise YamlProblem("PF002", f"'{text}' is not a valid !!{kind}", line, column)
    return float(value) if kind == "float" else value


def _pos(event: Any) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def compose(text: str) -> Document:
    """Compose the single document in ``text``.

    Problems that stop reading (syntax errors, too deep, unknown alias, bad tag, alias
    bomb, several documents) are raised as :class:`YamlProblem`; duplicate keys are
    collected in the returned document and composition goes on, so every one is reported.
    """
    problems: list[YamlProblem] = []
    anchors: dict[str, Node] = {}
    # The open collections, innermost last: (its items so far, line, column, anchor). A
    # collection's node is made when it closes, with its items and its plain data, in one
    # call (its anchor is usable only from then on, as YAML wants).
    stack: list[tuple[list[Any], int, int, str | None]] = []
    items: list[Any] | None = None  # the items of the innermost open collection
    root: Node | None = None
    documents = 0
    # Nodes made, keys left out (an upper bound of the nodes the expansion check counts),
    # and whether any alias was seen: a tree without aliases expands to 2 * nodes - 1, so
    # most files skip the expansion check below, which costs a second walk over every node.
    made = 0
    aliased = False
    # Dispatch on the exact event class, most frequent first (libyaml makes exactly these
    # classes): a chain of isinstance calls was a third of the time spent composing.
    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    mapping_start, sequence_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
    mapping_end, sequence_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
    document_start = yaml.DocumentStartEvent
    non_string_starts, word_starts = _NON_STRING_STARTS, _WORD_STARTS
    scalar = Scalar
    try:
        # The loader's get_event() gives None after the last event: iterating on it directly
        # skips yaml.parse's generator, which made two calls per event.
        events: Iterator[Any] = iter(_Loader(text).get_event, None)
        for event in events:
            kind = type(event)
            node: Node
            if kind is scalar_event:
                # _scalar's commonest case inlined (a plain untagged word, e.g. a key):
                # no call to it nor to resolve_plain for most scalars of a file. A word
                # starting with a letter of null/true/false is one of those only at 4 to 6
                # characters (``$`` allows a last newline): "to", "transitions"... are not.
                # (An untagged plain scalar is always plain-implicit: libyaml and PyYAML's
                # parser both say so, so ``implicit`` is not read here.)
                text_ = event.value
                mark = event.start_mark
                if (
                    event.tag is None
                    and not event.style
                    and text_
                    and (
                        text_[0] not in non_string_starts
                        or (text_[0] in word_starts and not 4 <= len(text_) <= 6)
                    )
                    and mark is not None
                ):
                    node = scalar(mark.line + 1, mark.column + 1, text_, text_, None)
                else:
                    node = _scalar(event)
                made += 1
                if event.anchor is not None:
                    anchors[event.anchor] = node
            elif kind is mapping_end:
                pending, line, column, anchor = stack.pop()
                items = stack[-1][0] if stack else None
                # The pairs and the plain data in one pass (children close before their
                # parent, and an alias names a closed node: no second walk in to_python).
                # Keys that are strings, none repeated, no merge key: the commonest case;
                # anything else is done again by _pairs from the start.
                pairs: list[tuple[Scalar, Node]] = []
                plain: dict[str, Any] = {}
                pending_items = iter(pending)
                for key, value in zip(pending_items, pending_items, strict=False):
                    if type(key) is not scalar:
                        break
                    name = key.value
                    if type(name) is not str or name in plain or (
                        name == "<<" and key.style is None
                    ):
                        break
                    plain[name] = value.value if type(value) is scalar else value.data
                    pairs.append((key, value))
                else:
                    node = Mapping(line, column, pairs, plain, False)
                    made -= len(pairs)  # keys are not part of the expanded size
                    if anchor is not None:
                        anchors[anchor] = node
                    if items is not None:
                        items.append(node)
                    else:
                        root = node
                    continue
                pairs, merged = _pairs(pending, problems)
                closed = Mapping(line, column, pairs, merged, merged is None)
                if merged is None:
                    closed.data = _data(closed)
                made -= len(pairs)
                if anchor is not None:
                    anchors[anchor] = closed
                node = closed
            elif kind is sequence_end:
                pending, line, column, anchor = stack.pop()
                items = stack[-1][0] if stack else None
                node = Sequence(
                    line,
                    column,
                    pending,
                    [c.value if type(c) is scalar else c.data for c in pending],
                )
                if anchor is not None:
                    anchors[anchor] = node
            elif kind is mapping_start or kind is sequence_start:
                mark = event.start_mark
                line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
                if event.tag is not None:
                    _check_collection_tag(event, line, column)
                if len(stack) >= MAX_DEPTH:
                    raise YamlProblem(
                        "PF103",
                        f"nested more than {MAX_DEPTH} levels deep; "
                        "no workflow needs that, so the file is not read further",
                        line,
                        column,
                    )
                made += 1
                items = []
                stack.append((items, line, column, event.anchor))
                continue
            elif kind is alias_event:
                target = anchors.get(event.anchor or "")
                if target is None:
                    line, column = _pos(event)
                    raise YamlProblem(
                        "PF002", f"unknown alias '*{event.anchor}'", line, column
                    )
                aliased = True
                node = target
            elif kind is document_start:
                documents += 1
                if documents > 1:
                    line, column = _pos(event)
                    raise YamlProblem(
                        "PF004",
                        "more than one YAML document; a workflow file holds exactly one",
                        line,
                        column,
                    )
                continue
            else:
                continue
            if items is not None:
                items.append(node)
            else:
                root = node
    except yaml.reader.ReaderError as exc:
        line, column = _line_column(text, exc.position)
        char = exc.character
        shown = f"#x{char:04x}" if isinstance(char, int) else repr(char)
        raise YamlProblem(
            "PF002", f"YAML syntax error: {exc.reason} ({shown})", line, column
        ) from None
    except yaml.MarkedYAMLError as exc:
        raise _syntax_problem(text, exc) from None
    except yaml.YAMLError as exc:
        raise YamlProblem("PF002", f"YAML syntax error: {exc}", 1, 1) from None
    if root is not None and (aliased or 2 * made - 1 > MAX_EXPANDED_NODES):
        _check_expansion(root)
    data = None if root is None else root.value if type(root) is Scalar else root.data  # type: ignore[attr-defined]
    return Document(root, problems, data)


#: libyaml's complaints about indentation, and what they mean in a workflow file.
_INDENT_HINTS = {
    "did not find expected key": (
        "this line is not indented like the keys of the mapping that starts on line {line}: "
        "indent it exactly as far as its sibling keys (column {column}), or further to "
        "nest it under the key above"
    ),
    "did not find expected '-' indicator": (
        "this line is inside the list that starts on line {line} but is not one of its "
        "items: start it with '- ' under the other items (column {column}), or, for a key of "
        "the item above, line it up with that item's first key"
    ),
    "mapping values are not allowed in this context": (
        "YAML reads this line as the continuation of the value above: a key indented "
        "further than the key before it; line it up with its sibling keys"
    ),
}
_DASH_HINT = (
    "a list item ('- ') that does not line up with the mapping around it (line {line}): put "
    "the list under its key, with every '- ' at the same column"
)
_COLON_HINT = "a value that contains ': ' must be quoted (\"a: b\")"
_TAB_HINT = "a tab character: YAML indents with spaces, never tabs; replace it with spaces"


def _syntax_problem(text: str, exc: yaml.MarkedYAMLError) -> YamlProblem:
    """PF002 for a libyaml error: its position and text, with a hint in our words for the
    mistakes people make (a tab, a key or a list item indented wrongly)."""
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = exc.problem or exc.context or "invalid YAML"
    message = f"YAML syntax error: {problem}"
    # libyaml does not count a byte-order mark in its indices
    index = (mark.index if mark is not None else 0) + (1 if text.startswith("\ufeff") else 0)
    line_start = max(text.rfind("\n", 0, index) + 1, 1 if text.startswith("\ufeff") else 0)
    indentation = text[line_start:index] if 0 <= index <= len(text) else ""
    char = text[index] if 0 <= index < len(text) else ""
    if char == "\t" or ("tab" in problem and "\t" in indentation):
        if char != "\t":  # the first tab in the line's indentation
            column = indentation.index("\t") + 1
        return YamlProblem("PF002", f"YAML syntax error: {_TAB_HINT} ({problem})", line, column)
    context = exc.context_mark
    where = {
        "line": context.line + 1 if context is not None else line,
        "column": context.column + 1 if context is not None else column,
    }
    hint = _INDENT_HINTS.get(problem or "")
    if problem == "did not find expected key" and char == "-":
        hint = _DASH_HINT
    elif problem == "mapping values are not allowed in this context" and ": " in indentation:
        hint = _COLON_HINT
    if hint is not None:
        message += "; " + hint.format(**where)
    return YamlProblem("PF002", message, line, column)


def _line_column(text: str, position: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, position) + 1
    return text.count("\n", 0, position) + 1, position - start + 1


def _scalar(event: Any) -> Scalar:
    mark = event.start_mark  # _pos(event), inlined: this runs for every scalar
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    tag = event.tag
    text: str = event.value
    style = event.style or None  # libyaml reports plain as ''
    if tag is None or tag == "!":
        value = resolve_plain(text) if style is None and event.implicit[0] else text
    elif tag in _SCALAR_TAGS:
        value = _explicit(tag, text, line, column)
    else:
        raise YamlProblem(
            "PF103",
            f"tag '{tag}' is not allowed: workflow files hold plain data only",
            line,
            column,
        )
    return Scalar(line, column, value, text, style)


def _check_collection_tag(event: Any, line: int, column: int) -> None:
    tag = event.tag
    if tag in (None, "!", f"{_STD}seq", f"{_STD}map"):
        return
    raise YamlProblem(
        "PF103", f"tag '{tag}' is not allowed: workflow files hold plain data only", line, column
    )


def _pairs(
    flat: list[Node], problems: list[YamlProblem]
) -> tuple[list[tuple[Scalar, Node]], dict[str, Any] | None]:
    """Pair up a mapping's items, turning keys into strings and flagging duplicates; with
    the mapping's plain data built in the same pass (``None`` when it has a merge key:
    :func:`_data` then applies the merge)."""
    pairs: list[tuple[Scalar, Node]] = []
    data: dict[str, Any] = {}  # also the names seen so far, for duplicates
    merged = False
    items = iter(flat)
    for key, value in zip(items, items, strict=False):  # pairs in order; an odd last dropped
        if not isinstance(key, Scalar):
            raise YamlProblem(
                "PF103", "a mapping key must be a plain string, not a collection",
                key.line, key.column,
            )
        written, style = key.value, key.style
        if style is None and written == "<<":
            merge = Scalar(key.line, key.column, "<<", "<<", None)
            pairs.append((merge, value))
            merged = True
            continue
        name = key.text if style is None else str(written)
        if name in data:
            first = next(
                k for k, _ in pairs if k.value == name and not (k.style is None and name == "<<")
            )
            problems.append(
                YamlProblem(
                    "PF003",
                    f"duplicate key '{name}' (first written on line {first.line}); "
                    "YAML readers would silently keep only one of them",
                    key.line,
                    key.column,
                )
            )
            continue
        # a key already holding its name as a string is kept as it is (most keys)
        keyed = (
            key if type(written) is str and written == name
            else Scalar(key.line, key.column, name, key.text, style)
        )
        data[name] = value.value if type(value) is Scalar else value.data  # type: ignore[attr-defined]
        pairs.append((keyed, value))
    return pairs, (None if merged else data)


def _check_expansion(root: Node) -> None:
    """Refuse documents whose aliases expand past :data:`MAX_EXPANDED_NODES`.

    Sizes are computed bottom-up, once per distinct node, without recursion.
    """
    size: dict[int, int] = {}
    todo: list[tuple[Node, bool]] = [(root, False)]
    while todo:
        node, ready = todo.pop()
        if id(node) in size:
            continue
        children: list[Node]
        if isinstance(node, Sequence):
            children = node.items
        elif isinstance(node, Mapping):
            children = [v for _, v in node.pairs]
        else:
            size[id(node)] = 1
            continue
        if ready:
            total = 1 + sum(size[id(c)] for c in children) + len(children)
            if total > MAX_EXPANDED_NODES:
                raise YamlProblem(
                    "PF002",
                    f"aliases expand this value to more than {MAX_EXPANDED_NODES:,} nodes "
                    "(an alias bomb?)",
                    node.line,
                    node.column,
                )
            size[id(node)] = total
        else:
            todo.append((node, True))
            todo.extend((c, False) for c in children if id(c) not in size)


def to_python(node: Node) -> Any:
    """Plain Python data for ``node``: dicts, lists and scalars, merge keys applied.

    An aliased node becomes one shared object; callers only read the result.
    """
    if type(node) is Scalar:
        return node.value
    # Only collections go through the stack and the table of finished values; a scalar
    # (most nodes) is read in place by its parent.
    done: dict[int, Any] = {}
    todo: list[tuple[Node, bool]] = [(node, False)]
    while todo:
        current, ready = todo.pop()
        if id(current) in done:
            continue
        if not ready:
            todo.append((current, True))
            if isinstance(current, Sequence):
                for c in current.items:
                    if type(c) is not Scalar and id(c) not in done:
                        todo.append((c, False))
            elif isinstance(current, Mapping):
                for _, c in current.pairs:
                    if type(c) is not Scalar and id(c) not in done:
                        todo.append((c, False))
            continue
        if isinstance(current, Sequence):
            done[id(current)] = [
                c.value if type(c) is Scalar else done[id(c)] for c in current.items
            ]
        elif isinstance(current, Mapping):
            done[id(current)] = _merged(current, done)
    return done[id(node)]


def _data(mapping: Mapping) -> dict[str, Any]:
    """:func:`_merged` for a mapping whose collections already hold their ``data``."""
    result: dict[str, Any] = {}
    merge = False
    for key, value in mapping.pairs:
        if key.value == "<<" and key.style is None:
            merge = True
            continue
        result[key.value] = value.value if type(value) is Scalar else value.data  # type: ignore[attr-defined]
    if not merge:
        return result
    merged: dict[str, Any] = {}
    for key, value in mapping.pairs:
        if key.value == "<<" and key.style is None:
            sources = value.items if isinstance(value, Sequence) else [value]
            for source in sources:
                data = source.value if type(source) is Scalar else source.data  # type: ignore[attr-defined]
                if isinstance(data, dict):
                    for k, v in data.items():
                        merged.setdefault(k, v)
    for k, v in merged.items():
        result.setdefault(k, v)
    return result


def _merged(mapping: Mapping, done: dict[int, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    merged: dict[str, Any] = {}
    for key, value in mapping.pairs:
        if key.value == "<<" and key.style is None:
            sources = value.items if isinstance(value, Sequence) else [value]
            for source in sources:
                data = source.value if type(source) is Scalar else done[id(source)]
                if isinstance(data, dict):
                    for k, v in data.items():
                        merged.setdefault(k, v)
            continue
        result[key.value] = value.value if type(value) is Scalar else done[id(value)]
    for k, v in merged.items():
        result.setdefault(k, v)
    return result
