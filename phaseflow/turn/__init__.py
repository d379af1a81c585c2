"""The turn core: what may happen inside one turn of an agent.

Four parts, each an immutable value with pure operations that return the next value or a
:class:`Rejected` (never an exception for a domain outcome), and lossless plain-JSON
forms (``to_json`` / ``from_json``). See ``docs/turn-core.md``.

* :mod:`~phaseflow.turn.execution` - mode, run phase, queues, approvals, trust, edit ranges
* :mod:`~phaseflow.turn.progress` - turn identity, stale events, tool-result slots
* :mod:`~phaseflow.turn.continuation` - exact history and exactly-once tool effects
* :mod:`~phaseflow.turn.output` - captured versus shown tool output

Every constructor and operation reads its arguments through :mod:`~phaseflow.turn.inputs`
(one rule: the canonical form, or a refusal - ``Rejected`` from an operation that can
refuse, :class:`TurnInputError` otherwise).

Each part's public names are listed once, in its own ``__all__``; the package re-exports
them all, with the few names of ``inputs`` and ``rejections`` a caller needs.
"""

from __future__ import annotations

from phaseflow.turn import continuation, execution, messages, output, progress
from phaseflow.turn.continuation import *  # noqa: F403
from phaseflow.turn.execution import *  # noqa: F403
from phaseflow.turn.inputs import MAX_INT, TurnInputError
from phaseflow.turn.messages import *  # noqa: F403
from phaseflow.turn.output import *  # noqa: F403
from phaseflow.turn.progress import *  # noqa: F403
from phaseflow.turn.rejections import Rejected, RejectionReason, is_rejected

__all__ = ["MAX_INT", "Rejected", "RejectionReason", "TurnInputError", "is_rejected"]
__all__ += continuation.__all__
__all__ += execution.__all__
__all__ += messages.__all__
__all__ += output.__all__
__all__ += progress.__all__
