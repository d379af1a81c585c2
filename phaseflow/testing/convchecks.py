"""The checks of a conversation's ``expect`` step: what the session shows, compared with
what the test file expects. Each check gives one readable problem (or ``None``), saying
what was expected and what was found."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from phaseflow.expr.describe import did_you_mean
from phaseflow.providers.protocol import ProviderRequest
from phaseflow.session import events as ev
from phaseflow.session.agent import Session
from phaseflow.spec.model import Workflow
from phaseflow.testing.matching import state_problems
from phaseflow.turn.messages import AssistantMessage, TextPart

__all__ = ["Seen", "check"]



@dataclass(frozen=True, slots=True)
class Seen:
    """What a check looks at: the session, the request the check is about (the one the
    next reply answers, or the most recent), the mocks and stand-ins called since the
    previous ``expect``, and the last tool group's calls with every result so far."""

    session: Session
    request: ProviderRequest | None
    called: list[str]
    group: list[str]  # call ids, in the model's order
    names: Mapping[str, str]  # call id -> tool name
    results: Mapping[str, ev.ToolResultEvent]  # call id -> its result
    workflow: Workflow


def check(key: str, expected: Any, seen: Seen) -> str | None:
    """The problem the check ``key`` finds, or ``None`` when it holds."""
    return _CHECKS[key](expected, seen)


def _phase(expected: Any, seen: Seen) -> str | None:
    found = seen.session.phase
    if found == expected:
        return None
    phases = seen.workflow.phases
    hint = did_you_mean(expected, phases) if expected not in phases else ""
    return f"phase: expected '{expected}'{hint}, found '{found}'"


def _path(expected: Any, seen: Seen) -> str | None:
    found = list(seen.session.path)
    if found == list(expected):
        return None
    return f"path: expected {' › '.join(expected)}, found {' › '.join(found)}"


def _state(expected: Any, seen: Seen) -> str | None:
    return "\n  ".join(state_problems(expected, _plain(seen.session.state))) or None


def _offered(expected: Any, seen: Seen) -> str | None:
    if seen.request is None:
        return "offered: no request was sent to the model yet"
    found = [t.name for t in seen.request.tools]
    if sorted(set(found)) == sorted(set(expected)):
        return None
    return f"offered: expected {_show(sorted(expected))}, found {_show(sorted(found))}"


def _results(expected: Any, seen: Seen) -> str | None:
    found = [seen.results.get(call_id) for call_id in seen.group]
    statuses = [r.status if r else "pending" for r in found]
    wanted = [e["status"] for e in expected]
    if statuses != wanted:
        shown = [f"{seen.names[c]}: {r.status if r else 'no result yet'}"
                 for c, r in zip(seen.group, found, strict=True)]
        return (f"results: expected {_show(wanted)}, found {_show(statuses)}"
                + (f" ({', '.join(shown)})" if shown else " (no tool was called)"))
    for want, result in zip(expected, found, strict=True):
        if result is not None and want["contains"] not in result.content:
            return (f"results: the result of {result.name} does not contain "
                    f"{want['contains']!r}: {result.content!r}")
    return None


def _reply(expected: Any, seen: Seen) -> str | None:
    last = next((m for m in reversed(seen.session.history)
                 if isinstance(m, AssistantMessage)), None)
    text = _text(last.content) if last is not None else ""
    if expected in text:
        return None
    return f"reply: expected to contain {expected!r}, found {text!r}"


def _status(expected: Any, seen: Seen) -> str | None:
    found = seen.session.status
    return None if found == expected else f"status: expected {expected}, found {found}"


def _approval(expected: Any, seen: Seen) -> str | None:
    pending = seen.session.pending_approval
    found = pending.name if pending is not None else None
    if found == expected:
        return None
    return f"approval: expected {expected or 'none pending'}, found {found or 'none pending'}"


def _called(expected: Any, seen: Seen) -> str | None:
    if seen.called == list(expected):
        return None
    return f"called: expected {_show(expected)}, found {_show(seen.called)}"


def _navigation(expected: Any, seen: Seen) -> str | None:
    if seen.request is None:
        return "navigation: no request was sent to the model yet"
    request = seen.request
    system = "\n\n".join(t for t in (request.system, request.context) if t)
    absent = [s for s in expected if s not in system]
    if not absent:
        return None
    quoted = ", ".join(repr(s) for s in absent)
    return (f"navigation: expected to contain {quoted}, found:\n"
            + "\n".join(f"      | {line}" for line in system.splitlines()))


_CHECKS: dict[str, Callable[[Any, Seen], str | None]] = {
    "phase": _phase,
    "path": _path,
    "state": _state,
    "offered": _offered,
    "results": _results,
    "reply": _reply,
    "status": _status,
    "approval": _approval,
    "called": _called,
    "navigation": _navigation,
}


def _plain(value: Any) -> Any:
    """A plain copy of a (read-only) state value: dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or (
            hasattr(value, "__getitem__") and hasattr(value, "__len__")
            and not isinstance(value, str | bytes)):
        return [_plain(v) for v in value]
    return value


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def _show(values: Any) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"
