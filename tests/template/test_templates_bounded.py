"""Templates are bounded and honest (issue 8, section 2).

What a workflow author and a host see: a template the sandbox is certain to refuse is a
PF304 compile error at its line; everything else that breaks a limit or fails at render
time gives ``RenderOutcome(FALLBACK_TEXT, error)`` with a one-line error and no internals;
ordinary templates render exactly as they always did. Time and memory of the hostile set
are measured in benchmarks/bench_templates.py, not here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaseflow.spec.loader import check_text
from phaseflow.template import (
    FALLBACK_TEXT,
    INSTRUCTION_NAMES,
    RenderOutcome,
    Template,
    TemplateCompileError,
    compile_template,
    environment,
)
from phaseflow.template.limits import MAX_ITERATIONS, MAX_OUTPUT
from phaseflow.template.sandbox import REMOVED_FILTERS
from tests.support.templates import ADDRESS, ORIGINAL_INSTRUCTIONS, SPEC_EXAMPLE, render_in

CONTEXT: dict[str, Any] = {
    "state": {"n": 1, "s": "hi", "things": ["x", "y"], "none": None,
              "d": {"k": [1, 2.5, True, None]}},
    "phase": {"name": "greet", "goal": "Say hello."},
    "workflow": {"name": "desk", "description": "Refunds"},
    "turn": 3,
}


def render(source: str) -> RenderOutcome:
    return render_in(source, CONTEXT)


def unchecked(source: str) -> Template:
    """``source`` compiled without the load-time checks: the sandbox on its own."""
    return Template(source=source, reads=frozenset(), _ast=environment().parse(source))


def assert_failed_honestly(outcome: RenderOutcome, fragment: str = "") -> None:
    assert outcome.text == FALLBACK_TEXT
    assert outcome.error is not None and not outcome.ok
    assert "\n" not in outcome.error and len(outcome.error) <= 200
    assert not ADDRESS.search(outcome.error), outcome.error
    assert "Traceback" not in outcome.error and 'File "' not in outcome.error
    assert fragment in outcome.error, outcome.error


# --- refused at load (PF304) -----------------------------------------------------------

REFUSED_AT_LOAD = {
    "{{ ''.__class__.__mro__ }}": "is not available to templates",
    "{{ state.__class__ }}": "'__class__' is not available",
    "{{ state['__init__'] }}": "'__init__' is not available",
    "{{ state|attr('__class__') }}": "'__class__' is not available",
    "{{ state.things|map(attribute='__class__')|list }}": "'__class__' is not available",
    "{{ state.things|selectattr('__len__')|list }}": "'__len__' is not available",
    "{{ 10**100000000 }}": "power",
    "{{ 9 ** 9 ** 9 ** 9 ** 9 }}": "power",
    "{{ 2 ** (10 ** 6) }}": "power",
    "{{ state.n ** 100000 }}": "power",
    "{{ 'a' * 10**8 }}": "repetition",
    "{{ [1, 2] * 100000000 }}": "repetition",
    "{{ ('a' ~ state.s) * 100000000 }}": "repetition",
    "{{ 'x'|center(100000000) }}": "center width 100,000,000",
    "{{ 'x'|indent(width=100000000) }}": "indent width",
    "{{ 'x'|wordwrap(100000000) }}": "wordwrap width",
    "{{ 'x'|truncate(100000000) }}": "truncate length",
    "{{ state.things|batch(100000000)|list }}": "batch linecount",
    "{{ state.things|slice(100000000)|list }}": "slice slices",
    "{{ '%100000000s'|format(1) }}": "format width",
    "{{ '%100000000s' % 1 }}": "format width",
    "{{ '{0:>100000000}'.format(1) }}": "format width",
    "{{ '{:.100000000f}'.format(1.5) }}": "format width",
    "{{ 'x'.center(100000000) }}": "center width",
    "{{ 'x'.ljust(10**8) }}": "ljust width",
    "{{ 'a\tb'.expandtabs(100000000) }}": "expandtabs width",
    "{% for i in range(10**9) %}{% endfor %}": "range would be longer than 10,000",
    "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}":
        "nested loops would run 100,000,000 iterations",
    "{% for i in range(200) %}{% for j in 'abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz'"
    " %}{% endfor %}{% endfor %}": "nested loops would run 10,400",
}


@pytest.mark.parametrize("source", list(REFUSED_AT_LOAD))
def test_a_construct_the_sandbox_refuses_is_pf304_at_load(source: str) -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template(source)
    assert caught.value.code == "PF304"
    assert REFUSED_AT_LOAD[source] in caught.value.message, caught.value.message
    assert caught.value.line == 1


#: Refused at load although, with CONTEXT's values, the sandbox would render them: a key
#: that only looks private, and a power that breaks the limit for every base but -1, 0, 1.
HARMLESS_AT_RENDER = {"{{ state['__init__'] }}", "{{ state.n ** 100000 }}"}


@pytest.mark.parametrize("source", [s for s in REFUSED_AT_LOAD if s not in HARMLESS_AT_RENDER])
def test_the_sandbox_alone_refuses_what_the_load_check_refuses(source: str) -> None:
    # No constant folding at code generation, and the render-time checks catch the same
    # constructs: the load check only reports them earlier.
    template = unchecked(source)
    code = environment().compile(template._ast, raw=True)
    assert len(code) < 20_000  # nothing was folded into a huge constant
    assert_failed_honestly(template.render_checked(CONTEXT))


def test_pf304_is_reported_at_the_template_line() -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template("Hello\n{{ state.s }}\n{{ state.s.__class__ }}")
    assert (caught.value.code, caught.value.line) == ("PF304", 3)


def test_syntax_and_unknown_names_stay_pf302() -> None:
    for source in ("{% if %}", "{{ stat.x }}", "{{ x|upperr }}", "{% include 'a' %}"):
        with pytest.raises(TemplateCompileError) as caught:
            compile_template(source)
        assert caught.value.code == "PF302", source


def test_validate_refuses_python_internals() -> None:
    payload = json.dumps("{{ ''.__class__.__mro__ }}")
    text = SPEC_EXAMPLE.replace(ORIGINAL_INSTRUCTIONS, f"instructions: {payload}")
    result = check_text(text)
    assert result.workflow is None
    assert [d.severity for d in result.diagnostics] == ["error"]
    assert result.diagnostics[0].code == "PF304"
    assert "'__mro__' is not available" in result.diagnostics[0].message


# --- only what an author needs -----------------------------------------------------------

@pytest.mark.parametrize("name", ["lipsum", "cycler", "joiner", "namespace", "dict"])
def test_removed_globals_are_unknown_names(name: str) -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template(f"{{{{ {name} }}}}")
    assert caught.value.code == "PF302"
    assert f"unknown name '{name}'" in caught.value.message


@pytest.mark.parametrize("name", sorted(REMOVED_FILTERS))
def test_removed_filters_are_unknown(name: str) -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template(f"{{{{ state.s|{name} }}}}")
    assert f"unknown filter '{name}'" in caught.value.message


def test_the_only_global_is_range() -> None:
    assert set(environment().globals) == {"range"}
    assert render("{{ range(3)|list }}").text == "[0, 1, 2]"


NOT_DATA = [
    "{{ range }}",
    "{{ state.get }}",
    "{{ [state.get] }}",
    "{{ {'a': state.get} }}",
    "{{ state.things|map('upper') }}",
    "{{ state.things|batch(1) }}",
    "{{ state.get|string }}",
    "{{ state.get|upper }}",
    "{{ state.get|e }}",
    "{{ 'a' ~ state.get }}",
    "{{ [state.get]|join }}",
    "{{ '{}'.format(state.get) }}",
    "{{ '%s' % state.get }}",
    "{{ '%s'|format(state.get) }}",
    "{% for x in [1] %}{{ loop }}{% endfor %}",
    "{% macro m() %}{% endmacro %}{{ m }}",
    "{{ state.get|default(1) }}",
]


@pytest.mark.parametrize("source", NOT_DATA)
def test_printing_anything_but_data_is_an_error_never_a_repr(source: str) -> None:
    outcome = render(source)
    assert_failed_honestly(outcome)
    assert "cannot" in (outcome.error or "") or "printed a Python object" in (outcome.error or "")


# --- bounded at render time --------------------------------------------------------------

FAILING_AT_RENDER = {
    "{{ 10 ** (state.n * 100000000) }}": "power",
    "{{ 'a' * (state.n * 10**8) }}": "repetition",
    "{{ [state.s] * (state.n * 10**8) }}": "repetition",
    "{{ 'x'|center(state.n * 100000000) }}": "center width",
    "{{ state.s.center(state.n * 100000000) }}": "center width",
    "{{ state.s.zfill(state.n * 100000000) }}": "zfill width",
    "{{ 'a\\nb'|indent(state.n * 100000000) }}": "indent width",
    "{{ ('a ' * 30000)|wordwrap(1, wrapstring='x' * 60000) }}": "wrapped text",
    "{{ '{0:>{1}}'.format(1, state.n * 100000000) }}": "format width",
    "{{ ('{0:>%d}' % (state.n * 100000000)).format(1) }}": "format width",
    "{{ '%*s'|format(state.n * 100000000, 'x') }}": "'*' width",
    "{{ ('{0}' * 20000).format('y' * 60000) }}": "formatted string",
    "{{ ('%(a)s' * 10000) % {'a': 'y' * 60000} }}": "formatted string",
    "{{ ('a' * 60000)|replace('', 'b' * 60000) }}": "replace",
    "{{ ('a' * 60000).replace('a', 'b' * 60000) }}": "replace",
    "{{ range(10000)|join('x' * (state.n * 60000)) }}": "join",
    "{{ ([('x' * 60000)] * 10000)|join }}": "join",
    "{{ ('x' * 6).join(['y' * 60000] * 2) }}": "join",
    "{{ [('x' * 60000)] * 60000 }}": "printing a list",
    "{{ ([('x' * 60000)] * 60000)|tojson }}": "JSON",
    "{{ range(state.n * 10**9) }}": "range would be longer",
    "{% for i in range(state.n * 10000) %}{% for j in range(state.n * 10000) %}{% endfor %}"
    "{% endfor %}": "loops ran more than 10,000 iterations",
    "{% for x in [1] recursive %}{{ loop(range(10000)) if loop.depth < 3 }}{% endfor %}":
        "loops ran more than 10,000 iterations",
    "{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}{% endmacro %}{{ d('ab', 30) }}":
        "concatenation",
    "{% macro d(s, n) %}{{ d(s + s, n - 1) if n else s|length }}{% endmacro %}"
    "{{ d(['a'] * 40000, 30) }}":
        "larger than 65,536",
    "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}":
        "more than 5,000 calls",
    "{% macro f() %}{% endmacro %}{% for i in range(10000) %}{{ f() }}{{ f() }}{% endfor %}":
        "more than 5,000 calls",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}": "nested more than 32 deep",
    "{% macro sq(x, n) %}{{ sq(x * x, n - 1) if n else 1 }}{% endmacro %}{{ sq(state.n + 2, 30) }}":
        "bits",
    "{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}": "output is longer than 65,536",
    "{% macro m() %}{% for i in range(10000) %}{{ 'y' * 6000 }}{% endfor %}{% endmacro %}"
    "{{ m()|length }}": "in all",
    "{% macro m() %}{% for i in range(10000) %}{{ state.big }}ABCDEFGHIJ{% endfor %}"
    "{% endmacro %}{{ m()|length }}": "longer than 65,536",
    "{{ ([[1] * 1000] * 1000)|sum(start=[]) }}": "sum",
    "{% for i in range(10000) %}{{ ('x' * 60000)|list|sort|length }}{% endfor %}": "in all",
    "{% for i in range(3000) %}{{ range(10000)|sum }}{% endfor %}": "in all",
    "{% for i in range(100) %}{{ ('ab ' * 20000)|wordwrap(79)|length }}{% endfor %}": "in all",
    "{% for i in range(10000) %}{{ ('a' * 60000).count('a') }}{% endfor %}": "in all",
    "{{ state.none + 1 }}": "unsupported operand",
    "{% for x in state.absent %}{% endfor %}": "not iterable",
    "{{ state.things|attr('_' ~ '_class__') }}": "refused",
}


@pytest.mark.parametrize("source", list(FAILING_AT_RENDER))
def test_a_limit_or_failure_at_render_time_is_an_outcome(source: str) -> None:
    assert_failed_honestly(render(source), FAILING_AT_RENDER[source])


def test_render_returns_the_fallback_text_on_failure() -> None:
    template = compile_template("Refund {{ state.none + 1 }} now")
    assert template.render(CONTEXT) == FALLBACK_TEXT == ""


def test_the_error_names_the_template_line() -> None:
    outcome = render("first line\nsecond {{ state.s }}\nthird {{ state.none * 2 }}\n")
    assert outcome.line == 3
    assert outcome.error is not None and outcome.error.startswith("line 3: ")


def test_output_up_to_the_limit_renders_and_beyond_it_fails() -> None:
    fits = render("{% for i in range(1000) %}{{ 'x' * 50 }}{% endfor %}")
    assert fits.ok and len(fits.text) == 50_000
    assert_failed_honestly(render("{% for i in range(2000) %}{{ 'x' * 50 }}{% endfor %}"),
                           "output is longer")


def test_the_iteration_limit_is_exactly_the_documented_number() -> None:
    assert render(f"{{% for i in range({MAX_ITERATIONS}) %}}{{% endfor %}}done").text == "done"
    assert_failed_honestly(
        render(f"{{% for i in range({MAX_ITERATIONS // 2 + 1}) %}}{{% endfor %}}"
               f"{{% for i in range({MAX_ITERATIONS // 2}) %}}{{% endfor %}}"),
        "loops ran more than")


# --- ordinary templates are unchanged ----------------------------------------------------

ORDINARY = {
    "Hello {{ state.s }}, {{ state.things }} {{ state.d }} [{{ state.none }}][{{ state.absent }}]":
        "Hello hi, ['x', 'y'] {'k': [1, 2.5, True, None]} [][]",
    "{{ turn * 2 }} {{ turn ** 2 }} {{ turn / 2 }} {{ turn // 2 }} {{ turn % 2 }} {{ 'x' * 3 }}"
    " {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ -turn }}":
        "6 9 1.5 1 1 xxx [1, 1] [1, 2] ab -3",
    "{{ 'a' ~ none ~ state.things ~ state.absent ~ 1 }}": "aNone['x', 'y']None1",
    "{% for k, v in state.d|dictsort %}{{ k }}={{ v }};{% endfor %}"
    "{% for x in state.things if x != 'x' %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}":
        "k=[1, 2.5, True, None];y1",
    "{% for x in state.things %}{{ loop.index }}{{ x }}{{ loop.last }}{{ loop.cycle('a', 'b') }}"
    "{% endfor %}": "1xFalsea2yTrueb",
    "{% macro m(x) %}<{{ x }}{{ caller() }}>{% endmacro %}{% call m(1) %}q{% endcall %}"
    "{% set y %}abc{% endset %}{{ y|upper }}": "<1q>ABC",
    "{{ state.things|length }} {{ state.things|first }} {{ state.things|reverse|list }}"
    " {{ state.things|sort|join }} {{ state.s|title }} {{ state.s|replace('h', 'j') }}"
    " {{ 3.14159|round(2) }} {{ '42'|int + 1 }} {{ state.absent|default('dflt', true) }}"
    " {{ state.things|tojson }} {{ none|upper }} {{ state.none|string }}":
        "2 x ['y', 'x'] xy Hi ji 3.14 43 dflt [\"x\", \"y\"] NONE None",
    "{{ '%d items'|format(3) }} {{ '{} and {}'.format(1, 'b') }} {{ '%5s|' % 'x' }}"
    " {{ '{:>4}'.format(3) }} {{ 'x'|center(5) }}|": "3 items 1 and b     x|    3   x  |",
    "{{ state.things|map('upper')|join(',') }} {{ state.things|batch(1)|list }}"
    " {{ [{'a': 1}, {'a': 2}]|map(attribute='a')|sum }} {{ range(1, 10, 3)|list }}"
    " {{ 'ab'|list }} {{ 'a,b'.split(',') }} {{ '-'.join(state.things) }}":
        "X,Y [['x'], ['y']] 3 [1, 4, 7] ['a', 'b'] ['a', 'b'] x-y",
    "{{ phase.name }}/{{ phase.goal }}/{{ workflow.name }}/{{ turn }}": "greet/Say hello./desk/3",
    "{%- if state.n > 0 -%}\n  pos {{ state.n }}\n{%- endif %}\n{{ 'hello world foo'|wordwrap(5) }}"
    "|{{ 'a\\nb'|indent(2, first=true) }}": "pos 1\nhello\nworld\nfoo|  a\n  b",
}


@pytest.mark.parametrize("source", list(ORDINARY))
def test_ordinary_templates_render_as_before(source: str) -> None:
    outcome = render(source)
    assert outcome == RenderOutcome(ORDINARY[source])


def test_big_values_from_the_host_still_print_within_the_output_limit() -> None:
    template = compile_template("{{ state.doc }}")
    doc = "word " * 10_000
    assert template.render_checked({"state": {"doc": doc}}).text == doc


# --- property: whatever the template, rendering is bounded and honest ---------------------

_NUMBERS = st.sampled_from([0, 1, 2, 3, 7, 40, 1000, 60_000, 100_000, 10**8, 10**9])
_LEAVES = st.one_of(
    _NUMBERS.map(str),
    st.sampled_from(["'ab'", "'x y'", "state.s", "state.n", "state.things", "[1, 2]",
                     "range(5)", "turn"]),
)


def _expressions() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        pair = st.tuples(inner, inner)
        return st.one_of(
            pair.map(lambda p: f"({p[0]} * {p[1]})"),
            pair.map(lambda p: f"({p[0]} ** {p[1]})"),
            pair.map(lambda p: f"({p[0]} + {p[1]})"),
            pair.map(lambda p: f"({p[0]} ~ {p[1]})"),
            pair.map(lambda p: f"({p[0]} % {p[1]})"),
            st.tuples(inner, _NUMBERS).map(lambda p: f"({p[0]}|center({p[1]}))"),
            st.tuples(inner, inner).map(lambda p: f"({p[0]}|join({p[1]}))"),
            st.tuples(inner, _NUMBERS).map(lambda p: f"('{{:>{p[1]}}}'.format({p[0]}))"),
            inner.map(lambda e: f"({e}|list)"),
            inner.map(lambda e: f"({e}|string)"),
        )

    return st.recursive(_LEAVES, extend, max_leaves=6)


def _templates() -> st.SearchStrategy[str]:
    output = _expressions().map(lambda e: f"{{{{ {e} }}}}")

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(st.sampled_from([1, 3, 100, 5000, 10000]), st.lists(inner, max_size=3)).map(
                lambda p: f"{{% for i in range({p[0]}) %}}{''.join(p[1])}{{% endfor %}}"),
            st.lists(inner, min_size=2, max_size=3).map("".join),
        )

    return st.recursive(output, extend, max_leaves=4)


@given(_templates())
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
def test_any_template_is_refused_at_load_or_renders_within_the_limits(source: str) -> None:
    try:
        template = compile_template(source, INSTRUCTION_NAMES)
    except TemplateCompileError as exc:
        assert exc.code == "PF304", (source, exc.message)
        # sound: what the load check refuses, the sandbox refuses too
        assert not unchecked(source).render_checked(CONTEXT).ok, source
        return
    outcome = template.render_checked(CONTEXT)
    assert len(outcome.text) <= MAX_OUTPUT
    assert " at 0x" not in outcome.text
    if not outcome.ok:
        assert_failed_honestly(outcome)


# --- property: whatever the nesting, loading never crashes --------------------------------

_OPENERS = [
    ("{% if state.n %}", "{% endif %}"),
    ("{% for x in state.things %}{{ loop.index }}", "{% endfor %}"),
    ("{% for x in state.things if x %}", "{% else %}e{% endfor %}"),
    ("{% for x in [1] recursive %}{{ loop.depth }}", "{% endfor %}"),
    ("{% macro m(a) %}{{ caller() if caller }}", "{% endmacro %}{{ m(1) }}"),
    ("{% call m(1) %}", "{% endcall %}"),
    ("{% filter upper %}", "{% endfilter %}"),
    ("{% set v %}", "{% endset %}{{ v }}"),
    ("{% with a = 1 %}", "{% endwith %}"),
]
_WRAPPERS = ["({}|upper)", "({} + 1)", "({} ~ 'a')", "({}).upper()", "({}).a", "({})['a']",
             "(1 if {} else 2)", "(not {})", "(- {})", "f({})"]


@st.composite
def _nested(draw: st.DrawFn) -> str:
    expression = "state.n"
    depth = draw(st.integers(0, 40))
    for wrapper in draw(st.lists(st.sampled_from(_WRAPPERS), min_size=depth, max_size=depth)):
        expression = wrapper.format(expression)
    body = f"{{{{ {expression} }}}}"
    blocks = draw(st.integers(0, 40))
    for opener, closer in draw(st.lists(st.sampled_from(_OPENERS), min_size=blocks,
                                        max_size=blocks)):
        body = f"{opener}{body}{closer}"
    prefix = "{% macro f(x) %}{{ x }}{% endmacro %}{% macro m(a) %}{{ caller() }}{% endmacro %}"
    return prefix + body


@given(_nested())
@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
def test_any_nesting_is_refused_at_load_or_compiles_and_renders(source: str) -> None:
    try:
        template = compile_template(source)
    except TemplateCompileError as exc:
        assert exc.code in ("PF302", "PF304"), exc.message
        return
    template.compile()  # never a SyntaxError, IndentationError or RecursionError
    outcome = template.render_checked(CONTEXT)
    assert outcome.ok or outcome.text == FALLBACK_TEXT


@pytest.mark.parametrize("source", [
    "{{ 'a'" + "|upper" * 200 + " }}",  # (within the token limit: see test_templates_review)
    "{{ 1" + " + 1" * 200 + " }}",
    "{{ state" + ".a" * 200 + " }}",
    "{% if true %}" * 200 + "x" + "{% endif %}" * 200,
    "{% for x in [1] %}" * 21 + "x" + "{% endfor %}" * 21,
    "{{ " + "(" * 900 + "1" + ")" * 900 + " }}",
])
def test_a_template_nested_too_deeply_is_pf304(source: str) -> None:
    with pytest.raises(TemplateCompileError) as caught:
        compile_template(source)
    assert caught.value.code == "PF304"
    assert "nested more than" in caught.value.message
