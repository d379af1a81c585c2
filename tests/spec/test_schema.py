"""The JSON Schema: valid draft 2020-12, documented everywhere, and in step with the loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from phaseflow.spec import compiler
from phaseflow.spec.loader import check_text
from phaseflow.spec.schema import SCHEMA_PATH, schema, schema_text

REPO = Path(__file__).resolve().parents[2]
SPEC_EXAMPLE = (Path(__file__).parent / "data" / "refund_desk.yaml").read_text()


def test_schema_is_valid_draft_2020_12() -> None:
    data = schema()
    assert data["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(data)


def test_repository_copy_is_the_packaged_file() -> None:
    assert (REPO / "schemas" / "workflow.schema.json").read_bytes() == SCHEMA_PATH.read_bytes()
    assert schema_text().encode() == SCHEMA_PATH.read_bytes()


def _properties(node: Any, where: str = "#") -> list[tuple[str, Any]]:
    """Every (location, subschema) under a ``properties`` keyword, recursively."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    found.append((f"{where}/properties/{name}", sub))
            found.extend(_properties(value, f"{where}/{key}"))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found.extend(_properties(item, f"{where}/{i}"))
    return found


def test_every_property_and_definition_has_a_description() -> None:
    data = schema()
    props = _properties(data)
    assert len(props) >= 38  # 8 top-level + 30 in the definitions
    missing = [
        where
        for where, sub in props
        if not (isinstance(sub, dict) and str(sub.get("description", "")).strip())
    ]
    missing += [
        f"#/$defs/{name}"
        for name, sub in data["$defs"].items()
        if not str(sub.get("description", "")).strip()
    ]
    assert missing == []
    assert data["description"]


def _defs(name: str) -> dict[str, Any]:
    sub: dict[str, Any] = schema()["$defs"][name]
    return sub


def _keys(sub: dict[str, Any]) -> set[str]:
    keys = set(sub.get("properties", {}))
    ref = sub.get("$ref", "")
    if ref.startswith("#/$defs/"):
        keys |= _keys(_defs(ref.removeprefix("#/$defs/")))
    return keys


@pytest.mark.parametrize(
    ("constant", "schema_keys"),
    [
        ("TOP_KEYS", lambda: set(schema()["properties"])),
        ("PHASE_KEYS", lambda: _keys(_defs("phase"))),
        ("TRANSITION_KEYS", lambda: _keys(_defs("transition"))),
        ("STATE_KEY_KEYS", lambda: _keys(_defs("stateKey"))),
        ("TOOL_KEYS", lambda: _keys(_defs("tool"))),
        ("EFFECT_KEYS", lambda: _keys(_defs("effect"))),
        ("PREPARATION_KEYS", lambda: _keys(_defs("preparation"))),
        ("NAVIGATION_KEYS", lambda: _keys(_defs("navigation"))),
    ],
)
def test_loader_and_schema_know_the_same_keys(constant: str, schema_keys: Any) -> None:
    assert set(getattr(compiler, constant)) == schema_keys()


def test_closed_objects_refuse_extra_keys() -> None:
    data = schema()
    assert data["additionalProperties"] is False
    for name in ("phase", "transition", "stateKey", "tool", "navigation"):
        assert _defs(name)["additionalProperties"] is False, name
    for name in ("effect", "preparation"):
        assert _defs(name)["unevaluatedProperties"] is False, name


# A valid workflow with every key at every level, and where each level sits in it.
TOOL_LINE = (
    "  t: {description: d, writes: [k], approval: always, timeout: 2.5, idempotent: true, "
    "read_only: true, parameters: {type: object, properties: {x: {type: string}}}}"
)
FULL = """\
phaseflow: 1
name: full
description: Every key.
initial: a
state:
  k: {type: string, description: d, default: x}
  c: {type: string}
tools:
  t: TOOL_LINE
navigation: {history: 2, template: "{{ goal }}"}
uses: {other: other.yaml}
imports: [shared.yaml]
model: fast
phases:
  a:
    goal: g
    call: other
    with: {x: state.k, y: 1}
    returns: {k: x}
    history: since_call
    instructions: "{{ state.k }}"
    needs: [k]
    collect: [c]
    requires: [k]
    guard: state.k
    prepare:
      - {name: p, produces: [k], call: c, with: {x: 1}, transcript: 2}
    on_enter:
      - {call: c, with: {x: 1}, produces: [k], transcript: 4}
    on_exit:
      - {set: {k: y}}
      - {unset: [k]}
    tools: [t]
    clear_on_enter: [k]
    transitions:
      - {to: b, when: state.k, description: d, trigger: model, after: 10m}
      - {handoff: other, with: {x: state.k}, when: "returned == 'done'"}
  b:
    goal: g
    terminal: true
    model: strong
    reply: {schema: {type: object, properties: {c: {type: string}}}, record: {c: c}}
""".replace("  t: TOOL_LINE", TOOL_LINE)

# level -> (the line to add a key after, its indentation, the keys the loader reads there)
LEVELS = {
    "top": ("description: Every key.", "", compiler.TOP_KEYS),
    "state key": ("  k: {type: string, description: d, default: x}", None, compiler.STATE_KEY_KEYS),
    "tool": (TOOL_LINE, None, compiler.TOOL_KEYS),
    "navigation": (
        'navigation: {history: 2, template: "{{ goal }}"}',
        None,
        compiler.NAVIGATION_KEYS,
    ),
    "phase": ("    goal: g\n    call", "    ", compiler.PHASE_KEYS),
    "transition": (
        "      - {to: b, when: state.k, description: d, trigger: model, after: 10m}",
        None,
        compiler.TRANSITION_KEYS,
    ),
    "effect": ("      - {call: c, with: {x: 1}, produces: [k], transcript: 4}", None,
               compiler.EFFECT_KEYS),
    "preparation": (
        "      - {name: p, produces: [k], call: c, with: {x: 1}, transcript: 2}",
        None,
        compiler.PREPARATION_KEYS,
    ),
}


def test_the_full_example_is_valid() -> None:
    result = check_text(FULL)
    assert result.diagnostics == ()
    assert result.workflow is not None


def _with_extra(level: str, key: str, value: str = "1") -> str:
    anchor, indent, _ = LEVELS[level]
    assert anchor in FULL
    if indent is None:  # a flow mapping: add the key before its closing brace
        head, _, tail = anchor.rpartition("}")
        return FULL.replace(anchor, f"{head}, {key}: {value}}}{tail}", 1)
    first, _, rest = anchor.partition("\n")
    return FULL.replace(
        anchor, f"{first}\n{indent}{key}: {value}" + (f"\n{rest}" if rest else ""), 1
    )


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_an_unknown_key_at_each_level_is_pf102(level: str) -> None:
    diags = check_text(_with_extra(level, "bogus_key")).diagnostics
    assert [d.code for d in diags] == ["PF102"], diags
    assert "unknown key 'bogus_key'" in diags[0].message


def test_each_known_key_is_accepted_at_each_level() -> None:
    """FULL is clean (test above) and uses, at each level, exactly the keys the loader reads."""
    import yaml

    data = yaml.safe_load(FULL)
    phase = data["phases"]["a"]
    used = {
        "top": set(data),
        "state key": set(data["state"]["k"]),
        "tool": set(data["tools"]["t"]),
        "navigation": set(data["navigation"]),
        "phase": set(phase) | set(data["phases"]["b"]),
        "transition": {k for t in phase["transitions"] for k in t},
        "effect": {k for e in phase["on_enter"] + phase["on_exit"] for k in e},
        "preparation": set(phase["prepare"][0]) | {"set", "unset"},  # one effect per preparation
    }
    for level, (_, _, keys) in LEVELS.items():
        assert used[level] == set(keys), level


@pytest.mark.parametrize("effect", ["{set: {k: v}}", "{unset: [k]}", "{call: c}"])
def test_a_preparation_takes_each_kind_of_effect(effect: str) -> None:
    prep = effect.replace("{", "{name: p, produces: [k], ", 1)
    text = FULL.replace(
        "      - {name: p, produces: [k], call: c, with: {x: 1}, transcript: 2}", f"      - {prep}"
    )
    assert check_text(text).diagnostics == ()
