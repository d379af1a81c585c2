"""``@tool`` and :class:`FunctionTool`: a host's callable as the session calls it.

``@tool`` turns a function (sync or async) into a :class:`FunctionTool`: a name (the
catalogue's, which may contain ``.`` and ``-``), a description and a JSON Schema read from
the signature and docstring (:mod:`phaseflow.tools.schema`), or given explicitly.
The session core then needs four things of a tool, each here as one small function:

* **check** the model's arguments: :meth:`FunctionTool.validate`
  (:mod:`phaseflow.tools.arguments`);
* **call** it: :meth:`FunctionTool.invoke`, with a :class:`ToolContext` when the function
  declares a parameter annotated ``ToolContext``;
* **split** what it returned into the model's output and the state writes:
  :func:`split_return` (see there for which keys the model sees);
* **render** the output as the text of the tool result: :func:`output_text`.

What this module does not do, by design: timeouts (the session's runner wraps
:meth:`invoke` in ``asyncio.wait_for``; a sync tool with a timeout runs in a thread of
its own for that, see :meth:`FunctionTool.invoke`), catching the tool's exceptions (the
runner turns them into error results), and the state type checks of writes (the runner
calls :func:`~phaseflow.tools.state_types.check_state_type` for each key).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, overload

from phaseflow.errors import ConfigError, PhaseflowError
from phaseflow.expr.describe import describe_exception, type_name
from phaseflow.expr.jsonvalue import check_json
from phaseflow.machine.effects import is_async_callable
from phaseflow.machine.state import readonly
from phaseflow.providers.protocol import ToolSpec
from phaseflow.spec.frozenjson import thaw
from phaseflow.spec.tool_parameters import parameter_problems
from phaseflow.tools.arguments import ArgumentValidator, compile_validator
from phaseflow.tools.schema import (
    Converter,
    analyse,
    caller_namespace,
    tool_name_problem,
)

__all__ = [
    "Attachment",
    "FunctionTool",
    "ToolContext",
    "ToolOutputError",
    "ToolResult",
    "output_text",
    "split_return",
    "tool",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class ToolOutputError(PhaseflowError):
    """A tool returned a value that has no JSON text (a ``datetime``, a ``set``, NaN, a
    cycle): raised by :func:`output_text`; the runner makes it the call's error result
    (the tool ran, but the model cannot be shown what it returned)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool that asks for it gets (a parameter annotated ``ToolContext``, which the
    model never sees): who calls, in which phase, and a read-only view of the state.

    ``state`` is deeply read-only (nested mappings and lists too), the machine's own view
    (:func:`~phaseflow.machine.state.readonly`): a tool writes state by returning it
    (``writes``), never behind the session's back. ``idempotency_key`` is the same for a
    call run again after a crash, so a tool with side effects can make them once.
    """

    #: Recognised by :mod:`phaseflow.tools.schema`, which does not import this module.
    __phaseflow_tool_context__: ClassVar[bool] = True

    session_id: str
    call_id: str
    phase: str
    state: Mapping[str, Any] = field(default_factory=dict)
    #: the host's edit limits: ``(path, first line, last line)`` a tool may change, per
    #: absolute path (``Session.limit_edits``); a path without one is not limited
    edit_ranges: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", readonly(self.state))

    def may_edit(self, path: str, start: int = 1, end: int | None = None) -> bool:
        """Whether a tool may change lines ``start..end`` of the file ``path`` (``end``
        None: to the end of the file) under the host's edit limits: a file-editing tool
        asks before it writes, and refuses what the host did not allow."""
        for limited, first, last in self.edit_ranges:
            if limited == path:
                return first <= start and (end is not None and start <= end <= last)
        return True

    @property
    def idempotency_key(self) -> str:
        """``session_id:call_id``: stable across retries and resumes of one call."""
        return f"{self.session_id}:{self.call_id}"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's return value that keeps apart what the model sees (``output``, rendered
    by :func:`output_text`) and what is written to the state (``writes``; each key must be
    one the workflow lets the tool write, and is type-checked before it is written)."""

    output: Any = None
    writes: Mapping[str, Any] = field(default_factory=dict)
    #: images (or files) the model sees with ``output``: kept once by digest with the
    #: session, sent in the provider's own form; one the provider cannot take (too big,
    #: a type it does not take, bytes that are not what they say) makes the result an
    #: error naming why
    attachments: Sequence[Attachment] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.writes, Mapping):
            raise ConfigError(f"ToolResult.writes must be a mapping of state keys, not "
                              f"{type_name(self.writes)}")
        object.__setattr__(self, "writes", MappingProxyType(dict(self.writes)))
        items = tuple(self.attachments)
        for item in items:
            if not isinstance(item, Attachment):
                raise ConfigError("ToolResult.attachments must be Attachment values, not "
                                  f"{type_name(item)}")
        object.__setattr__(self, "attachments", items)


@dataclass(frozen=True, slots=True)
class Attachment:
    """An image or a file a tool returns (``ToolResult(attachments=[...])``): its bytes
    and media type (``None``: read from the bytes, e.g. a PNG's signature)."""

    data: bytes
    media_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise ConfigError(f"Attachment.data must be bytes, not {type_name(self.data)}")
        object.__setattr__(self, "data", bytes(self.data))

    @classmethod
    def from_path(cls, path: str | Path, media_type: str | None = None) -> Attachment:
        """The bytes of the file at ``path``."""
        return cls(Path(path).read_bytes(), media_type)


@dataclass(frozen=True, slots=True, eq=False)
class FunctionTool:
    """A host callable as a tool; made by :func:`tool`, immutable (``with_name`` and
    ``with_parameters`` give changed copies). Calling it calls the function itself, so
    the host can still use and test it directly."""

    name: str
    fn: Callable[..., Any]
    description: str
    parameters: dict[str, Any]
    timeout: float | None
    context_parameter: str | None
    is_async: bool
    _positional: tuple[str, ...] = field(default=(), repr=False)
    _var_keyword: str | None = field(default=None, repr=False)
    _converters: Mapping[str, Converter] = field(default_factory=dict, repr=False)
    _validator: list[ArgumentValidator] = field(default_factory=list, repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def validate(self, arguments: Any) -> str | None:
        """``None`` when ``arguments`` (the parsed JSON the model sent) fit
        :attr:`parameters`, else the message for the model. The compiled check is kept."""
        if not self._validator:
            self._validator.append(compile_validator(self.parameters))
        return self._validator[0](arguments)

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext, *,
                     threaded: bool = False) -> Any:
        """Call the function with ``arguments`` (validated) as keyword arguments, plus
        ``ctx`` for its context parameter, and return what it returned.

        Arguments annotated with a dataclass, an ``Enum``, a ``set``, a ``tuple``, a
        pydantic model (...) are converted from their JSON first. A sync function runs
        right here, in the event loop's thread (deterministic, no thread pool: a tool
        that blocks for long should be async), unless ``threaded``: then it runs in a
        daemon thread of its own and this coroutine waits for it, so that a timeout
        around it ends the wait at the deadline. Nothing can stop a running Python
        function, so a timed-out sync tool's thread runs on until the function returns;
        what it returns then is dropped (the call already has its error result, and its
        writes are never applied), and being a daemon thread it never holds up the
        process's exit. An async function, or an awaitable returned, is awaited.
        Whatever the function raises propagates: the runner makes it the error result.
        """
        if threaded and not self.is_async:
            result = await _in_thread(self._call, arguments, ctx)
        else:
            result = self._call(arguments, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _call(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        """The function called with the model's arguments (converted), as it returns."""
        kwargs = dict(arguments)
        converters = self._converters
        if converters:
            named = self._var_keyword is not None and converters.get(self._var_keyword)
            for key, value in kwargs.items():
                convert = converters.get(key)
                if convert is None and named and key not in self._named():
                    convert = named
                if convert is not None:
                    kwargs[key] = convert(value)
        args: list[Any] = []
        for name in self._positional:
            if name not in kwargs:
                break
            args.append(kwargs.pop(name))
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = ctx
        return self.fn(*args, **kwargs)

    def signature_problem(self, declared: Mapping[str, Any]) -> str | None:
        """Why this function cannot take arguments that fit ``declared`` (a catalogue's
        ``parameters`` schema, which the model is shown instead of the function's own),
        or ``None``: a declared argument the function has no parameter for, or a
        parameter without a default that the schema does not declare. (A parameter
        without a default whose argument the schema leaves optional is allowed: many
        schemas leave ``required`` out, and the model's call then fails as the function
        does.) Asked
        at start, so the mismatch is a configuration error, not a ``TypeError`` at the
        model's first call."""
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return None  # a callable that hides its signature: nothing to compare
        kinds = inspect.Parameter
        own = {n: p for n, p in signature.parameters.items()
               if n != self.context_parameter and p.kind not in (kinds.VAR_POSITIONAL,
                                                                  kinds.VAR_KEYWORD)}
        takes_any = any(p.kind is kinds.VAR_KEYWORD for p in signature.parameters.values())
        properties = declared.get("properties")
        names = list(properties) if isinstance(properties, Mapping) else []
        if not takes_any:
            extra = [n for n in names if n not in own]
            if extra:
                return (f"the function has no parameter for the declared argument(s) "
                        f"{', '.join(map(repr, extra))}")
        for name, parameter in own.items():
            if parameter.default is kinds.empty and name not in names:
                return (f"its parameter {name!r} has no default and is not among the declared "
                        f"arguments ({', '.join(names) or 'none'})")
        return None

    def _named(self) -> frozenset[str]:
        properties = self.parameters.get("properties")
        return frozenset(properties) if isinstance(properties, Mapping) else frozenset()

    def spec(self) -> ToolSpec:
        """The tool as a provider offers it to the model."""
        return ToolSpec(self.name, self.description, self.parameters)

    def with_name(self, name: str) -> FunctionTool:
        """This tool under another name (e.g. the catalogue's ``crm.lookup_customer``)."""
        problem = tool_name_problem(name)
        if problem is not None:
            raise ConfigError(f"tool: {problem}")
        return dataclasses.replace(self, name=name, _validator=[])

    def with_parameters(self, schema: Mapping[str, Any]) -> FunctionTool:
        """This tool with an explicit JSON Schema (e.g. the workflow file's
        ``parameters``); the function then gets the arguments as the JSON the model sent,
        without conversions."""
        return dataclasses.replace(self, parameters=_explicit_schema(self.name, schema),
                                   _converters=_EMPTY, _validator=[])


@overload
def tool(fn: Callable[..., Any]) -> FunctionTool: ...


@overload
def tool(
    fn: None = None, *, name: str | None = None, description: str | None = None,
    parameters: Mapping[str, Any] | None = None, timeout: float | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None,
    description: str | None = None, parameters: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make ``fn`` a tool: ``@tool`` or ``@tool(name="crm.lookup_customer", ...)``.

    ``name`` defaults to the function's name; ``description`` to the docstring's first
    paragraph; ``parameters`` to the schema read from the signature (an explicit one must
    be a valid draft 2020-12 ``object`` schema). ``timeout`` is seconds per call, applied
    by the runner. Raises :class:`ConfigError` for a signature with no JSON form, a bad
    name, schema or timeout - when the module defining the tool is imported.
    """
    localns = caller_namespace()
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not math.isfinite(timeout) or timeout <= 0):
        raise ConfigError(f"tool: timeout must be a positive number of seconds, not {timeout!r}")

    def make(target: Callable[..., Any]) -> FunctionTool:
        if isinstance(target, FunctionTool):
            target = target.fn
        if not callable(target):
            raise ConfigError(f"tool: {type_name(target)} object is not callable")
        shape = analyse(target, name=name, derive_schema=parameters is None, localns=localns)
        schema = (_explicit_schema(shape.name, parameters) if parameters is not None
                  else shape.parameters)
        assert schema is not None
        return FunctionTool(
            name=shape.name,
            fn=target,
            description=description if description is not None else shape.description,
            parameters=schema,
            timeout=float(timeout) if timeout is not None else None,
            context_parameter=shape.context_parameter,
            is_async=is_async_callable(target),
            _positional=shape.positional,
            _var_keyword=shape.var_keyword,
            _converters=MappingProxyType(dict(shape.converters)),
        )

    return make if fn is None else make(fn)


async def _in_thread(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` in a new daemon thread, awaited without blocking the loop. A
    cancelled wait leaves the thread to finish on its own; its outcome is dropped."""
    import contextlib
    import contextvars
    import threading

    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return  # the wait was cancelled (a timeout): nobody reads this any more
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value, error = context.run(call, *args), None
        except BaseException as exc:  # handed to the awaiting coroutine, not lost here
            value, error = None, exc
        # (a loop closed meanwhile raises RuntimeError: there is nobody to tell)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="phaseflow-tool", daemon=True).start()
    return await future


def _explicit_schema(name: str, schema: Any) -> dict[str, Any]:
    """A host's own schema, checked once and kept as a plain copy (read-only mappings and
    tuples, as a compiled workflow holds them, become ``dict`` and ``list``)."""
    if not isinstance(schema, Mapping):
        raise ConfigError(f"tool {name!r}: parameters must be a JSON Schema mapping, "
                          f"not {type_name(schema)}")
    plain = thaw(schema)
    checked = check_json(plain)
    if checked.problem is not None:
        raise ConfigError(f"tool {name!r}: parameters are not JSON: {checked.problem}")
    if plain.get("type") != "object":
        raise ConfigError(f"tool {name!r}: parameters must be an object schema "
                          "(\"type\": \"object\"): a tool takes named arguments")
    problems = parameter_problems(plain)
    if problems:
        path, message = problems[0]
        where = "/".join(str(p) for p in path)
        raise ConfigError(f"tool {name!r}: parameters are not a valid JSON Schema"
                          f"{f' (at {where})' if where else ''}: {message}")
    result: dict[str, Any] = checked.value
    return result


# -- what a tool returned ---------------------------------------------------------------------

def split_return(value: Any, writes: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """What the model sees of a tool's return ``value``, and the state writes it asks for.

    * A :class:`ToolResult`: its ``output``, and all its ``writes`` (candidates: the
      caller refuses a key not in the tool's ``writes``, with an error event).
    * A mapping: the keys listed in ``writes`` (the tool's declared writes, from the
      workflow's catalogue) are written, in the mapping's order; the model sees the
      **whole** mapping, written keys included. The spec's "its other keys are output for
      the model only" says where the other keys go (not to the state); it does not hide
      the written ones: a model told ``{}`` after a lookup could not tell the customer
      what was found, and every tool framework shows a tool's return value to the model.
      A tool that must keep a written value from the model returns a ``ToolResult``.
    * Anything else: the value itself, and no writes.

    Written values are returned as they are; the caller checks each one with
    :func:`~phaseflow.tools.state_types.check_state_type` (or takes the normalised
    value from :func:`~phaseflow.tools.state_types.state_value`). Reading a host
    mapping may run its code; what that raises propagates, like the tool's own errors.
    """
    if isinstance(value, ToolResult):
        return value.output, dict(value.writes)
    if isinstance(value, Mapping) and writes:
        wanted = frozenset(writes)
        found: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and key in wanted:
                found[str.__str__(key)] = item
        return value, found
    return value, {}


def output_text(value: Any, *, tool: str | None = None) -> str:
    """The text of a tool result for the model: a ``str`` as it is, anything else (a
    :class:`ToolResult`'s ``output`` likewise) as JSON.

    The JSON is ``json.dumps`` with its default separators (``", "``, ``": "``: compact,
    one line, still readable), non-ASCII characters as they are, keys in the order the
    tool gave them. ``None`` is ``null``. Dataclass instances and pydantic models become
    objects (pydantic's ``model_dump(mode="json")``), ``Enum`` members their values, any
    mapping an object and any sequence but text an array; JSON object keys that are
    numbers, booleans or null are written as strings (JSON's only key type).

    Raises :class:`ToolOutputError` (never anything else, for an :class:`Exception`)
    for a value with no JSON text: a set, bytes, a date, NaN or an infinity, an integer
    too long to write, a cycle, nesting deeper than Python can recurse, a mapping
    whose methods raise. The message names what was found and what to return instead.
    """
    if isinstance(value, ToolResult):
        value = value.output
    if isinstance(value, str):
        return str.__str__(value)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_jsonable)
    except _NotJson as refusal:
        reason = refusal.reason
    except RecursionError:
        reason = "it is nested too deeply"
    except ValueError as exc:
        text = str(exc)
        reason = ("it holds NaN or an infinity" if "Out of range float" in text
                  else "it contains itself (a cycle)" if "Circular reference" in text
                  else "it holds an integer too long to write" if "digits" in text
                  else f"ValueError: {text[:200]}")
    except TypeError as exc:
        reason = f"{str(exc)[:200]}"
    except Exception as exc:
        reason = f"reading it raised {describe_exception(exc, 200)}"
    who = f"tool {tool!r}" if tool is not None else "the tool"
    raise ToolOutputError(
        f"{who} returned a value that has no JSON text: {reason}; return JSON values "
        "(str, int, float, bool, None, lists and dicts with str keys), a dataclass or a "
        "pydantic model"
    )


class _NotJson(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _jsonable(value: Any) -> Any:
    """``json.dumps``'s ``default``: the JSON form of what it cannot write itself."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        raise _NotJson(f"a value of type {type_name(value)} (JSON has no sets: return a "
                       "sorted list)")
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray | memoryview):
        return list(value)
    dump = getattr(type(value), "model_dump", None)
    if callable(dump) and any((getattr(c, "__module__", "") or "").startswith("pydantic")
                              for c in type(value).__mro__):
        return value.model_dump(mode="json")
    hint = " (return value.isoformat())" if callable(getattr(value, "isoformat", None)) else ""
    raise _NotJson(f"a value of type {type_name(value)}{hint}")
