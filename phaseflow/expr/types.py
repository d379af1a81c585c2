"""The public value types of the guard compiler: its error, its input context, its result.

They live apart from the compiler so that the machine and the loader can import them
without pulling in ``ast`` handling, and so that :class:`Guard` can be documented next to
the types it consumes and produces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from phaseflow.errors import PhaseflowError
from phaseflow.expr._runtime import GuardTypeError, GuardWorkLimit
from phaseflow.expr.describe import describe_exception

__all__ = ["GUARD_FALSE", "GUARD_TRUE", "Guard", "GuardCompileError", "GuardContext", "GuardResult"]

_NO_VISITS: Mapping[str, int] = MappingProxyType({})


class GuardCompileError(PhaseflowError):
    """A guard expression is not valid (diagnostic PF300).

    ``line`` is 1-based and ``column`` 0-based, both *within the expression's source*
    (in characters, not bytes), so that the loader can add the offset of the YAML scalar
    the expression came from. ``str(error)`` is ``message`` alone, for the same reason: the
    caller owns the formatting of positions.
    """

    code: ClassVar[str] = "PF300"

    def __init__(self, message: str, line: int = 1, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    def __reduce__(self) -> tuple[type[GuardCompileError], tuple[str, int, int]]:
        return type(self), (self.message, self.line, self.column)

    def __repr__(self) -> str:
        return f"GuardCompileError({self.message!r}, line={self.line}, column={self.column})"


@dataclass(frozen=True, slots=True)
class GuardContext:
    """Everything a guard can see besides the state; the machine builds one per evaluation.

    ``visits`` maps a phase name to the number of times it was entered; a phase that is not
    in it was never entered (``visits.x`` is then 0).
    """

    phase: str = ""
    turn: int = 0
    turns_in_phase: int = 0
    seconds_in_phase: float = 0.0
    visits: Mapping[str, int] = field(default_factory=lambda: _NO_VISITS)
    #: the terminal phase the last call of another workflow ended in (``None`` before one)
    returned: str | None = None


@dataclass(frozen=True, slots=True)
class GuardResult:
    """The outcome of one evaluation.

    A guard is a condition, so its outcome is a value rather than an exception: ``value``
    is whether it holds, and ``error`` explains a run-time type error (``'a' < 1``,
    ``len(5)``, division by zero) that made it false, so the machine can report it in the
    session's trace instead of silently never taking a transition.
    """

    value: bool
    error: str | None = None

    def __bool__(self) -> bool:
        return self.value


#: Preallocated results for the no-error case, so evaluation allocates nothing.
GUARD_TRUE = GuardResult(True)
GUARD_FALSE = GuardResult(False)

_DEFAULT_CONTEXT = GuardContext()

GuardFunction = Callable[[Mapping[str, Any], GuardContext], Any]


@dataclass(frozen=True, slots=True)
class Guard:
    """A compiled guard: immutable, holds no per-session data, safe to share across threads.

    Build one with :func:`phaseflow.expr.compile_guard`. ``reads`` is the set of top-level
    state keys the expression names literally (``state.amount``, ``state['x'].y``); when
    ``dynamic_reads`` is true it also reads keys that are only known at run time
    (``state[phase]``) or uses the state as a whole (``len(state)``), so ``reads`` is then a
    lower bound. ``visits`` is the set of phase names it reads visit counts of
    (``visits.implement``), so a loader can flag a misspelt phase. ``absence_tested`` is
    the set of keys it reads *only* to test that they are absent (``state.x == null``,
    ``not state.x``): a false guard is never waiting for them (see
    :mod:`phaseflow.expr.absence`).

    A guard pickles as its source and is compiled again on unpickling (the compiled
    function cannot be pickled); :mod:`phaseflow.expr.compiler`, the only maker of guards,
    registers that reduction, so this module never imports the compiler.
    """

    source: str
    reads: frozenset[str]
    dynamic_reads: bool = field(compare=False)
    _function: GuardFunction = field(repr=False, compare=False)
    visits: frozenset[str] = field(default=frozenset(), compare=False)
    absence_tested: frozenset[str] = field(default=frozenset(), compare=False)

    def evaluate(self, state: Mapping[str, Any], ctx: GuardContext | None = None) -> GuardResult:
        """Evaluate against ``state``; never raises, never mutates ``state``.

        A run-time type error makes the result false with ``error`` set; so does anything
        unexpected (a host mapping whose ``get`` raises, a recursion limit on a
        self-referencing list), because a guard must not be able to crash the session.
        """
        try:
            if self._function(state, _DEFAULT_CONTEXT if ctx is None else ctx):
                return GUARD_TRUE
            return GUARD_FALSE
        except Exception as exc:  # the whole point: a guard never raises into the host
            return GuardResult(False, _describe(exc))

    def __call__(self, state: Mapping[str, Any], ctx: GuardContext | None = None) -> bool:
        """``guard(state, ctx)`` is ``guard.evaluate(state, ctx).value``."""
        return self.evaluate(state, ctx).value


def _describe(exc: Exception) -> str:
    """The message for a failed evaluation: ours verbatim, others (raised by a host
    mapping the guard read, say) through the describer that cannot fail."""
    if type(exc) is GuardTypeError or type(exc) is GuardWorkLimit:
        return exc.args[0] if exc.args and type(exc.args[0]) is str else type(exc).__name__
    return describe_exception(exc)
