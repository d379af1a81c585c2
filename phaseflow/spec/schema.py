"""The JSON Schema of the format, and turning its errors into positioned diagnostics.

The schema lives in ``phaseflow/schemas/workflow.schema.json`` (the repository's
``schemas/workflow.schema.json`` is a copy, byte for byte, checked by a test);
``phaseflow schema`` prints that file and the validator is built from it once per process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from phaseflow.expr.describe import clip, did_you_mean
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.flow_cuts import cut_keys, quote_hint
from phaseflow.spec.jsonschema_check import json_type
from phaseflow.spec.scalar_positions import SourceText
from phaseflow.spec.yamlnodes import Mapping, Node, Scalar, Sequence

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "workflow.schema.json"


def schema_text() -> str:
    """The schema file, byte for byte."""
    return SCHEMA_PATH.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(schema_text())
    return data


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every local ``$ref`` replaced by what it names (the schema has no
    cycles). Validation then never goes through jsonschema's reference resolver, which
    was half of the validation time on a large workflow. A ``$ref`` with sibling keywords
    becomes an ``allOf`` entry, so ``unevaluatedProperties`` still sees its properties; the
    target's ``description`` wins, since error messages quote it (naming rules)."""
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _inline(v, defs) for k, v in node.items() if k not in ("$defs", "$ref")}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _inline(defs[ref[len("#/$defs/") :]], defs)
        siblings = {k: v for k, v in out.items() if k != "description"}
        if not siblings:
            return target
        out["allOf"] = [*out.get("allOf", []), target]
    return out


@lru_cache(maxsize=1)
def _flat() -> dict[str, Any]:
    full = schema()
    flat: dict[str, Any] = _inline(full, full.get("$defs", {}))
    return flat


@lru_cache(maxsize=1)
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_flat())


@lru_cache(maxsize=1)
def _fast_check() -> Any:
    from phaseflow.spec.fastschema import compile_schema

    return compile_schema(_flat())


def schema_valid(data: Any) -> bool | None:
    """The fast verdict (see :mod:`phaseflow.spec.fastschema`): ``True`` when ``data``
    certainly matches the schema, ``False`` when it does not, ``None`` when undecided."""
    check = _fast_check()
    if check is None:
        return None
    verdict: bool | None = check(data)
    return verdict


_WHAT = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "empty",
}


#: how a user would call each JSON type of a YAML value
_TYPE_PHRASES = {
    "null": "empty (null)", "boolean": "a boolean", "integer": "an integer",
    "number": "a number", "string": "a string", "array": "a list", "object": "a mapping",
}


def type_name(value: Any) -> str:
    """How a user would call the type of a YAML value (its JSON type, in words)."""
    name = json_type(value)
    if name == type(value).__name__:  # not a JSON value: its class (json_type says so)
        return name
    return _TYPE_PHRASES.get(name, name)


class NodeLocator:
    """Finds the node for a JSON path (keys and list indices) below ``root``, and the key
    node that names it (``None`` for a list item, or the root itself). A path that leaves
    the tree stops at the last node found."""

    def __init__(self, root: Node) -> None:
        self.root = root

    def find(self, path: list[Any]) -> tuple[Node, Scalar | None]:
        node: Node = self.root
        key_node: Scalar | None = None
        for part in path:
            child: Node | None = None
            if isinstance(node, Mapping) and isinstance(part, str):
                for k, v in entries(node):
                    if k.value == part:
                        key_node, child = k, v
                        break
            elif (
                isinstance(node, Sequence) and isinstance(part, int) and 0 <= part < len(node.items)
            ):
                child = node.items[part]
                key_node = None
            if child is None:
                break
            node = child
        return node, key_node


def entries(mapping: Mapping) -> list[tuple[Scalar, Node]]:
    """A mapping's (key, value) pairs with YAML merge keys (``<<: *base``) applied:
    keys written in the mapping win over merged ones."""
    if mapping.merges is False:  # compose saw no merge key (most mappings)
        return mapping.pairs
    for k, _ in mapping.pairs:  # a loop, not any(...): this runs for every mapping
        if k.value == "<<" and k.style is None:
            break
    else:
        return mapping.pairs
    own = [(k, v) for k, v in mapping.pairs if not (k.value == "<<" and k.style is None)]
    names = {k.value for k, _ in own}
    merged: list[tuple[Scalar, Node]] = []
    for k, v in mapping.pairs:
        if k.value == "<<" and k.style is None:
            sources = v.items if isinstance(v, Sequence) else [v]
            for source in sources:
                if isinstance(source, Mapping):
                    for mk, mv in entries(source):
                        if mk.value not in names:
                            names.add(mk.value)
                            merged.append((mk, mv))
    return own + merged


def _describe(path: list[Any]) -> str:
    """A readable location: ``phase 'greet', transition 2`` for a JSON path."""
    parts: list[str] = []
    i = 0
    while i < len(path):
        part = path[i]
        if part == "phases" and i + 1 < len(path):
            parts.append(f"phase '{clip(str(path[i + 1]))}'")
            i += 2
            continue
        if part in ("state", "tools") and i + 1 < len(path):
            noun = "state key" if part == "state" else "tool"
            parts.append(f"{noun} '{clip(str(path[i + 1]))}'")
            i += 2
            continue
        if isinstance(part, int) and parts:
            parts[-1] = f"{parts[-1]} #{part + 1}"
        elif isinstance(part, str):
            parts.append(part)
        i += 1
    return ", ".join(parts)


def _allowed_keys(subschema: dict[str, Any]) -> set[str]:
    # the validator runs on the flattened schema (no $ref left), so properties are here
    # or in allOf entries
    keys = set(subschema.get("properties", {}))
    for part in subschema.get("allOf", []):
        if isinstance(part, dict):
            keys |= _allowed_keys(part)
    return keys


def schema_diagnostics(
    data: Any, root: Node, path: str, broken_phases: set[str] | None = None,
    text: str | None = None,
) -> list[Diagnostic]:
    """Validate ``data`` (composed from ``root``) against the schema; one diagnostic per
    problem, each at the node it is about. The names of phases with an error inside them
    are added to ``broken_phases`` when it is given. With the file's ``text``, an unknown
    key that a ',' cut from an unquoted value in a flow mapping says to quote that value."""
    if schema_valid(data) is True:
        return []  # nothing to explain, and no jsonschema import
    located = NodeLocator(root)
    source = SourceText(text) if text is not None else None
    found: list[Diagnostic] = []
    for error in _validator().iter_errors(data):
        found.extend(_diagnose(error, located, path, source))
        where = list(error.absolute_path)
        if broken_phases is not None and len(where) >= 2 and where[0] == "phases":
            broken_phases.add(str(where[1]))
    unique = {(d.line, d.column, d.code, d.message): d for d in found}
    return list(unique.values())


#: How many unknown keys of one mapping get a "did you mean" (the rest list what is allowed).
_HINTED_KEYS = 100


def _diagnose(error: Any, located: NodeLocator, path: str,
              source: SourceText | None = None) -> Iterator[Diagnostic]:
    json_path = list(error.absolute_path)
    node, key_node = located.find(json_path)
    where = _describe(json_path)
    at = key_node if key_node is not None else node
    name = json_path[-1] if json_path and isinstance(json_path[-1], str) else None
    subject = f"'{clip(name)}'" if name else (where or "the file")
    kind = "propertyNames" if "propertyNames" in error.absolute_schema_path else error.validator
    value = error.instance
    sch = error.schema

    def diag(code: str, message: str, where_node: Node | None = None) -> Diagnostic:
        n = where_node or at
        return Diagnostic(path, n.line, n.column, code, message)

    if kind == "required":
        missing = [k for k in sch.get("required", []) if isinstance(value, dict) and k not in value]
        context = f" in {where}" if where else ""
        for key in missing:
            yield diag("PF101", f"missing required key '{key}'{context}")
    elif kind in ("additionalProperties", "unevaluatedProperties"):
        if not isinstance(value, dict) or not isinstance(node, Mapping):
            return
        allowed = _allowed_keys(sch)
        listed = f" (allowed here: {', '.join(sorted(allowed))})"
        context = f" in {where}" if where else ""
        unknown = 0
        cuts: dict[int, tuple[str, str]] | None = None
        for key_scalar, _ in entries(node):
            key = key_scalar.value
            if key in allowed or key == "<<":
                continue
            unknown += 1
            # a "did you mean" is for a human reading a few mistakes; past that, keep a
            # garbage file with 100,000 unknown keys fast
            hint = did_you_mean(str(key), allowed) if unknown <= _HINTED_KEYS else ""
            if source is not None and unknown <= _HINTED_KEYS:
                if cuts is None:
                    cuts = cut_keys(source, node)
                split = cuts.get(id(key_scalar))
                if split is not None:
                    hint = ": " + quote_hint(*split)
            yield diag(
                "PF102", f"unknown key '{clip(str(key))}'{context}{hint or listed}", key_scalar
            )
    elif kind == "propertyNames":
        bad = error.instance if isinstance(error.instance, str) else None
        # jsonschema reports the bad *name* as the instance, at the mapping's path.
        bad_key = node.key(bad) if isinstance(node, Mapping) and bad is not None else None
        noun = {"phases": "phase", "state": "state key", "tools": "tool"}.get(str(name), "key")
        rule = (
            "lowercase letters, digits, '_', '.' and '-'"
            if noun == "tool"
            else "lowercase letters, digits and '_'"
        )
        yield diag(
            "PF103",
            f"'{clip(str(bad))}' is not a valid {noun} name: use {rule}, not starting with a digit "
            "(so that guards can name it)",
            bad_key,
        )
    elif kind == "const" and json_path == ["phaseflow"]:
        yield diag(
            "PF110",
            f"unsupported format version {clip(repr(value))}: this phaseflow reads 'phaseflow: 1'",
            node,
        )
    elif kind == "const":
        desc = sch.get("description", "")
        yield diag(
            "PF103",
            f"{where}: must be {sch['const']!r}, not {clip(repr(value))}. {desc}".strip(),
            node,
        )
    elif kind == "oneOf" and isinstance(value, dict):
        present = [k for k in ("set", "unset", "call") if k in value]
        if not present:
            yield diag("PF101", f"{where or 'effect'}: needs one of 'set', 'unset' or 'call'")
        else:
            listed = " and ".join(f"'{k}'" for k in present)
            yield diag(
                "PF103",
                f"{where or 'effect'}: has {listed}; an effect does exactly one thing "
                "(write them as separate effects)",
            )
    elif kind == "dependentRequired":
        if isinstance(value, dict) and "with" not in value and "produces" in value:
            yield diag("PF103", f"{where}: 'produces' names the keys a 'call' returns; add "
                                "'call' or remove it")
        elif isinstance(value, dict) and "with" not in value and "transcript" in value:
            yield diag("PF103", f"{where}: 'transcript' says how many messages a 'call' "
                                "receives; add 'call' or remove it")
        else:
            yield diag("PF103",
                       f"{where}: 'with' gives arguments to a 'call'; add 'call' or remove it")
    elif kind == "type":
        expected = sch.get("type")
        wanted = (
            " or ".join(_WHAT.get(str(t), str(t)) for t in expected)
            if isinstance(expected, list)
            else _WHAT.get(str(expected), str(expected))
        )
        yield diag("PF103", f"{subject} must be {wanted}, not {type_name(value)}", node)
    elif kind == "enum":
        options = ", ".join(repr(o) for o in sch["enum"])
        hint = (
            did_you_mean(str(value), [str(o) for o in sch["enum"]])
            if isinstance(value, str)
            else ""
        )
        yield diag(
            "PF103", f"{subject} must be one of {options}, not {clip(repr(value))}{hint}", node
        )
    elif kind == "pattern":
        desc = sch.get("description", "")
        yield diag("PF103", f"{subject}: {clip(repr(value))} is not valid. {desc}".strip(), node)
    elif kind == "minProperties":
        yield diag("PF103", f"{subject} needs at least one entry", node)
    elif kind == "minLength":
        yield diag("PF103", f"{subject} must not be empty", node)
    elif kind == "uniqueItems":
        yield diag("PF103", f"{subject} lists the same item more than once", node)
    elif kind in ("minimum", "maximum"):
        yield diag("PF103", f"{subject}: {clip(error.message, 200)}", node)
    elif kind == "exclusiveMinimum":
        yield diag(
            "PF103",
            f"{where}: must be greater than {sch['exclusiveMinimum']}, not {clip(repr(value))}",
            node,
        )
    else:
        yield diag("PF103", f"{where or 'file'}: {clip(error.message, 200)}", node)
