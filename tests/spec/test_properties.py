"""Property-based: mutate valid workflows any way at all; ``check_text`` always answers.

Whatever the text, ``check_text`` returns diagnostics (never raises), each at a real
position with a known code; and a file it accepts without errors really compiled.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.spec.diagnostics import CODES
from phaseflow.spec.loader import CheckResult, check_text

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "invalid"
SEEDS = [
    (HERE / "data" / "refund_desk.yaml").read_text(),
    (FIXTURES / "pf206_never_taken.yaml").read_text(),
    (FIXTURES / "pf403_produces_undeclared.yaml").read_text(),
    (FIXTURES / "pf302_template_syntax.yaml").read_text(),
    (FIXTURES / "pf205_trap.yaml").read_text(),
]

FAST = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_well_formed(text: str) -> CheckResult:
    result = check_text(text, "mutant.yaml")  # must not raise
    lines = text.count("\n") + 2
    for d in result.diagnostics:
        assert d.code in CODES, d
        assert 1 <= d.line <= lines, d
        assert d.column >= 1, d
        assert d.path == "mutant.yaml"
        assert d.message and "\n" not in d.message[:0]
    has_error = any(d.severity == "error" for d in result.diagnostics)
    if has_error:
        assert result.workflow is None
    else:
        assert result.workflow is not None, result.diagnostics
        assert result.workflow.initial in result.workflow.phases
        assert result.workflow.warnings == result.diagnostics
    assert list(result.diagnostics) == sorted(result.diagnostics, key=lambda d: d.sort_key())
    return result


# -- structural mutations on the data ------------------------------------------------------
def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found += _paths(v, (*prefix, i))
    return found


REPLACEMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, width=16),
    st.text(max_size=12), st.sampled_from(["greet", "done", "state.amount > 1", "{{ x }}",
                                           "{% if %}", "__import__('os')", "crm.*", "auto",
                                           "model", "always"]),
    st.lists(st.sampled_from(["a", "order_id", "greet", 1, None]), max_size=3),
    st.dictionaries(st.sampled_from(["to", "goal", "when", "set", "call", "x"]),
                    st.sampled_from(["done", "g", 1, None, "turn > 1"]), max_size=3),
)


@st.composite
def data_mutants(draw: st.DrawFn) -> str:
    data = yaml.safe_load(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)[1:]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["drop", "retype", "copy"]))
        if action == "drop":
            del parent[path[-1]]
        elif action == "retype":
            parent[path[-1]] = draw(REPLACEMENTS)
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "goal", "to", "terminal", "zz"]))] = (
                copy.deepcopy(parent[path[-1]]))
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@FAST
@given(data_mutants())
def test_structural_mutants(text: str) -> None:
    assert_well_formed(text)


# -- textual mutations on the bytes ------------------------------------------------------
GARBAGE = st.text(
    alphabet=st.one_of(st.sampled_from(list("{}[]:,-&*!|>'\"#%@?\t \n~")),
                       st.characters(codec="utf-8")),
    max_size=20,
)


@st.composite
def text_mutants(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        lines = text.split("\n")
        action = draw(st.sampled_from(["cut", "insert", "duplicate", "indent", "dedent", "swap"]))
        if action == "cut":
            text = text[: draw(st.integers(0, len(text)))]
        elif action == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(GARBAGE) + text[at:]
        elif action == "duplicate":
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif action in ("indent", "dedent"):
            i = draw(st.integers(0, len(lines) - 1))
            n = draw(st.integers(1, 4))
            lines[i] = " " * n + lines[i] if action == "indent" else lines[i][n:]
            text = "\n".join(lines)
        else:
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text


@FAST
@given(text_mutants())
def test_textual_mutants(text: str) -> None:
    assert_well_formed(text)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    assert_well_formed(text)


def test_seeds_themselves() -> None:
    assert assert_well_formed(SEEDS[0]).diagnostics == ()
    for seed in SEEDS[1:]:
        assert assert_well_formed(seed).diagnostics
