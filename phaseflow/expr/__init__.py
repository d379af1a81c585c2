"""Guard expressions: the conditions of transitions and entry guards.

A guard is a small Python-syntax expression (see "Guard expressions" in the workflow
format spec) compiled once by :func:`compile_guard` into an immutable :class:`Guard`.
Evaluating a guard never raises and never mutates the state; a run-time type error makes
it false and is described in :attr:`GuardResult.error`.

Decisions where the spec is silent (tests pin each one down):

* Literals: strings, ints, floats, lists, ``true/false/null`` (and ``True/False/None``).
  Dict and set literals and tuples are rejected - the spec lists none of them, and a list
  does everything a tuple would (``state.x in ['a', 'b']``).
* ``bool`` is not a number: ``true + 1`` and ``true < 2`` are type errors (a flag used as
  a number is a bug); ``==`` keeps Python's meaning, so ``true == 1`` is true.
* Ordering (``< <= > >=``, ``min``, ``max``) works on two numbers or two strings only.
* ``a is b`` is identity for ``null/true/false`` and "same type and equal" otherwise, so it
  never depends on CPython's interning.
* ``x in s`` works on strings (substring), lists and mappings (key); ``in null`` is null.
* Subscripts: an int index on a list or string (negative counts from the end), a string
  key on a mapping; anything else - out of range, wrong key type - is null.
  ``state[expr]`` with a non-literal key is allowed and reads nothing specific: it sets
  :attr:`Guard.dynamic_reads` (as does using ``state`` as a whole, ``len(state)``).
* Functions propagate null: ``len(null)``, ``lower(null)``, ``str(null)`` are null.
  ``min``/``max`` take a list or several arguments. ``startswith``/``endswith`` accept a
  list of alternatives. ``int``/``float`` parse strings of up to 100 characters;
  ``round(x, n)`` needs ``|n| <= 100``; an integer product may not exceed 10,000 bits;
  ``+`` may not build a string or list over 1,000,000 long. ``str(true)`` is ``'True'``.
* Work is bounded per evaluation: ``in`` on a list, ``min``/``max`` of a list, list
  ``+``, ``startswith``/``endswith`` with a list, and ``==``/``!=``/``is`` between two
  values neither of which is a scalar or a literal are charged by the items they walk,
  at most 1,000,000 in all (``_runtime.WORK_LIMIT``); beyond it the guard is false with
  the error "guard exceeded its work limit". Everything else is O(1) or string-speed.
* Nesting depth counts expression nodes, so ``1+1+...`` with more than 50 terms is
  too deep as well as 51 nested calls.
* Error positions are 1-based lines and 0-based character columns within the expression
  source. A forbidden ``_`` attribute is reported at the attribute name.
"""

from phaseflow.expr.compiler import (
    ALLOWED_FUNCTIONS,
    GUARD_NAMES,
    MAX_DEPTH,
    MAX_LENGTH,
    compile_guard,
)
from phaseflow.expr.types import (
    GUARD_FALSE,
    GUARD_TRUE,
    Guard,
    GuardCompileError,
    GuardContext,
    GuardResult,
)

__all__ = [
    "ALLOWED_FUNCTIONS",
    "GUARD_FALSE",
    "GUARD_NAMES",
    "GUARD_TRUE",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "Guard",
    "GuardCompileError",
    "GuardContext",
    "GuardResult",
    "compile_guard",
]
