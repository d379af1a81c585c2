"""The one JSON-Schema compiler: a schema compiled once into a check that answers yes/no
fast and explains a no.

Each keyword is compiled in one place (:data:`_KEYWORDS`) into a :class:`_Rule`: ``holds``,
the yes/no a valid value needs and nothing more, and ``why_not``, which names the first
thing wrong as a :class:`Failure` (the keyword, where, what it asked for). Two callers, one
subset of draft 2020-12:

* :mod:`phaseflow.spec.fastschema` checks a workflow file against the schema file, so a
  valid file never imports ``jsonschema`` (~60 ms, a third of ``phaseflow validate``); on a
  no, ``jsonschema`` explains every error with positions. It reads ``holds`` alone.
* :mod:`phaseflow.tools.arguments` checks a model's tool-call arguments: ``holds`` first
  (most calls are valid), and on a no ``why_not``, which it phrases in one short sentence.

The compiler refuses any keyword it does not implement, or a keyword's value of a shape
it does not read (:func:`compile_checker` returns ``None``), so a schema edit can never
silently weaken validation and a schema that is not valid reaches jsonschema, which says
why: the caller then uses jsonschema. Property tests check that both answers give
jsonschema's verdict. The JSON semantics every caller shares (:func:`is_type`,
:func:`json_equal`, :func:`json_type`, from :mod:`phaseflow.expr.describe`, where
messages of lower layers use it too) live here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence, Sized
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from phaseflow.expr.describe import json_type

__all__ = [
    "ANNOTATIONS", "Check", "Checker", "Failure", "Path", "compile_check", "compile_checker",
    "is_type", "json_equal", "json_type", "repeated_item",
]

Check = Callable[[Any], bool]
#: Where a value is inside the checked one: object keys and array indices.
Path = tuple[str | int, ...]
#: The first thing wrong with a value at a path, or ``None`` when it fits.
Explain = Callable[[Any, Path], "Failure | None"]
#: The object keys a keyword evaluated in a value (what ``unevaluatedProperties`` reads).
_Keys = Callable[[Any], AbstractSet[str]]

#: The annotations the workflow schema's check ignores; a caller names its own set.
ANNOTATIONS = frozenset(
    {"description", "title", "$schema", "$id", "$comment", "default", "examples"}
)
_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
#: The types ``is_type`` tests with one isinstance (no bool/number subtlety).
_PLAIN_TYPES: dict[str, type] = {"string": str, "object": dict, "array": list}
#: The evaluated keys of a value that is no object (shared: callers only read it).
_EMPTY: frozenset[str] = frozenset()


class _Unsupported(Exception):
    pass


class Failure(NamedTuple):
    """Why a value does not fit: the ``keyword`` that refused it (``"false"`` for the
    schema ``false``), the ``path`` to the ``value`` it refused, and what the keyword asked
    for (``expected``: the types, the bound, the missing keys...) with its ``detail`` where
    one is needed (the repeated index, the known properties, the key that required)."""

    keyword: str
    path: Path
    value: Any
    expected: Any = None
    detail: Any = None


class Checker(NamedTuple):
    """A compiled schema: ``holds(value)``, the fast yes/no; ``why_not(value, ())``, the
    first failure (``None`` when the value fits; ``()``: the value's path, its root). Both
    may raise :class:`RecursionError` on a value nested too deeply."""

    holds: Check
    why_not: Explain


# -- JSON semantics (draft 2020-12, as jsonschema reads it) --------------------------------

def is_type(value: Any, name: str) -> bool:
    """Is ``value`` of JSON type ``name`` (``1.0`` is an integer, ``true`` no number)?"""
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if name == "number":
        return isinstance(value, int | float)
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    raise _Unsupported(name)


def json_equal(one: Any, two: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0`` (jsonschema's rule)."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(
            json_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, dict) and isinstance(two, dict):
        return len(one) == len(two) and all(
            k in two and json_equal(v, two[k]) for k, v in one.items())
    if isinstance(one, bool) or isinstance(two, bool):
        return False  # one is not the other (checked above), and a bool equals only itself
    if isinstance(one, list | dict) or isinstance(two, list | dict):
        return False
    return bool(one == two)


def _canonical(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (``1`` and ``1.0``; not ``true``)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, list | tuple):
        return ("l", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("d", frozenset((k, _canonical(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:  # not JSON (a set of lists...): never equal to another item
        return ("o", id(value))
    return ("s", value)


def repeated_item(value: list[Any]) -> int | None:
    """The index of the first item JSON-equal to an earlier one, ``None`` when none is."""
    seen: set[Any] = set()
    for index, item in enumerate(value):
        key = _canonical(item)
        if key in seen:
            return index
        seen.add(key)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    """A non-negative integer as the meta-schema reads it (``2.0`` counts)."""
    return is_type(value, "integer") and value >= 0


# -- what a keyword and a schema compile into -----------------------------------------------

class _Rule(NamedTuple):
    """One keyword of one schema, compiled. ``holds`` answers for any value; a rule that
    looks at one ``kind`` of value only (holds for every other) also gives ``inner``, its
    answer for a value known to be of that kind, so a schema of that type checks the type
    once; some also give ``typed``, the type test and theirs in one call, for a schema of
    that type with no other keyword (a name, a list of names, a phase: the common leaves
    and objects of the workflow schema). ``evaluated``: the object keys the keyword
    evaluates (applicators only)."""

    keyword: str
    holds: Check
    why_not: Explain
    kind: type | None = None
    inner: Check | None = None
    evaluated: _Keys | None = None
    typed: Check | None = None


def _no_keys(value: Any) -> AbstractSet[str]:
    return _EMPTY


def _all_keys(value: Any) -> AbstractSet[str]:
    return set(value) if isinstance(value, dict) else _EMPTY


class _Node:
    """A compiled schema. Mutable only while compiling: a ``$defs`` entry is a node before
    it is compiled, so a ``$ref`` back to it (a recursive type) reads it late."""

    __slots__ = ("accepts_all", "evaluated", "holds", "refuses_all", "why_not")

    def __init__(self, rules: Sequence[_Rule] = (), schema: Any = True) -> None:
        self.accepts_all = schema is True or (not rules and schema is not False)
        self.refuses_all = schema is False
        if schema is False:
            self.holds: Check = _never
            self.why_not: Explain = _refuse
        else:
            self.holds = _fused_holds(rules, schema)
            self.why_not = _first_failure(rules)
        self.evaluated: _Keys = _node_keys(rules)

    def become(self, other: _Node) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(other, name))


def _never(value: Any) -> bool:
    return False


def _refuse(value: Any, path: Path) -> Failure:
    return Failure("false", path, value)


def _fused_holds(rules: Sequence[_Rule], schema: Any) -> Check:
    """One check that holds when all ``rules`` do; for a schema of one plain type, the
    type tested once and each rule on that type by its ``inner`` check."""
    kind = _PLAIN_TYPES.get(schema["type"]) if isinstance(schema, dict) and isinstance(
        schema.get("type"), str) else None
    if kind is None:
        return _conjunction([rule.holds for rule in rules])
    others = [rule for rule in rules if rule.keyword != "type"]
    if any(rule.keyword == "properties" for rule in others):
        # the properties' check tests the required keys too (one call per object)
        others = [rule for rule in others if rule.keyword != "required"]
    if len(others) == 1 and others[0].kind is kind and others[0].typed is not None:
        return others[0].typed
    parts = [
        rule.inner if rule.kind is kind and rule.inner is not None else rule.holds
        for rule in others
    ]
    if not parts:
        return lambda v: isinstance(v, kind)
    if len(parts) == 1:
        only = parts[0]
        return lambda v: isinstance(v, kind) and only(v)
    if len(parts) == 2:
        first, second = parts
        return lambda v: isinstance(v, kind) and first(v) and second(v)
    rest = _conjunction(parts)
    return lambda v: isinstance(v, kind) and rest(v)


def _conjunction(checks: list[Check]) -> Check:
    """One check that holds when all of ``checks`` do (the common counts without a loop)."""
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    if len(checks) == 3:
        c0, c1, c2 = checks
        return lambda v: c0(v) and c1(v) and c2(v)
    every = tuple(checks)

    def all_hold(v: Any) -> bool:
        return all(check(v) for check in every)

    return all_hold


def _first_failure(rules: Sequence[_Rule]) -> Explain:
    """The failure of the first rule (in :data:`_KEYWORDS`' order) that refuses. (An
    applicator asks only its members that fail their fast check why: explaining costs
    about one fast check of the value and one walk down the path to what is wrong.)"""
    if not rules:
        return lambda v, path: None
    if len(rules) == 1:
        return rules[0].why_not
    explains = tuple(rule.why_not for rule in rules)

    def why_not(value: Any, path: Path) -> Failure | None:
        for explain in explains:
            failure = explain(value, path)
            if failure is not None:
                return failure
        return None

    return why_not


def _node_keys(rules: Sequence[_Rule]) -> _Keys:
    """The keys a node evaluates in a value it accepts: every key once one of its rules is
    ``unevaluatedProperties`` (it accepts no other), else what its applicators evaluate."""
    if any(rule.keyword == "unevaluatedProperties" for rule in rules):
        return _all_keys
    return _union([rule.evaluated for rule in rules if rule.evaluated is not None])


def _union(parts: Sequence[_Keys]) -> _Keys:
    if not parts:
        return _no_keys
    if len(parts) == 1:
        return parts[0]

    def union(value: Any) -> AbstractSet[str]:
        seen: set[str] = set()
        for keys in parts:
            seen |= keys(value)
        return seen

    return union


class _Schema(NamedTuple):
    """What a keyword's compiler sees: its schema, the rules compiled before it (only
    ``unevaluatedProperties`` reads them) and the compiler, for its subschemas."""

    schema: dict[str, Any]
    earlier: list[_Rule]
    compiler: _Compiler


class _Compiler:
    """Compiles one root schema; its ``$defs`` (only at the root) are compiled once each,
    and ``$ref`` reads ``#/$defs/NAME`` (pydantic's and recursive types' form) only."""

    def __init__(self, root: Any, ignored: AbstractSet[str]) -> None:
        self.root = root
        self.ignored = ignored
        raw = root.get("$defs", {}) if isinstance(root, dict) else {}
        if not isinstance(raw, dict):
            raise _Unsupported("$defs")
        self.raw_defs: dict[str, Any] = raw
        self.defs: dict[str, _Node] = {}

    def compile_root(self) -> _Node:
        for name in self.raw_defs:  # every entry, used or not: jsonschema checks them all
            self.ref(name)
        return self.node(self.root)

    def ref(self, name: str) -> _Node:
        if name not in self.raw_defs:
            raise _Unsupported(f"$ref to {name}")
        node = self.defs.get(name)
        if node is None:
            node = self.defs[name] = _Node()
            node.become(self.node(self.raw_defs[name]))
        return node

    def node(self, schema: Any) -> _Node:
        if schema is True or schema is False:
            return _Node(schema=schema)
        if not isinstance(schema, dict):
            raise _Unsupported(repr(schema))
        keywords = []
        for key in schema:
            if key in _KEYWORDS:
                keywords.append(key)
            elif key not in self.ignored and not (key == "$defs" and schema is self.root):
                raise _Unsupported(key)
        keywords.sort(key=_RANK.__getitem__)
        rules: list[_Rule] = []
        context = _Schema(schema, rules, self)
        for keyword in keywords:
            rule = _KEYWORDS[keyword](schema[keyword], context)
            if rule is not None:
                rules.append(rule)
        return _Node(rules, schema)


def _on_kind(
    keyword: str, kind: type, inner: Check, why_not: Explain, evaluated: _Keys | None = None,
    typed: Check | None = None,
) -> _Rule:
    """A keyword that reads values of ``kind`` alone (``inner``): every other passes."""
    return _Rule(keyword, lambda v: not isinstance(v, kind) or inner(v), why_not, kind, inner,
                 evaluated, typed)


def _value_rule(
    keyword: str, kind: type | None, inner: Check, expected: Any,
    detail: Callable[[Any], Any] | None = None, typed: Check | None = None,
) -> _Rule:
    """A keyword that reads the value alone, not its members: ``inner`` for a value of
    ``kind`` (every other passes), or for any value when ``kind`` is ``None``; a failure
    names ``expected`` (and the ``detail`` of the value)."""
    def why_not(value: Any, path: Path) -> Failure | None:
        if (kind is not None and not isinstance(value, kind)) or inner(value):
            return None
        return Failure(keyword, path, value, expected, None if detail is None else detail(value))

    if kind is None:
        return _Rule(keyword, inner, why_not)
    return _on_kind(keyword, kind, inner, why_not, typed=typed)


# -- the keywords: each compiled here, once --------------------------------------------------

_KeywordCompiler = Callable[[Any, _Schema], "_Rule | None"]


def _type(spec: Any, at: _Schema) -> _Rule:
    if isinstance(spec, str):
        types: tuple[str, ...] = (spec,)
    elif isinstance(spec, list) and spec and all(isinstance(t, str) for t in spec):
        types = tuple(spec)
        if len(set(types)) != len(types):
            raise _Unsupported("repeated types")
    else:
        raise _Unsupported("type")
    if any(t not in _TYPES for t in types):
        raise _Unsupported("type")
    if len(types) == 1 and types[0] in _PLAIN_TYPES:
        plain = _PLAIN_TYPES[types[0]]
        return _value_rule("type", None, lambda v: isinstance(v, plain), types)
    if len(types) == 1:
        only = types[0]
        return _value_rule("type", None, lambda v: is_type(v, only), types)
    return _value_rule("type", None, lambda v: any(is_type(v, k) for k in types), types)


def _ref(spec: Any, at: _Schema) -> _Rule:
    match = re.fullmatch(r"#/\$defs/([^/~%]+)", spec) if isinstance(spec, str) else None
    if match is None:
        raise _Unsupported(f"$ref {spec!r}")
    target = at.compiler.ref(match.group(1))  # maybe still compiling: read it late
    return _Rule(
        "$ref", lambda v: target.holds(v), lambda v, path: target.why_not(v, path),
        evaluated=lambda v: target.evaluated(v),
    )


def _enum(spec: Any, at: _Schema) -> _Rule:
    if not isinstance(spec, list):
        raise _Unsupported("enum")
    options = tuple(spec)
    if options and all(type(o) is str for o in options):
        # only a string equals a string option under JSON equality
        strings = frozenset(options)
        return _value_rule("enum", None, lambda v: type(v) is str and v in strings, options)
    return _value_rule("enum", None, lambda v: any(json_equal(v, o) for o in options), options)


def _const(spec: Any, at: _Schema) -> _Rule:
    return _value_rule("const", None, lambda v: json_equal(v, spec), spec)


def _bound(keyword: str) -> _KeywordCompiler:
    """``minimum`` and friends, written as jsonschema tests them (the error case negated),
    so NaN agrees too."""
    def compile_bound(spec: Any, at: _Schema) -> _Rule:
        if not _is_number(spec):
            raise _Unsupported(keyword)
        bound = spec
        holds: Check = {
            "minimum": lambda v: not _is_number(v) or not v < bound,
            "maximum": lambda v: not _is_number(v) or not v > bound,
            "exclusiveMinimum": lambda v: not _is_number(v) or not v <= bound,
            "exclusiveMaximum": lambda v: not _is_number(v) or not v >= bound,
        }[keyword]
        return _value_rule(keyword, None, holds, bound)

    return compile_bound


def _size(keyword: str, kind: type[Sized], least: bool) -> _KeywordCompiler:
    """``minLength`` and friends: ``kind`` is the value they bound the length of."""
    def compile_size(spec: Any, at: _Schema) -> _Rule:
        if not _is_count(spec):
            raise _Unsupported(keyword)
        limit = int(spec)
        if least:
            return _value_rule(keyword, kind, lambda v: len(v) >= limit, limit,
                               typed=lambda v: isinstance(v, kind) and len(v) >= limit)
        return _value_rule(keyword, kind, lambda v: len(v) <= limit, limit,
                           typed=lambda v: isinstance(v, kind) and len(v) <= limit)

    return compile_size


def _pattern(spec: Any, at: _Schema) -> _Rule:
    if not isinstance(spec, str):
        raise _Unsupported("pattern")
    search = re.compile(spec).search
    return _value_rule("pattern", str, lambda v: search(v) is not None, spec,
                       typed=lambda v: isinstance(v, str) and search(v) is not None)


def _unique(spec: Any, at: _Schema) -> _Rule | None:
    if not isinstance(spec, bool):
        raise _Unsupported("uniqueItems")
    if not spec:
        return None
    return _value_rule("uniqueItems", list, lambda v: repeated_item(v) is None, True,
                       detail=repeated_item)


def _key_list(spec: Any, keyword: str) -> tuple[str, ...]:
    if not isinstance(spec, list) or not all(isinstance(k, str) for k in spec):
        raise _Unsupported(keyword)
    if len(set(spec)) != len(spec):
        raise _Unsupported(keyword)
    return tuple(spec)


def _required(spec: Any, at: _Schema) -> _Rule | None:
    keys = _key_list(spec, "required")
    if not keys:
        return None

    def has_all(v: Any) -> bool:
        for key in keys:  # noqa: SIM110 - a loop, not all(...): no generator per object
            if key not in v:
                return False
        return True

    def why_not(value: Any, path: Path) -> Failure | None:
        if not isinstance(value, dict) or has_all(value):
            return None
        return Failure("required", path, value, tuple(k for k in keys if k not in value))

    return _on_kind("required", dict, has_all, why_not)


def _dependent_required(spec: Any, at: _Schema) -> _Rule | None:
    if not isinstance(spec, dict):
        raise _Unsupported("dependentRequired")
    depends = {key: _key_list(need, "dependentRequired") for key, need in spec.items()}
    depends = {key: need for key, need in depends.items() if need}
    if not depends:
        return None

    def first_missing(v: Any) -> tuple[str, tuple[str, ...]] | None:
        for key, need in depends.items():
            if key in v:
                missing = tuple(d for d in need if d not in v)
                if missing:
                    return key, missing
        return None

    def why_not(value: Any, path: Path) -> Failure | None:
        found = first_missing(value) if isinstance(value, dict) else None
        if found is None:
            return None
        return Failure("dependentRequired", path, value, found[1], found[0])

    def inner(v: Any) -> bool:
        return first_missing(v) is None

    return _on_kind("dependentRequired", dict, inner, why_not)


def _property_names(spec: Any, at: _Schema) -> _Rule | None:
    names = at.compiler.node(spec)
    if names.accepts_all:
        return None
    name_holds = names.holds

    def inner(v: Any) -> bool:
        for key in v:  # noqa: SIM110 - a loop, not all(...): no generator per object
            if not name_holds(key):
                return False
        return True

    def why_not(value: Any, path: Path) -> Failure | None:
        if isinstance(value, dict):
            for key in value:
                if not name_holds(key):
                    return Failure("propertyNames", path, value, key)
        return None

    return _on_kind("propertyNames", dict, inner, why_not)


def _properties(spec: Any, at: _Schema) -> _Rule:
    """``properties`` and ``additionalProperties`` together (the second needs the first)."""
    if not isinstance(spec, dict):
        raise _Unsupported("properties")
    compiler = at.compiler
    known = {key: compiler.node(sub) for key, sub in spec.items()}
    extra = (
        compiler.node(at.schema["additionalProperties"])
        if "additionalProperties" in at.schema else None
    )
    closed = extra is not None and extra.refuses_all
    # a known key mapped to None needs no check (and must not fall to the extra one)
    lookup = {k: (None if n.accepts_all else n.holds) for k, n in known.items()}.get
    extra_holds = None if extra is None or extra.accepts_all else extra.holds

    required = tuple(at.schema.get("required", ()))  # its shape checked by _required

    def typed(v: Any) -> bool:
        """An object with the required keys and these properties, in one call (one per
        phase and per transition); the type test is redundant where it is ``inner``."""
        if not isinstance(v, dict):
            return False
        for key in required:
            if key not in v:
                return False
        for key, item in v.items():
            sub = lookup(key, extra_holds)
            if sub is not None and not sub(item):
                return False
        return True

    names = tuple(known)
    # as lookup: a key mapped to None needs no explanation (nor the extra one's)
    explain = {k: (None if n.accepts_all else n.why_not) for k, n in known.items()}.get
    extra_why_not = None if extra is None or extra.accepts_all else extra.why_not

    def why_not(value: Any, path: Path) -> Failure | None:
        if not isinstance(value, dict):
            return None
        if closed:
            unexpected = tuple(k for k in value if k not in known)
            if unexpected:
                return Failure("additionalProperties", path, value, unexpected, names)
        for key, item in value.items():
            sub = explain(key, extra_why_not)
            if sub is not None:
                failure = sub(item, (*path, key))
                if failure is not None:
                    return failure
        return None

    def evaluated(value: Any) -> AbstractSet[str]:
        if not isinstance(value, dict):
            return _EMPTY
        return set(value) if extra is not None else {k for k in value if k in known}

    return _on_kind("properties", dict, typed, why_not, evaluated, typed)


def _additional_properties(spec: Any, at: _Schema) -> _Rule | None:
    if "properties" in at.schema:
        return None  # compiled with properties
    return _properties({}, at)


def _items(spec: Any, at: _Schema) -> _Rule | None:
    """``prefixItems`` and ``items`` together (``items`` is for what follows the prefix)."""
    prefix_spec = at.schema.get("prefixItems", [])
    if not isinstance(prefix_spec, list) or ("prefixItems" in at.schema and not prefix_spec):
        raise _Unsupported("prefixItems")
    head = tuple(at.compiler.node(sub) for sub in prefix_spec)
    rest = at.compiler.node(spec)
    if rest.accepts_all and all(node.accepts_all for node in head):
        return None
    each = rest.holds
    inner: Check
    typed: Check | None = None
    if not head:
        def typed(v: Any) -> bool:
            """A list of these items, in one call; the type test is redundant where it
            is ``inner``."""
            if not isinstance(v, list):
                return False
            for x in v:  # noqa: SIM110 - a loop, not all(...): no generator per list
                if not each(x):
                    return False
            return True

        inner = typed
    else:
        firsts = tuple(node.holds for node in head)

        def inner(v: Any) -> bool:
            for index, x in enumerate(v):
                if not (firsts[index] if index < len(firsts) else each)(x):
                    return False
            return True

    def why_not(value: Any, path: Path) -> Failure | None:
        if not isinstance(value, list):
            return None
        for index, item in enumerate(value):
            node = head[index] if index < len(head) else rest
            failure = node.why_not(item, (*path, index))
            if failure is not None:
                if node.refuses_all:  # no item allowed here: the array is too long
                    return Failure("maxItems", path, value, len(head))
                return failure
        return None

    return _on_kind("items", list, inner, why_not, typed=typed)


def _prefix_items(spec: Any, at: _Schema) -> _Rule | None:
    if "items" in at.schema:
        return None  # compiled with items
    return _items(True, at)


def _branches(spec: Any, at: _Schema, keyword: str) -> tuple[_Node, ...]:
    if not isinstance(spec, list) or not spec:
        raise _Unsupported(keyword)
    return tuple(at.compiler.node(sub) for sub in spec)


def _no_branch(path: Path, value: Any, failures: list[Failure]) -> Failure:
    """Why no branch of ``anyOf``/``oneOf`` fits: the expected types when every branch
    wanted another type, else the failure of the branch whose type fits (the likely
    intent)."""
    def on_type(failure: Failure) -> bool:
        return failure.keyword == "type" and len(failure.path) == len(path)

    if all(on_type(f) for f in failures):
        types: list[str] = []
        for failure in failures:
            types.extend(t for t in failure.expected if t not in types)
        return Failure("type", path, value, tuple(types))
    return next(f for f in failures if not on_type(f))


def _keys_of_passing(branches: tuple[_Node, ...]) -> _Keys:
    def evaluated(value: Any) -> AbstractSet[str]:
        seen: set[str] = set()
        for branch in branches:
            if branch.holds(value):
                seen |= branch.evaluated(value)
        return seen

    return evaluated


def _any_of(spec: Any, at: _Schema) -> _Rule:
    branches = _branches(spec, at, "anyOf")
    checks = tuple(branch.holds for branch in branches)
    if len(checks) == 2:
        first, second = checks

        def holds(v: Any) -> bool:
            return first(v) or second(v)
    else:
        def holds(v: Any) -> bool:
            return any(check(v) for check in checks)

    def why_not(value: Any, path: Path) -> Failure | None:
        failures: list[Failure] = []
        for branch in branches:
            failure = branch.why_not(value, path)
            if failure is None:
                return None
            failures.append(failure)
        return _no_branch(path, value, failures)

    return _Rule("anyOf", holds, why_not, evaluated=_keys_of_passing(branches))


def _one_of(spec: Any, at: _Schema) -> _Rule:
    branches = _branches(spec, at, "oneOf")
    checks = tuple(branch.holds for branch in branches)

    def holds(value: Any) -> bool:
        found = False
        for check in checks:
            if check(value):
                if found:
                    return False
                found = True
        return found

    def why_not(value: Any, path: Path) -> Failure | None:
        failures: list[Failure] = []
        for branch in branches:
            failure = branch.why_not(value, path)
            if failure is not None:
                failures.append(failure)
        matched = len(branches) - len(failures)
        if matched == 1:
            return None
        if matched > 1:
            return Failure("oneOf", path, value)
        return _no_branch(path, value, failures)

    return _Rule("oneOf", holds, why_not, evaluated=_keys_of_passing(branches))


def _all_of(spec: Any, at: _Schema) -> _Rule:
    branches = _branches(spec, at, "allOf")

    def why_not(value: Any, path: Path) -> Failure | None:
        for branch in branches:
            failure = branch.why_not(value, path)
            if failure is not None:
                return failure
        return None

    return _Rule("allOf", _conjunction([branch.holds for branch in branches]), why_not,
                 evaluated=_union([branch.evaluated for branch in branches]))


def _unevaluated_properties(spec: Any, at: _Schema) -> _Rule:
    """Only ``false``: no key that the schema's other keywords (in place, through
    ``allOf``, the passing ``anyOf``/``oneOf`` branches, ``$ref``) did not evaluate."""
    if spec is not False:
        raise _Unsupported("unevaluatedProperties other than false")
    evaluated = _union([rule.evaluated for rule in at.earlier if rule.evaluated is not None])

    def unexpected(value: Any) -> tuple[str, ...]:
        seen = evaluated(value)
        return tuple(k for k in value if k not in seen)

    def why_not(value: Any, path: Path) -> Failure | None:
        extra = unexpected(value) if isinstance(value, dict) else ()
        return Failure("unevaluatedProperties", path, value, extra) if extra else None

    def inner(v: Any) -> bool:
        return not unexpected(v)

    return _on_kind("unevaluatedProperties", dict, inner, why_not)


#: Every keyword the compiler reads, in the order a value's failures are looked for: its
#: type first (the clearest message), missing keys before the values of the present ones;
#: ``unevaluatedProperties`` last, as it reads what the others evaluated.
_KEYWORDS: dict[str, _KeywordCompiler] = {
    "type": _type,
    "$ref": _ref,
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "allOf": _all_of,
    "minimum": _bound("minimum"),
    "maximum": _bound("maximum"),
    "exclusiveMinimum": _bound("exclusiveMinimum"),
    "exclusiveMaximum": _bound("exclusiveMaximum"),
    "minLength": _size("minLength", str, True),
    "maxLength": _size("maxLength", str, False),
    "pattern": _pattern,
    "minItems": _size("minItems", list, True),
    "maxItems": _size("maxItems", list, False),
    "uniqueItems": _unique,
    "prefixItems": _prefix_items,
    "items": _items,
    "required": _required,
    "dependentRequired": _dependent_required,
    "minProperties": _size("minProperties", dict, True),
    "maxProperties": _size("maxProperties", dict, False),
    "propertyNames": _property_names,
    "additionalProperties": _additional_properties,
    "properties": _properties,
    "unevaluatedProperties": _unevaluated_properties,
}
_RANK = {keyword: rank for rank, keyword in enumerate(_KEYWORDS)}


def compile_checker(schema: Any, *, ignored: AbstractSet[str] = ANNOTATIONS) -> Checker | None:
    """``schema`` compiled once (see the module docstring); ``None`` when it uses a keyword
    this module does not implement, or one of a shape it does not read (the caller then
    asks jsonschema, which also says whether the schema is valid at all). ``ignored``: the
    keywords that never change a verdict for this caller (annotations)."""
    try:
        root = _Compiler(schema, ignored).compile_root()
    except (_Unsupported, re.error, RecursionError):
        return None
    return Checker(root.holds, root.why_not)


def compile_check(schema: Any, *, annotations: AbstractSet[str] = frozenset()) -> Check | None:
    """The yes/no of :func:`compile_checker`, ignoring :data:`ANNOTATIONS` and
    ``annotations``. A value nested too deeply raises :class:`RecursionError`."""
    checker = compile_checker(schema, ignored=ANNOTATIONS | frozenset(annotations))
    return None if checker is None else checker.holds
