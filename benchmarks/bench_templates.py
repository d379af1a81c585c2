"""Templates are bounded: time and memory of hostile templates, and the cost of a normal one.

Every hostile template must finish within 100 ms and 50 MB (tracemalloc peak), both when
it is loaded (``compile_template`` then ``.compile()``) and when it is rendered. Templates
refused at load (PF304) are also rendered *past* the load check (their parsed text is
compiled and rendered directly), to show that the sandbox bounds them on its own. Run:

    python benchmarks/bench_templates.py [--number N]

``--typical-only`` prints just the render cost of a typical instructions template, using
only the API that older versions have too (to compare before and after a change).
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from phaseflow.template import TemplateCompileError, compile_template

CONTEXT: dict[str, Any] = {
    "state": {"customer_id": "c-42", "amount": 120, "name": "Alice Smith", "n": 1,
              "big": "b" * 10_000_000,
              "tags": ["vip", "eu"], "lookup_attempts": 2, "order": {"id": "o-7", "total": 99}},
    "phase": {"name": "refund", "goal": "Refund the order."},
    "workflow": {"name": "refund-desk", "description": "Refunds"},
    "turn": 12,
}

TYPICAL = """\
You are helping {{ state.name }} (customer {{ state.customer_id }}) with order
{{ state.order.id }}. Goal: {{ phase.goal }}
{% if state.amount > 100 %}The amount of {{ state.amount }} needs a manager's approval.{% endif %}
{%- if state.lookup_attempts > 0 %} Nothing found so far ({{ state.lookup_attempts }}
tries): check the spelling and the number.{% endif %}
Tags: {{ state.tags | join(", ") }}.
{% for tag in state.tags %}- {{ tag | upper }}
{% endfor %}Turn {{ turn }} of {{ workflow.name }}."""

#: Two lists of 2**25 items each that share their parts, and a tuple of 2**40 items.
SHARED = "{% set a = [1] %}{% set c = [1] %}" + "{% set a = [a, a] %}{% set c = [c, c] %}" * 25
SHARED_TUPLE = "{% set t = (1,) %}" + "{% set t = (t, t) %}" * 40

HOSTILE: dict[str, str] = {
    "huge power": "{{ 10**100000000 }}",
    "tower of powers": "{{ 7 ** 7 ** 7 ** 7 }}",
    "power at run time": "{{ 10 ** (state.n * 100000000) }}",
    "repeat a string": "{{ 'a' * 10**8 }}",
    "repeat at run time": "{{ 'a' * (state.n * 10**8) }}",
    "repeat a list": "{{ [1, 2] * 100000000 }}",
    "center": "{{ 'x'|center(100000000) }}",
    "center at run time": "{{ 'x'|center(state.n * 100000000) }}",
    "str.center": "{{ 'x'.center(state.n * 100000000) }}",
    "indent": "{{ 'a\\nb'|indent(state.n * 100000000) }}",
    "wordwrap": "{{ ('a ' * 30000)|wordwrap(1, wrapstring='x' * 60000) }}",
    "format width": "{{ '{0:>100000000}'.format(1) }}",
    "format width at run time": "{{ '{0:>{1}}'.format(1, state.n * 100000000) }}",
    "percent width": "{{ '%100000000s' % 1 }}",
    "format filter": "{{ '%*s'|format(state.n * 100000000, 'x') }}",
    "replace amplifies": "{{ ('a' * 60000)|replace('', 'b' * 60000) }}",
    "huge join": "{{ range(10000)|join('x' * (state.n * 60000)) }}",
    "join of references": "{{ ([('x' * 60000)] * 10000)|join }}",
    "print a list of references": "{{ [('x' * 60000)] * 60000 }}",
    "range": "{% for i in range(10**9) %}{% endfor %}",
    "nested ranges": "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}"
                     "{% endfor %}",
    "nested ranges at run time": "{% for i in range(state.n * 10000) %}"
                                 "{% for j in range(state.n * 10000) %}{% endfor %}{% endfor %}",
    "doubling in a loop": "{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}"
                          "{% endmacro %}{{ d('ab', 40) }}",
    "doubling by +": "{% macro d(s, n) %}{{ d(s + s, n - 1) if n else s|length }}"
                     "{% endmacro %}{{ d(['a'], 40) }}",
    "exponential macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                         "{% endmacro %}{{ f(20) }}",
    "endless recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "recursive loop": "{% for x in [1] recursive %}{{ loop(range(10000)) if loop.depth < 3 }}"
                      "{% endfor %}",
    "output flood": "{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}",
    "macro buffer flood": "{% macro m() %}{% for i in range(10000) %}{{ 'y' * 6000 }}"
                          "{% endfor %}{% endmacro %}{{ m()|length }}",
    "sum of lists": "{{ ([[1] * 1000] * 1000)|sum(start=[]) }}",
    "huge int": "{% macro sq(x, n) %}{{ sq(x * x, n - 1) if n else x % 10 }}{% endmacro %}"
                "{{ sq(state.n + 2, 30) }}",
    "sort in a loop": "{% for i in range(10000) %}{{ ('x' * 60000)|list|sort|length }}"
                      "{% endfor %}",
    "sum of a range in a loop": "{% for i in range(3000) %}{{ range(10000)|sum }}{% endfor %}",
    "title in a loop": "{% for i in range(100) %}{{ ('ab ' * 20000)|title|length }}{% endfor %}",
    "wordwrap in a loop": "{% for i in range(100) %}{{ ('ab ' * 20000)|wordwrap(79)|length }}"
                          "{% endfor %}",
    "printing lists in a loop": "{% for i in range(100) %}{{ (range(6000)|list)|string|length }}"
                                "{% endfor %}",
    "scan a string in a loop": "{% for i in range(10000) %}{{ ('a' * 60000).count('a') }}"
                               "{% endfor %}",
    # the review of the bounded templates, and the helper's own attacks
    "in over a list in a loop": "{% set b = (range(10000)|list) * 6 %}{% for i in range(10000) %}"
                                "{% if 'z' in b %}{% endif %}{% endfor %}",
    "the in test in select": "{% set b = (range(10000)|list) * 6 %}"
                             "{{ (range(10000)|map('string')|list)|select('in', b)|list|length }}",
    "list.count in a loop": "{% set b = (range(10000)|list) * 6 %}{% for i in range(10000) %}"
                            "{{ b.count('z') }}{% endfor %}",
    "slice in a loop": "{% set b = (range(10000)|list) * 6 %}{% for i in range(10000) %}"
                       "{% if b[1:] %}{% endif %}{% endfor %}",
    "slice a big host text": "{% for i in range(10000) %}{% if state.big[1:] %}{% endif %}"
                             "{% endfor %}",
    "in a big host text": "{% for i in range(10000) %}{% if 'z' in state.big %}{% endif %}"
                          "{% endfor %}",
    "round precision": "{{ state.n|round(-10000000) }}",
    "round precision at run time": "{{ 1.5|round(state.n * 10000000, 'floor') }}",
    "compare shared lists": SHARED + "{{ a == c }}",
    "order shared lists": SHARED + "{{ a < c }}",
    "in with shared lists": SHARED + "{{ a in [c] }}",
    "sort shared lists": SHARED + "{{ [a, c]|sort|length }}",
    "select == shared lists": SHARED + "{{ [a]|select('==', c)|list|length }}",
    "index of a shared list": SHARED + "{{ [a, c].index(c) }}",
    "percent of a shared list": SHARED + "{{ '%s' % (a,) }}",
    "format filter, shared list": SHARED + "{{ '%s'|format(a) }}",
    "tojson of a shared list": SHARED + "{{ a|tojson|length }}",
    "hash a shared tuple": SHARED_TUPLE + "{{ {t: 1} }}",
    "key a shared tuple": SHARED_TUPLE + "{{ state[t] }}",
    "unique shared tuples": SHARED_TUPLE + "{{ [t]|unique|list|length }}",
    "loop.changed shared": SHARED_TUPLE + "{% for x in [1, 2] %}{{ loop.changed(t) }}{% endfor %}",
    "printf widths": "{{ ('%()60000s' * 3000) % {'': 1} }}",
    "printf widths at run time": "{{ ('%()60000s' * (state.n * 3000)) % {'': 1} }}",
    "format filter widths": "{{ ('%(a)60000s' * (state.n * 1000))|format(a='x') }}",
    "printf precisions": "{{ ('%.60000f' * (state.n * 2)) % (1.5, 2.5) }}",
    "!r of a global": "{{ '{!r}'.format(range)[-16:] }}",
    "!r of a method": "{{ '{!r}'.format(state.tags.index)|replace(' at ', ' ') }}",
    "long number literal": "{{ 1" + "0" * 5000 + " }}",
    "long source": "x" * 70_000,
    "many tokens": "{{ state.name|upper }}" * 1000,
    "most tokens, densest": "{{ [" + "1," * 1021 + "] }}",
    "most tokens, if tags": "{% if state.n %}{% endif %}" * 290,
    "translate amplifies": "{{ 'abc'.translate({97: 'x' * 60000}) }}",
    "to_bytes": "{{ (5).to_bytes(state.n * 100000000, 'big')|length }}",
    "tojson indent": "{{ (range(1000)|list)|tojson(indent=state.n * 60000) }}",
    "tojson deep indent": "{{ [[[[[[1]]]]]]|tojson(indent=state.n * 20000) }}",
    "many ifs per iteration": "{% for i in range(10000) %}" + "{% if i > 1 %}{% endif %}" * 50
                              + "{% endfor %}",
    "many outputs per iteration": "{% for i in range(10000) %}" + "{{ '' }}" * 200
                                  + "{% endfor %}",
    "filters per iteration": "{% for i in range(10000) %}{{ i|string|upper|lower|trim|e|string"
                             "|upper|lower|trim }}{% endfor %}",
    "binops per iteration": "{% for i in range(10000) %}{% set x = i" + " * i" * 40
                            + " %}{% endfor %}",
    "heavy macro body": "{% macro m() %}" + "{% if 1 %}{% endif %}" * 250 + "{% endmacro %}"
                        "{% for i in range(10000) %}{{ m() }}{% endfor %}",
    "method calls": "{% for i in range(10000) %}{{ state.tags.index('vip') }}"
                    "{{ state.tags.count('x') }}{% endfor %}",
    "deep recursive loop": "{% for x in range(10000) recursive %}{% if loop.depth < 30 %}"
                           "{{ loop([x]) }}{% endif %}{% endfor %}",
    "caller recursion": "{% macro m(n) %}{{ caller(n) }}{% endmacro %}{% macro r(n) %}"
                        "{% call(x) m(n) %}{{ r(x) }}{% endcall %}{% endmacro %}{{ r(1) }}",
    "join a range in a loop": "{% for i in range(10000) %}{{ range(10000)|join|length }}"
                              "{% endfor %}",
    "title of title": "{{ ('ab ' * 20000)|title|title|title|length }}",
    "int of a long text": "{{ ('9' * 60000)|int }}",
    "int base 16 of a long text": "{{ ('f' * 60000)|int(base=16) }}",
    "loop over the output limit": "{% for i in range(10000) %}{{ (i, i, i, i, i, i, i, i) }}"
                                  "{% endfor %}",
    "dunder": "{{ ''.__class__.__mro__ }}",
    "lipsum": "{{ lipsum(100000) }}",
    "print range": "{{ range }}",
    "print a method": "{{ state.get }}",
}


def _call(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except TemplateCompileError as exc:
        return exc


def measure(action: Callable[[], Any]) -> tuple[float, float, Any]:
    """Milliseconds (best of 3, without tracing) and tracemalloc peak (MB) of a call, and
    its result. Time is measured apart from memory: tracing slows Python code 2-5x."""
    elapsed = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        result = _call(action)
        elapsed = min(elapsed, (time.perf_counter() - start) * 1000)
    tracemalloc.start()
    _call(action)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return elapsed, peak, result


def load(source: str) -> Any:
    template = compile_template(source)
    template.compile()
    return template


def unchecked(source: str) -> Any:
    """The template compiled without the load-time checks (the sandbox alone)."""
    from phaseflow.template import Template, environment

    template = Template(source=source, reads=frozenset(), _ast=environment().parse(source))
    template.compile()
    return template


def hostile() -> None:
    print(f"{'template':<28} {'load ms':>8} {'MB':>6}  {'render ms':>9} {'MB':>6}  outcome")
    worst_ms = worst_mb = 0.0
    for label, source in HOSTILE.items():
        load_ms, load_mb, loaded = measure(lambda: load(source))  # noqa: B023
        if isinstance(loaded, TemplateCompileError):
            outcome = f"{loaded.code} at load: {loaded.message[:60]}"
            if loaded.code == "PF302":
                render_ms = render_mb = 0.0
            else:
                try:
                    target = unchecked(source)
                except Exception as exc:
                    render_ms = render_mb = 0.0
                    outcome += f" | unchecked: Jinja cannot parse it ({type(exc).__name__})"
                else:
                    render_ms, render_mb, result = measure(
                        lambda: target.render_checked(CONTEXT))  # noqa: B023
                    outcome += f" | unchecked: {result.error}"[:150]
        else:
            render_ms, render_mb, result = measure(lambda: loaded.render_checked(CONTEXT))  # noqa: B023
            outcome = f"render: {result.error}" if result.error else f"rendered {len(result.text)}"
        worst_ms = max(worst_ms, load_ms, render_ms)
        worst_mb = max(worst_mb, load_mb, render_mb)
        print(f"{label:<28} {load_ms:>8.2f} {load_mb:>6.2f}  {render_ms:>9.2f} {render_mb:>6.2f}"
              f"  {outcome[:110]}")
    print(f"\nworst over {len(HOSTILE)} hostile templates: {worst_ms:.1f} ms, {worst_mb:.1f} MB")


def typical(number: int) -> None:
    template = compile_template(TYPICAL)
    template.render(CONTEXT)
    best = min(timeit.repeat(lambda: template.render(CONTEXT), number=number, repeat=7))
    print(f"typical instructions render: {best / number * 1e6:.1f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5_000, help="renders per repeat")
    parser.add_argument("--typical-only", action="store_true")
    args = parser.parse_args()
    if not args.typical_only:
        hostile()
    typical(args.number)


if __name__ == "__main__":
    main()
