"""The reviewer's attacks on the bounded templates, and the helper's own, each pinned down.

Every case is one of three outcomes a user can see: refused when the workflow loads
(PF304, or PF302 for what Jinja cannot turn into code), a render that stops at a limit
with an error outcome (bounded), or safe output (data only, never a Python repr). Timing
and memory of the same cases are measured in benchmarks/bench_templates.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.errors import PhaseflowError, WorkflowError
from phaseflow.spec.loader import check_text, compile_text
from phaseflow.template import (
    FALLBACK_TEXT,
    RenderOutcome,
    Template,
    TemplateCompileError,
    compile_template,
    environment,
)
from phaseflow.template.limits import MAX_SOURCE, MAX_TOKENS, deep_work, plain_data
from tests.support.templates import ADDRESS, ORIGINAL_INSTRUCTIONS, SPEC_EXAMPLE, render_in

CONTEXT: dict[str, Any] = {
    "state": {"n": 1, "s": "hi", "things": ["x", "y"], "none": None,
              "d": {"k": [1, 2.5]}, "big": "b" * 10_000_000},
    "phase": {"name": "greet", "goal": "Say hello."},
    "workflow": {"name": "desk"},
    "turn": 3,
}
#: Two lists of 2**25 items each, sharing their parts (40 objects in all).
SHARED = "{% set a = [1] %}{% set c = [1] %}" + "{% set a = [a, a] %}{% set c = [c, c] %}" * 25
#: A tuple of 2**40 items sharing its parts: hashing it walks them all.
SHARED_TUPLE = "{% set t = (1,) %}" + "{% set t = (t, t) %}" * 40
BIG_LIST = "{% set b = (range(10000)|list) * 6 %}"


def render(source: str) -> RenderOutcome:
    return render_in(source, CONTEXT)


def assert_bounded_failure(outcome: RenderOutcome, fragment: str) -> None:
    assert outcome.text == FALLBACK_TEXT and not outcome.ok
    assert outcome.error is not None and "\n" not in outcome.error
    assert len(outcome.error) <= 200 and not ADDRESS.search(outcome.error)
    assert fragment in outcome.error, outcome.error


def with_instructions(template: str) -> str:
    return SPEC_EXAMPLE.replace(ORIGINAL_INSTRUCTIONS, f"instructions: {json.dumps(template)}")


# --- refused when the workflow loads -------------------------------------------------------

REFUSED_AT_LOAD = {
    "{{ state.n|round(-10000000) }}": "round precision of -10,000,000 is beyond 400",
    "{{ 1.5|round(10000000, 'floor') }}": "round precision",
    "{{ 1.5|round(precision=-500) }}": "round precision",
    "{{ " + "1" + "0" * 5000 + " }}": "number in the template is too long",
    "{{ ('%()60000s' * 3000) % {'': 1} }}": "formatted string",
    "{{ ('%(a)60000s' * 1000)|format(a='x') }}": "formatted string",
    "{{ (5).to_bytes(100000000, 'big') }}": "to_bytes width",
    "{{ [1]|tojson(indent=100000) }}": "tojson indent",
    "x" * (MAX_SOURCE + 1): f"more than {MAX_SOURCE:,}",
    "{{ [" + "1," * 2000 + "] }}": f"more than {MAX_TOKENS:,} tokens",
    "{{ state.s|upper }}" * 400: f"more than {MAX_TOKENS:,} tokens",
}


@pytest.mark.parametrize("source", list(REFUSED_AT_LOAD))
def test_what_the_text_shows_is_refused_at_load(source: str) -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template(source)
    assert caught.value.code == "PF304"
    assert REFUSED_AT_LOAD[source] in caught.value.message, caught.value.message


def test_a_template_at_the_source_and_token_limits_loads() -> None:
    assert render("x" * MAX_SOURCE).text == "x" * MAX_SOURCE
    # {{ [ 1 , 1 , ... ] | length }}: 6 tokens around the items, 2 per item but the last
    items = (MAX_TOKENS - 6 + 1) // 2
    assert render("{{ [" + ", ".join(["1"] * items) + "]|length }}").text == str(items)


#: Templates Jinja parses but cannot turn into Python code: refused by validate (PF302),
#: so that load_workflow never meets them.
NO_CODE = {
    "{% for loop in state.things %}x{% endfor %}": "'loop' is the loop's own variable",
    "{% for x in state.things %}{% set loop = 1 %}{% endfor %}": "'loop'",
    "{% macro m(a, a) %}{% endmacro %}": "argument 'a' is declared twice",
    "{% call(a, a) range(1) %}{% endcall %}": "argument 'a' is declared twice",
    "{{ range(a=1, a=2) }}": "argument 'a' is given twice",
    "{{ state.s|replace(old='a', old='b') }}": "argument 'old' is given twice",
    "{{ state.s is sameas(a=1, a=2) }}": "argument 'a' is given twice",
    "{% block a %}{% endblock %}{% block a %}{% endblock %}": "block 'a' is defined twice",
    "{% macro m(caller) %}{{ caller() }}{% endmacro %}": "'caller' needs a default",
}


@pytest.mark.parametrize("source", list(NO_CODE))
def test_what_cannot_become_code_is_pf302_at_check_time(source: str) -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template(source)
    assert caught.value.code == "PF302"
    assert NO_CODE[source] in caught.value.message, caught.value.message


@pytest.mark.parametrize("source", [
    "{% set loop = 1 %}{{ loop }}", "{% macro m(caller=none) %}{{ caller }}{% endmacro %}",
    "{% macro m(caller) %}{% endmacro %}", "{% for a, b in [(1, 2)] %}{{ a }}{% endfor %}",
])
def test_near_misses_still_load(source: str) -> None:
    template = compile_template(source)
    template.compile()
    assert template.render_checked(CONTEXT).ok


@pytest.mark.parametrize(("template", "code"), [
    ("{{ 1" + "0" * 5000 + " }}", "PF304"),
    ("{% for loop in state.things %}x{% endfor %}", "PF302"),
    ("{% macro m(a, a) %}{% endmacro %}", "PF302"),
    ("{{ ''.__class__ }}", "PF304"),
])
def test_validate_reports_and_load_raises_only_workflow_errors(template: str, code: str) -> None:
    text = with_instructions(template)
    result = check_text(text)
    assert [d.code for d in result.diagnostics] == [code]
    with pytest.raises(WorkflowError) as caught:
        compile_text(text)
    assert [d.code for d in caught.value.diagnostics] == [code]


def test_compile_raises_nothing_but_template_compile_error() -> None:
    # Past the load-time checks (a parsed template handed straight to compile), what Jinja
    # or Python would raise while generating code is still a TemplateCompileError.
    for source in NO_CODE:
        template = Template(source=source, reads=frozenset(), _ast=environment().parse(source))
        with pytest.raises(TemplateCompileError) as caught:
            template.compile()
        assert isinstance(caught.value, PhaseflowError)
        assert "cannot be turned into code" in caught.value.message


# --- stopped at a limit while rendering -------------------------------------------------------

BOUNDED = {
    # `in`, the `in` test and list methods scan: charged by what they scan
    BIG_LIST + "{% for i in range(10000) %}{% if 'z' in b %}{% endif %}{% endfor %}": "in all",
    BIG_LIST + "{{ (range(10000)|map('string')|list)|select('in', b)|list|length }}": "in all",
    BIG_LIST + "{% for i in range(10000) %}{{ b.count('z') }}{% endfor %}": "in all",
    "{% for i in range(10000) %}{% if 'z' in state.big %}{% endif %}{% endfor %}": "in all",
    # slices are sized before they are built, and charged
    BIG_LIST + "{% for i in range(10000) %}{% if b[1:] %}{% endif %}{% endfor %}": "in all",
    "{% for i in range(10000) %}{% if state.big[1:] %}{% endif %}{% endfor %}": "a slice",
    # round's precision
    "{{ 1.5|round(state.n * 10000000, 'floor') }}": "round precision",
    "{{ state.n|round(state.n * -10000000) }}": "round precision",
    # shared nested values: comparing, printing, formatting, sorting, hashing
    SHARED + "{{ a == c }}": "in all",
    SHARED + "{{ a < c }}": "in all",
    SHARED + "{{ a in [c] }}": "in all",
    SHARED + "{{ [a]|select('==', c)|list }}": "in all",
    SHARED + "{{ [a, c]|sort|length }}": "in all",
    SHARED + "{{ [a, c]|max|length }}": "in all",
    SHARED + "{{ [a, c].index(c) }}": "in all",
    SHARED + "{{ '%s' % (a,) }}": "formatted string",
    SHARED + "{{ '%s'|format(a) }}": "formatted string",
    SHARED + "{{ a|tojson|length }}": "JSON text",
    SHARED + "{{ a|string|length }}": "printing a list",
    SHARED + "{{ '{}'.format(a) }}": "printing a list",
    SHARED_TUPLE + "{{ {t: 1} }}": "in all",
    SHARED_TUPLE + "{{ state[t] }}": "in all",
    SHARED_TUPLE + "{{ t in state }}": "in all",
    SHARED_TUPLE + "{{ state.get(t) }}": "in all",
    SHARED_TUPLE + "{{ [t]|unique|list }}": "in all",
    SHARED_TUPLE + "{% for x in [1, 2] %}{{ loop.changed(t) }}{% endfor %}": "in all",
    # printf widths and precisions count in the size of the result
    "{{ ('%()60000s' * (state.n * 3000)) % {'': 1} }}": "formatted string",
    "{{ ('%(a)60000s' * (state.n * 1000))|format(a='x') }}": "formatted string",
    "{{ ('%.60000f' * (state.n * 2)) % (1.5, 2.5) }}": "formatted string",
    # methods and filters with a size parameter
    "{{ 'abc'.translate({97: 'x' * 60000}) }}": "translate",
    "{{ (5).to_bytes(state.n * 100000000, 'big') }}": "to_bytes",
    "{{ (range(1000)|list)|tojson(indent=state.n * 60000) }}": "JSON text",
    "{{ [[[[[[1]]]]]]|tojson(indent=state.n * 20000) }}": "JSON text",
    "{{ (range(1000)|list)|tojson(indent='x' * 60000) }}": "JSON text",
    # the steps of a loop body and the calls count, not only the iterations
    "{% for i in range(10000) %}" + "{% if i > 1 %}{% endif %}" * 50 + "{% endfor %}": "in all",
    "{% for i in range(10000) %}" + "{{ '' }}" * 200 + "{% endfor %}": "in all",
    "{% for i in range(10000) %}{{ state.things|first|first|first|first|first|first }}"
    "{% endfor %}": "in all",
    "{% macro m() %}" + "{% if 1 %}{% endif %}" * 250 + "{% endmacro %}"
    "{% for i in range(10000) %}{{ m() }}{% endfor %}": "in all",
    "{% for x in range(10000) recursive %}{% if loop.depth < 30 %}{{ loop([x]) }}{% endif %}"
    "{% endfor %}": "",
    "{% for i in range(10000) %}{{ range(10000)|join|length }}{% endfor %}": "in all",
}


@pytest.mark.parametrize("source", list(BOUNDED))
def test_a_hostile_render_stops_at_a_limit(source: str) -> None:
    assert_bounded_failure(render(source), BOUNDED[source])


# --- safe output -------------------------------------------------------------------------------

NO_ADDRESS = [
    "{{ '{!r}'.format(range)[-16:] }}",
    "{{ '{!r}'.format(state.things.index)|replace(' at ', ' ') }}",
    "{{ '{!s}'.format(state.get) }}",
    "{{ '{!a}'.format([state.get]) }}",
    "{{ '{0!r:>20}'.format(state.get) }}",
    "{{ '%r' % (state.get,) }}",
    "{{ '%a'|format(range) }}",
    "{{ '%(a)s'|format(a=state.get) }}",
]


def test_a_named_format_argument_that_is_not_data_is_named_honestly() -> None:
    assert_bounded_failure(render("{{ '%(a)s'|format(a=state.get) }}"), "cannot print a function")


@pytest.mark.parametrize("source", NO_ADDRESS)
def test_conversions_print_data_only(source: str) -> None:
    assert_bounded_failure(render(source), "cannot print a")


PRINTS = {
    "{{ [state.none.x] }}": "[None]",
    "{{ [state.absent, state.none] }}": "[None, None]",
    "{{ ['x'|safe] }}": "['x']",
    "{{ {'k': 'x'|safe, 'u': state.none.x} }}": "{'k': 'x', 'u': None}",
    "{{ '{!r}'.format(['x'|safe]) }}": "['x']",
    "{{ '%r' % ('x'|safe) }}": "'x'",
    "{{ '%r' % [state.none.x] }}": "[None]",
    "{{ '%s' % state.none.x }}": "None",
    "{{ ['a', 1.5, none, true, (1, 2)]|string }}": "['a', 1.5, None, True, (1, 2)]",
    "{{ '{!r:>5}'.format('x') }}": "  'x'",
    "{{ 'z' in state.things }} {{ 'x' in state.things }} {{ 'k' in state.d }}":
        "False True True",
    "{{ state.things[::-1] }} {{ state.s[1:] }} {{ range(10)[2:4]|list }}": "['y', 'x'] i [2, 3]",
    "{{ 1 < state.n + 1 < 3 }} {{ 1 < 2 > 3 }} {{ state.things == ['x', 'y'] }}":
        "True False True",
    "{{ (range(4)|list)|select('in', [1, 3])|list }} {{ 2 is in([1, 2]) }}": "[1, 3] True",
    "{{ 2.675|round(2) }} {{ 1234|round(-2) }} {{ 1.55|round(1, 'floor') }}": "2.67 1200 1.5",
    "{{ {(1, 2): 'pair'}[(1, 2)] }}": "pair",
    "{{ [1, 2]|tojson(indent=2) }}": "[\n  1,\n  2\n]",
    "{{ 'ab'.translate({97: 'xy'}) }}": "xyb",
    "{{ 'x'.center(5) }}|": "  x  |",
}


@pytest.mark.parametrize("source", list(PRINTS))
def test_data_prints_by_the_documented_rule(source: str) -> None:
    assert render(source) == RenderOutcome(PRINTS[source])


def test_a_mapping_argument_keeps_absent_keys_null() -> None:
    template = compile_template("{{ '%(absent)s and %(s)s' % state }}")
    assert template.render_checked({"state": {"s": "hi"}}) == RenderOutcome("None and hi")


def test_data_nested_too_deeply_says_so() -> None:
    deep: list[Any] = []
    for _ in range(100):
        deep = [deep]
    outcome = compile_template("{{ state.deep }}").render_checked({"state": {"deep": deep}})
    assert_bounded_failure(outcome, "nested more than 64 levels")


# --- properties ---------------------------------------------------------------------------------

_PIECES = st.sampled_from([
    "{{ x }}", "{{ loop.index }}", "{{ m(1) }}", "{% set y = x %}", "{{ caller() }}",
    "{% if x %}a{% endif %}", "{{ range(1, b=2) }}", "{{ x|default(1, true) }}",
])
_NAMES = st.sampled_from(["x", "y", "loop", "caller", "a", "varargs", "kwargs"])


@st.composite
def _codegen_templates(draw: st.DrawFn) -> str:
    args = draw(st.lists(_NAMES, max_size=3))
    defaults = draw(st.lists(st.just("1"), max_size=len(args)))
    signature = ", ".join(args[: len(args) - len(defaults)]
                          + [f"{a}={d}" for a, d in zip(args[len(args) - len(defaults):],
                                                        defaults, strict=True)])
    target = draw(_NAMES)
    keywords = draw(st.lists(_NAMES, max_size=3))
    call = "m(" + ", ".join(f"{k}=1" for k in keywords) + ")"
    body = "".join(draw(st.lists(_PIECES, max_size=3)))
    kind = draw(st.sampled_from(["macro", "call", "for", "block"]))
    if kind == "macro":
        return f"{{% macro m({signature}) %}}{body}{{% endmacro %}}{{{{ {call} }}}}"
    if kind == "call":
        return (f"{{% macro m() %}}{{{{ caller(1) }}}}{{% endmacro %}}"
                f"{{% call({signature}) m() %}}{body}{{% endcall %}}")
    if kind == "for":
        return f"{{% for {target} in [1, 2] %}}{body}{{% endfor %}}"
    other = draw(_NAMES)
    return f"{{% block {target} %}}{body}{{% endblock %}}{{% block {other} %}}{{% endblock %}}"


@given(_codegen_templates())
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
def test_every_template_the_checks_accept_generates_code(source: str) -> None:
    try:
        template = compile_template("{% macro m() %}{% endmacro %}" + source)
    except TemplateCompileError:
        return
    template.compile()  # never a SyntaxError or Jinja's TemplateAssertionError
    assert isinstance(template.render_checked(CONTEXT), RenderOutcome)


_SHARED_DEPTH = st.integers(0, 30)


@given(_SHARED_DEPTH, st.sampled_from(["list", "tuple", "dict"]))
@settings(max_examples=40, deadline=None)
def test_deep_work_counts_every_item_the_walk_meets(depth: int, kind: str) -> None:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value, "b": value} if kind == "dict" else [value, value]
        if kind == "tuple":
            value = tuple(value)
    limit = 1 << 20
    cost = deep_work(value, limit)
    items = 2 ** (depth + 1) - 1  # the expanded tree's nodes
    assert cost > limit or cost >= items - 1  # never fewer than the items it would walk
    assert deep_work(value, 100) <= 100 + 8 * 5  # and it stops soon past its limit


@given(st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans()),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=3), inner,
                                                            max_size=3)),
                    max_leaves=10))
@settings(max_examples=100, deadline=None)
def test_plain_data_prints_json_like_data_as_python_always_did(value: Any) -> None:
    assert str(plain_data(value)) == str(value)


def test_an_exception_that_cannot_be_printed_is_still_a_render_outcome() -> None:
    """A host value in the state whose error cannot be printed never escapes a render."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    class Host:
        @property
        def y(self) -> str:
            raise Unprintable()

        def __len__(self) -> int:
            raise Unprintable()

    for source in ("{{ state.x.y }}", "{{ state.x|length }}"):
        outcome = compile_template(source).render_checked({"state": {"x": Host()}})
        assert outcome.text == ""
        assert outcome.error == "line 1: Unprintable (its message cannot be printed)"
