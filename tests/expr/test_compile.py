"""Compile-time behaviour: what is rejected, with which message and position; ``reads``."""

from __future__ import annotations

import pytest

from phaseflow.errors import PhaseflowError
from phaseflow.expr import (
    ALLOWED_FUNCTIONS,
    GUARD_NAMES,
    MAX_DEPTH,
    MAX_LENGTH,
    GuardCompileError,
    compile_guard,
)


def reject(source: str) -> GuardCompileError:
    with pytest.raises(GuardCompileError) as info:
        compile_guard(source)
    return info.value


@pytest.mark.parametrize(
    ("source", "message", "line", "column"),
    [
        ("foo", "unknown name 'foo'", 1, 0),
        ("phaes == 'x'", "unknown name 'phaes'; did you mean 'phase'?", 1, 0),
        ("state.x and stat.y", "unknown name 'stat'; did you mean 'state'?", 1, 12),
        ("len", "'len' is a function; call it: len(...)", 1, 0),
        ("state.x.clear()", "method calls are not allowed: 'state.x.clear()'", 1, 0),
        ("1 + state.x.pop(0)", "method calls are not allowed: 'state.x.pop(0)'", 1, 4),
        ("lenn(state.x)", "function 'lenn' is not allowed; did you mean 'len'?", 1, 0),
        ("open('x')", "function 'open' is not allowed; allowed: abs, endswith", 1, 0),
        ("state(1)", "function 'state' is not allowed", 1, 0),
        ("state.x[0](1)", "only these functions can be called", 1, 0),
        ("state.__class__", "attribute names starting with '_' are not allowed: '__class__'", 1, 6),
        ("state.a._b", "attribute names starting with '_' are not allowed: '_b'", 1, 8),
        ("2 ** 3", "operator '**' is not allowed", 1, 0),
        ("state.a | 1", "operator '|' is not allowed", 1, 0),
        ("state.a & 1", "operator '&' is not allowed", 1, 0),
        ("state.a ^ 1", "operator '^' is not allowed", 1, 0),
        ("state.a << 1", "operator '<<' is not allowed", 1, 0),
        ("state.a >> 1", "operator '>>' is not allowed", 1, 0),
        ("state.a @ 1", "operator '@' is not allowed", 1, 0),
        ("~state.a", "operator '~' is not allowed", 1, 0),
        ("lambda: 1", "lambda is not allowed", 1, 0),
        ("[x for x in state.a]", "comprehensions are not allowed", 1, 0),
        ("{x for x in state.a}", "comprehensions are not allowed", 1, 0),
        ("{x: 1 for x in state.a}", "comprehensions are not allowed", 1, 0),
        ("len(x for x in state.a)", "generator expressions are not allowed", 1, 3),
        ("x for x in state.a", "generator expressions are not allowed", 1, 0),
        ("(y := 1)", "assignment expressions (:=) are not allowed", 1, 1),
        ("f'{state.x}'", "f-strings are not allowed", 1, 0),
        ("1 if state.x else 2", "conditional expressions (a if c else b) are not allowed", 1, 0),
        ("{'a': 1}", "dict literals are not allowed", 1, 0),
        ("{1}", "set literals are not allowed", 1, 0),
        ("(1, 2)", "tuples are not allowed; use a list: [a, b]", 1, 0),
        ("1, 2", "tuples are not allowed", 1, 0),
        ("state.x in ('a', 'b')", "tuples are not allowed", 1, 11),
        ("state[1, 2]", "tuples are not allowed", 1, 6),
        ("state.items[1:2]", "slices are not allowed", 1, 12),
        ("state.items[::2]", "slices are not allowed", 1, 12),
        ("max(*state.items)", "starred arguments are not allowed", 1, 4),
        ("[*state.items]", "starred arguments are not allowed", 1, 1),
        ("round(state.x, ndigits=2)", "keyword arguments are not allowed", 1, 15),
        ("len(**state)", "keyword arguments are not allowed", 1, 4),
        ("'a' * 3", "string or list repetition is not allowed", 1, 0),
        ("3 * 'a'", "string or list repetition is not allowed", 1, 0),
        ("[1] * 9", "string or list repetition is not allowed", 1, 0),
        ("('a' + state.x) * 2", "string or list repetition is not allowed", 1, 0),
        ("lower(state.x) * 2", "string or list repetition is not allowed", 1, 0),
        ("'%s' % state.x", "'%' formatting of strings is not allowed", 1, 0),
        ("b'x'", "bytes literals are not allowed", 1, 0),
        ("1j", "complex numbers are not allowed", 1, 0),
        ("...", "'...' is not allowed", 1, 0),
        ("len()", "len() takes 1 argument (0 given)", 1, 0),
        ("len(1, 2)", "len() takes 1 argument (2 given)", 1, 0),
        ("startswith('a')", "startswith() takes 2 arguments (1 given)", 1, 0),
        ("round(1, 2, 3)", "round() takes 1 to 2 arguments (3 given)", 1, 0),
        ("max()", "max() takes at least 1 argument (0 given)", 1, 0),
        ("", "empty guard expression", 1, 0),
        ("  \n ", "empty guard expression", 1, 0),
        ("state.x >", "syntax error", 1, 9),
        ("state.x) or (state.y", "syntax error: unmatched ')'", 1, 7),
        ("(state.x", "syntax error", 1, 0),
        ("state.x = 1", "syntax error", 1, 0),
        ("await state.x", "await is not allowed", 1, 0),
        ("not\nstate.ok and\n  state._x", "attribute names starting with '_'", 3, 8),
        ("state.ok and\n  foo", "unknown name 'foo'", 2, 2),
        ("'é' == state.x and foo", "unknown name 'foo'", 1, 19),
        ("state.x and\n  'é' + bar", "unknown name 'bar'", 2, 8),
    ],
)
def test_rejected(source: str, message: str, line: int, column: int) -> None:
    error = reject(source)
    assert message in error.message
    assert (error.line, error.column) == (line, column), error
    assert str(error) == error.message
    assert isinstance(error, PhaseflowError)
    assert error.code == "PF300"


def test_syntax_error_position_on_later_line() -> None:
    error = reject("state.a and\n  state.b >")
    assert error.message.startswith("syntax error")
    assert error.line == 2


def test_not_a_string() -> None:
    error = reject(True)  # type: ignore[arg-type]
    assert error.message == "a guard expression must be a string, not bool"


def test_length_limit() -> None:
    ok = "1" + " " * (MAX_LENGTH - 1)
    compile_guard(ok)
    error = reject(ok + " ")
    assert (
        error.message == f"guard expression is {MAX_LENGTH + 1} characters long; the limit is 2000"
    )


def test_depth_limit() -> None:
    compile_guard("-" * (MAX_DEPTH - 1) + "1")
    assert "nested deeper than 50 levels" in reject("-" * MAX_DEPTH + "1").message
    compile_guard("+".join(["1"] * MAX_DEPTH))
    assert "nested deeper" in reject("+".join(["1"] * (MAX_DEPTH + 1))).message
    # flat and/or chains are not deep
    compile_guard(" and ".join(["state.x"] * 150))


def test_multiline_ok() -> None:
    guard = compile_guard("state.a > 1\n  and state.b  # comment\n  or state.c\n")
    assert guard.reads == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("source", "reads", "dynamic"),
    [
        ("state.amount > 1 and state['x'].y", {"amount", "x"}, False),
        ("state.a.b.c", {"a"}, False),
        ("state['with space']", {"with space"}, False),
        ("state[phase]", set(), True),
        ("state[state.key]", {"key"}, True),
        ("state.items[turn]", {"items"}, False),
        ("len(state)", set(), True),
        ("'x' in state", set(), True),
        ("state[0]", set(), True),
        ("visits.greet and phase == 'a'", set(), False),
        ("lower(state.name) == 'bob'", {"name"}, False),
        ("1 < state.a < state.b", {"a", "b"}, False),
    ],
)
def test_reads(source: str, reads: set[str], dynamic: bool) -> None:
    guard = compile_guard(source)
    assert guard.reads == frozenset(reads)
    assert guard.dynamic_reads is dynamic


def test_exported_names() -> None:
    assert {
        "len",
        "lower",
        "upper",
        "startswith",
        "endswith",
        "min",
        "max",
        "abs",
        "round",
        "int",
        "float",
        "str",
    } == ALLOWED_FUNCTIONS
    assert {
        "state",
        "phase",
        "turn",
        "turns_in_phase",
        "returned",
        "seconds_in_phase",
        "visits",
        "true",
        "false",
        "null",
        "True",
        "False",
        "None",
    } == GUARD_NAMES


def test_is_with_literal_compiles_quietly(recwarn: pytest.WarningsRecorder) -> None:
    compile_guard("state.x is 1 and state.y is 'a' and '\\d' == state.z")
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]


def test_a_literal_left_of_is_null_compiles_quietly(recwarn: pytest.WarningsRecorder) -> None:
    """Python warns on ``is`` with a literal: such a comparison goes through the
    identity helper instead of staying native, with the same answer."""
    guard = compile_guard("1 is null or 'a' is not null")
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
    assert guard.evaluate({}).value is True
    assert compile_guard("1.5 is null").evaluate({}).value is False


def test_compile_error_pickles_with_position() -> None:
    import pickle

    error = reject("state.ok and\n  foo")
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.message, clone.line, clone.column) == (error.message, 2, 2)


def test_guard_shared_across_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from phaseflow.expr import GuardContext

    guard = compile_guard("1 < state.n < 10 and visits[phase] == state.n")

    def run(n: int) -> bool:
        ctx = GuardContext(phase="p", visits={"p": n})
        return all(guard({"n": n}, ctx) is (1 < n < 10) for _ in range(200))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(run, range(40)))


def test_visits_names_the_phases_a_guard_counts() -> None:
    guard = compile_guard("visits.implement < 3 and visits['plan'] > 0 and visits[phase] > 1")
    assert guard.visits == frozenset({"implement", "plan"})
    assert compile_guard("state.visits > 1").visits == frozenset()
