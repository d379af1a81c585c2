"""TEMPORARY stand-in (replaced by the tools branch)."""
from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolContext:
    session_id: str
    call_id: str
    phase: str
    state: Mapping[str, Any]

    @property
    def idempotency_key(self) -> str:
        return f"{self.session_id}:{self.call_id}"


@dataclass(frozen=True)
class ToolResult:
    output: Any = None
    writes: Mapping[str, Any] = field(default_factory=dict)


class ToolOutputError(Exception):
    pass


@dataclass(frozen=True)
class FunctionTool:
    name: str
    fn: Callable[..., Any]
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout: float | None = None
    context_parameter: str | None = None
    is_async: bool = False

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        kwargs = dict(arguments)
        if self.context_parameter:
            kwargs[self.context_parameter] = ctx
        out = self.fn(**kwargs)
        if inspect.isawaitable(out):
            out = await out
        return out


def tool(fn: Any = None, *, name: str | None = None, description: str | None = None,
         parameters: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
    def make(f: Callable[..., Any]) -> FunctionTool:
        sig = inspect.signature(f)
        props = {p: {} for p in sig.parameters}
        return FunctionTool(name or f.__name__, f, description or (f.__doc__ or "").strip(),
                            parameters or {"type": "object", "properties": props},
                            timeout, None, inspect.iscoroutinefunction(f))
    return make(fn) if fn is not None else make


def output_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ToolOutputError(str(exc)) from None


def split_return(value: Any, writes: tuple[str, ...]) -> tuple[Any, dict[str, Any]]:
    if isinstance(value, ToolResult):
        return value.output, dict(value.writes)
    if isinstance(value, Mapping):
        return value, {k: v for k, v in value.items() if k in writes}
    return value, {}
