"""A tool's JSON Schema, read from its Python signature and docstring.

The model sees a tool as a name, a description and a JSON Schema of its arguments; a host
writes a plain Python function. :func:`schema_for` bridges the two the way the OpenAI
Agents SDK's ``function_tool`` and LangChain's ``@tool`` do, so a host never writes a
schema by hand for an ordinary function:

* ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any`` (any JSON), ``list[X]``,
  ``set[X]`` (an array of unique items), ``tuple[X, Y]`` and ``tuple[X, ...]``,
  ``dict[str, X]``, ``Literal[...]`` and ``Enum`` classes (an ``enum``), ``X | None`` and
  other unions (``anyOf``; ``{"type": [..]}`` when every branch is a bare type),
  ``Annotated[X, "description"]`` (and ``annotated_types`` bounds such as ``Ge``),
  ``TypedDict`` and dataclasses (closed objects), ``NewType``; a pydantic model through
  its own ``model_json_schema()`` when the annotation is one (pydantic is never imported
  here: it is recognised by its class, so it stays an optional dependency).
* ``required`` lists the parameters without defaults (what OpenAI function calling
  expects); a JSON default is shown as ``default``; the top-level object and every
  dataclass or TypedDict object are closed (``additionalProperties: false``), since an
  unknown argument is a mistake of the model the function could not take anyway.
* A parameter without an annotation accepts any JSON value (``{}``); a parameter
  annotated with the tool context class is left out (the session passes it).
* A recursive dataclass or TypedDict is described once in ``$defs`` and referred to.
* Anything else (a custom class, ``datetime``, a ``TypeVar``) is a
  :class:`~phaseflow.errors.ConfigError` naming the tool and the parameter: it has no
  JSON form the model could write, and the host can pass ``parameters=`` instead.

The same walk over the annotations yields a *converter* per parameter (:func:`analyse`),
so that a function annotated with a dataclass, an ``Enum``, a ``set`` or a pydantic model
gets one, not the plain JSON the model wrote.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import functools
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.expr.jsonvalue import check_json
from phaseflow.tools.arguments import compile_validator, json_type

__all__ = [
    "CONTEXT_MARKER",
    "CallableShape",
    "Converter",
    "analyse",
    "caller_namespace",
    "parse_docstring",
    "schema_for",
    "tool_name_problem",
]

#: A class attribute that marks the tool context class (``ToolContext`` sets it), so that
#: this module recognises a context parameter without importing the module defining it.
CONTEXT_MARKER = "__phaseflow_tool_context__"

#: Turns a validated JSON argument into the value the function is annotated to take.
Converter = Callable[[Any], Any]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
_NoneType = type(None)
_LIST_ORIGINS = {list, cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection}
_SET_ORIGINS = {set, frozenset, cabc.Set, cabc.MutableSet}
_DICT_ORIGINS = {dict, cabc.Mapping, cabc.MutableMapping}
_SCALARS: dict[Any, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}
#: annotated_types' constraint attributes and the JSON Schema keyword each one is.
_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum",
           "min_length": "minLength", "max_length": "maxLength"}


@dataclass(frozen=True, slots=True)
class CallableShape:
    """What a callable looks like to the session: the tool's ``name`` and
    ``description``, the JSON Schema of its ``parameters`` (``None`` when not derived),
    the ``context_parameter`` (or ``None``), the parameters that must be passed by
    position (positional-only ones, in order), the name of its ``**kwargs`` (or ``None``)
    and the converters of the parameters whose values are not the JSON as it is."""

    name: str
    description: str
    parameters: dict[str, Any] | None
    context_parameter: str | None
    positional: tuple[str, ...] = ()
    var_keyword: str | None = None
    converters: Mapping[str, Converter] = field(default_factory=dict)


def tool_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a tool (``None`` when it can): letters, digits, ``_``,
    ``.`` and ``-``, not starting with a digit, ``.`` or ``-``, at most 128 characters."""
    if not isinstance(name, str):
        return f"a tool name must be a string, not {type(name).__name__}"
    if not _NAME.fullmatch(name):
        return (f"{name[:60]!r} is not a valid tool name (letters, digits, '_', '.' and '-', "
                "starting with a letter or '_', at most 128 characters)")
    return None


def schema_for(fn: Callable[..., Any], *, name: str | None = None) -> dict[str, Any]:
    """The JSON Schema (an ``object`` schema, plain JSON) of ``fn``'s arguments, as the
    model is offered it; see the module docstring. Raises :class:`ConfigError` for a
    parameter whose annotation has no JSON form."""
    parameters = analyse(fn, name=name, localns=caller_namespace()).parameters
    assert parameters is not None
    return parameters


def caller_namespace(depth: int = 2) -> dict[str, Any]:
    """The local names of the caller's caller (``depth`` frames up): where a tool defined
    inside a function finds the classes its string annotations name (``from __future__
    import annotations`` makes every annotation a string, and a local class is in no
    module's globals). pydantic resolves annotations the same way."""
    frame = sys._getframe(depth)
    return dict(frame.f_locals) if frame.f_code.co_name != "<module>" else {}


def analyse(
    fn: Callable[..., Any], *, name: str | None = None, derive_schema: bool = True,
    localns: Mapping[str, Any] | None = None,
) -> CallableShape:
    """Read ``fn``'s signature, annotations and docstring once (see :class:`CallableShape`).
    ``localns``: names to resolve string annotations with, before the function's globals.

    ``derive_schema=False`` is for a tool whose schema is given explicitly: the context
    parameter and the description are still read, but annotations need no JSON form and
    no converters are made (the function gets the JSON as the model wrote it).
    """
    tool = name if name is not None else getattr(fn, "__name__", None)
    if tool is None:
        raise ConfigError(f"{type(fn).__name__} object has no __name__: pass tool(name=...)")
    problem = tool_name_problem(tool)
    if problem is not None:
        raise ConfigError(f"tool: {problem}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"tool {tool!r}: cannot read its signature: {exc}") from None
    local = dict(localns) if localns else None
    hints = _hints(fn, tool, local)
    description, documented = parse_docstring(inspect.getdoc(_documented(fn)))
    builder = _Builder(tool, local)
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: dict[str, Converter] = {}
    positional: list[str] = []
    context: str | None = None
    var_keyword: str | None = None
    extra: Any = False
    for param in signature.parameters.values():
        annotation = hints.get(param.name, param.annotation)
        if _is_context(annotation):
            if context is not None:
                raise ConfigError(f"tool {tool!r}: more than one ToolContext parameter "
                                  f"({context!r} and {param.name!r})")
            if param.kind is param.POSITIONAL_ONLY:
                raise ConfigError(f"tool {tool!r}: the ToolContext parameter {param.name!r} "
                                  "must not be positional-only")
            context = param.name
            continue
        if param.kind is param.VAR_POSITIONAL:
            raise ConfigError(f"tool {tool!r}: *{param.name} cannot be given by the model "
                              "(arguments are named): use a list parameter")
        where = f"parameter {param.name!r}"
        if param.kind is param.VAR_KEYWORD:
            var_keyword = param.name
            if derive_schema:
                if annotation is inspect.Parameter.empty:
                    extra = True
                else:
                    extra, convert = builder.schema(annotation, f"**{param.name}")
                    if convert is not None:
                        converters[param.name] = convert
            continue
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(param.name)
        if not derive_schema:
            continue
        if annotation is inspect.Parameter.empty:
            schema: dict[str, Any] = {}
            convert = None
        else:
            schema, convert = builder.schema(annotation, where)
        schema = dict(schema)
        if "description" not in schema and param.name in documented:
            schema["description"] = documented[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        else:
            default = _json_default(param.default)
            if default is not _NO_DEFAULT:
                schema["default"] = default
        properties[param.name] = schema
        if convert is not None:
            converters[param.name] = convert
    parameters: dict[str, Any] | None = None
    if derive_schema:
        parameters = {"type": "object", "properties": properties, "required": required,
                      "additionalProperties": extra}
        if builder.defs:
            parameters["$defs"] = builder.defs
    return CallableShape(tool, description, parameters, context, tuple(positional),
                         var_keyword, converters)


# -- reading the callable ---------------------------------------------------------------------

def _documented(fn: Any) -> Any:
    """Whose docstring describes ``fn``: a partial's function, a callable object's class."""
    if isinstance(fn, functools.partial):
        return _documented(fn.func)
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return fn
    return type(fn) if type(fn).__doc__ else getattr(type(fn), "__call__", fn)  # noqa: B004


def _hints(fn: Any, tool: str, localns: dict[str, Any] | None) -> dict[str, Any]:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isroutine(target) or inspect.isclass(target)):
        target = getattr(type(target), "__call__", target)  # noqa: B004
    if inspect.isclass(target):
        target = target.__init__
    try:
        return typing.get_type_hints(target, localns=localns, include_extras=True)
    except Exception as exc:  # NameError for an unresolvable forward reference, ...
        raise ConfigError(f"tool {tool!r}: cannot resolve its annotations "
                          f"({type(exc).__name__}: {exc})") from None


def _is_context(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return inspect.isclass(annotation) and any(
        base.__dict__.get(CONTEXT_MARKER) is True for base in annotation.__mro__)


_NO_DEFAULT: Any = object()


def _json_default(value: Any) -> Any:
    """A parameter's default as JSON for the schema, or ``_NO_DEFAULT`` when it has none."""
    if isinstance(value, enum.Enum):
        value = value.value
    checked = check_json(value, copy=True)
    return _NO_DEFAULT if checked.problem is not None else checked.value


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters"
    r"|Returns?|Yields?|Raises|Examples?|Notes?|Attributes|See Also|Warnings?|References)"
    r":?\s*$"
)
_GOOGLE_PARAMS = {"Args", "Arguments", "Parameters", "Params", "Keyword Args",
                  "Keyword Arguments", "Other Parameters"}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")
_REST_PARAM = re.compile(r"^:param\s+(?:[^:]*?\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_REST_FIELD = re.compile(r"^:\w+")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (the first paragraph, lines joined) and each documented
    parameter's description, from Google style (``Args:``), NumPy style (``Parameters``
    over dashes) or reST (``:param name: text``) docstrings."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    first: list[str] = []
    for line in lines:
        text = line.strip()
        if not text or _SECTION.match(text) or _REST_FIELD.match(text):
            break
        first.append(text)
    params: dict[str, str] = {}
    _google(lines, params)
    _numpy(lines, params)
    _rest(lines, params)
    return " ".join(first), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str], params: dict[str, str]) -> None:
    index = 0
    while index < len(lines):
        header = lines[index].strip().rstrip(":")
        if lines[index].strip().endswith(":") and header in _GOOGLE_PARAMS:
            base = _indent(lines[index])
            entry_indent: int | None = None
            current: str | None = None
            index += 1
            while index < len(lines):
                line = lines[index]
                if line.strip() and _indent(line) <= base:
                    break
                if line.strip():
                    level = _indent(line)
                    if entry_indent is None:
                        entry_indent = level
                    match = _GOOGLE_ENTRY.match(line.strip()) if level == entry_indent else None
                    if match:
                        current = match.group(1)
                        params[current] = match.group(2).strip()
                    elif current is not None and level > (entry_indent or 0):
                        params[current] = (params[current] + " " + line.strip()).strip()
                index += 1
            continue
        index += 1


def _numpy(lines: list[str], params: dict[str, str]) -> None:
    for index, line in enumerate(lines[:-1]):
        if line.strip() not in ("Parameters", "Other Parameters"):
            continue
        rule = lines[index + 1].strip()
        if not rule or set(rule) != {"-"}:
            continue
        base = _indent(line)
        current: str | None = None
        for entry in lines[index + 2:]:
            text = entry.strip()
            if not text:
                continue
            level = _indent(entry)
            if level < base:
                break
            if level == base:
                match = _NUMPY_ENTRY.match(text)
                if match is None or _SECTION.match(text):
                    break
                current = match.group(1)
                params.setdefault(current, "")
            elif current is not None:
                params[current] = (params[current] + " " + text).strip()


def _rest(lines: list[str], params: dict[str, str]) -> None:
    current: str | None = None
    for line in lines:
        text = line.strip()
        match = _REST_PARAM.match(text)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif _REST_FIELD.match(text) or not text:
            current = None
        elif current is not None and _indent(line) > 0:
            params[current] = (params[current] + " " + text).strip()


# -- annotations to schemas ----------------------------------------------------------------------

class _Builder:
    """One walk over a tool's annotations: the schemas, the converters and the ``$defs``
    of recursive types (shared by all parameters of the tool)."""

    def __init__(self, tool: str, localns: dict[str, Any] | None = None) -> None:
        self.tool = tool
        self.localns = localns
        self.defs: dict[str, Any] = {}
        self._stack: list[Any] = []
        self._refs: dict[Any, str] = {}  # recursive type -> its $defs name
        self._converters: dict[Any, Converter | None] = {}

    def fail(self, where: str, annotation: Any, why: str = "") -> ConfigError:
        shown = getattr(annotation, "__qualname__", None) or repr(annotation)
        reason = why or "it has no JSON Schema"
        return ConfigError(
            f"tool {self.tool!r}: {where} is annotated {shown}, and {reason}; use str, "
            "int, float, bool, list, dict, Literal, an Enum, a TypedDict, a dataclass or a "
            "pydantic model, or pass the schema explicitly: tool(parameters={...})"
        )

    def schema(self, tp: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        if tp is Any or tp is object:
            return {}, None
        if isinstance(tp, str | typing.ForwardRef):
            raise self.fail(where, tp, "the forward reference cannot be resolved")
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self._annotated(tp, where)
        if origin in (typing.Required, typing.NotRequired):
            return self.schema(args[0], where)
        if hasattr(tp, "__supertype__"):  # NewType
            return self.schema(tp.__supertype__, where)
        if tp is None or tp is _NoneType:
            return {"type": "null"}, None
        if tp in _SCALARS:
            return {"type": _SCALARS[tp]}, (_to_float if tp is float else
                                           _to_int if tp is int else None)
        if origin is typing.Literal:
            return self._literal(tp, args, where)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args, where)
        if inspect.isclass(tp) and issubclass(tp, enum.Enum):
            return self._enum(tp, where)
        if tp in _LIST_ORIGINS or origin in _LIST_ORIGINS:
            return self._array(args, where, list)
        if tp in _SET_ORIGINS or origin in _SET_ORIGINS:
            kind = frozenset if (tp is frozenset or origin is frozenset) else set
            schema, convert = self._array(args, where, kind)
            return {**schema, "uniqueItems": True}, convert
        if tp is tuple or origin is tuple:
            return self._tuple(args, where)
        if tp in _DICT_ORIGINS or origin in _DICT_ORIGINS:
            return self._dict(tp, args, where)
        if inspect.isclass(tp) and _is_pydantic(tp):
            return self._pydantic(tp, where)
        if inspect.isclass(tp) and (typing.is_typeddict(tp) or dataclasses.is_dataclass(tp)):
            return self._object(tp, where)
        if isinstance(tp, typing.TypeVar):
            raise self.fail(where, tp, "a type variable has no JSON Schema")
        raise self.fail(where, tp)

    def _annotated(self, tp: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        schema, convert = self.schema(typing.get_args(tp)[0], where)
        schema = dict(schema)
        for meta in tp.__metadata__:
            if isinstance(meta, str):
                schema.setdefault("description", meta)
                continue
            for attribute, keyword in _BOUNDS.items():
                bound = getattr(meta, attribute, None)
                if isinstance(bound, int | float) and not isinstance(bound, bool):
                    schema[keyword] = bound
            doc = getattr(meta, "documentation", None)  # typing_extensions.Doc
            if isinstance(doc, str):
                schema.setdefault("description", doc)
        return schema, convert

    def _literal(self, tp: Any, args: tuple[Any, ...], where: str
                 ) -> tuple[dict[str, Any], Converter | None]:
        values: list[Any] = []
        members: dict[Any, Any] = {}
        for arg in args:
            value = arg.value if isinstance(arg, enum.Enum) else arg
            if not (value is None or isinstance(value, str | int | bool)):
                raise self.fail(where, tp, f"the literal {value!r} is not JSON")
            if isinstance(arg, enum.Enum):
                members[_key(value)] = arg
            values.append(value)
        schema = _with_type({"enum": values}, values)
        if not members:
            return schema, None

        def convert(value: Any) -> Any:
            return members.get(_key(value), value)

        return schema, convert

    def _enum(self, cls: type[enum.Enum], where: str) -> tuple[dict[str, Any], Converter | None]:
        values = [member.value for member in cls]
        if not all(v is None or isinstance(v, str | int | float | bool) for v in values):
            raise self.fail(where, cls, "its values are not all JSON scalars")
        by_value = {_key(member.value): member for member in cls}

        def convert(value: Any) -> Any:
            return by_value.get(_key(value), value)

        return _with_type({"enum": values}, values), convert

    def _union(self, args: tuple[Any, ...], where: str
               ) -> tuple[dict[str, Any], Converter | None]:
        branches = [self.schema(arg, where) for arg in args]
        schemas = [s for s, _ in branches]
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            schema: dict[str, Any] = {"type": [s["type"] for s in schemas]}
        else:
            schema = {"anyOf": schemas}
        if all(c is None for _, c in branches):
            return schema, None
        defs = self.defs
        checks: list[Callable[[Any], str | None] | None] = [None] * len(branches)

        def convert(value: Any) -> Any:
            if value is None:
                return None
            for index, (branch, converter) in enumerate(branches):
                check = checks[index]
                if check is None:
                    check = checks[index] = compile_validator(
                        {**branch, "$defs": defs} if defs else branch)
                if check(value) is None:
                    return value if converter is None else converter(value)
            return value

        return schema, convert

    def _array(self, args: tuple[Any, ...], where: str, kind: type
               ) -> tuple[dict[str, Any], Converter | None]:
        if not args:
            schema: dict[str, Any] = {"type": "array"}
            item_convert = None
        else:
            items, item_convert = self.schema(args[0], where)
            schema = {"type": "array", "items": items}
        if item_convert is None and kind is list:
            return schema, None
        each = item_convert

        def convert(value: Any) -> Any:
            if not isinstance(value, list):
                return value
            return kind(value if each is None else (each(v) for v in value))

        return schema, convert

    def _tuple(self, args: tuple[Any, ...], where: str
               ) -> tuple[dict[str, Any], Converter | None]:
        if not args:
            return {"type": "array"}, _to_tuple
        if len(args) == 2 and args[1] is Ellipsis:
            items, each = self.schema(args[0], where)

            def convert_all(value: Any) -> Any:
                if not isinstance(value, list):
                    return value
                return tuple(value if each is None else (each(v) for v in value))

            return {"type": "array", "items": items}, convert_all
        if args == ((),):
            return {"type": "array", "maxItems": 0}, _to_tuple
        parts = [self.schema(arg, where) for arg in args]
        schema = {"type": "array", "prefixItems": [s for s, _ in parts],
                  "minItems": len(parts), "maxItems": len(parts)}
        converters = [c for _, c in parts]

        def convert(value: Any) -> Any:
            if not isinstance(value, list):
                return value
            return tuple(v if c is None else c(v)
                         for v, c in zip(value, converters, strict=False))

        return schema, convert

    def _dict(self, tp: Any, args: tuple[Any, ...], where: str
              ) -> tuple[dict[str, Any], Converter | None]:
        if not args:
            return {"type": "object"}, None
        key, value_type = args
        if key is not str and key is not Any:
            raise self.fail(where, tp, "JSON object keys are strings: use dict[str, ...]")
        values, each = self.schema(value_type, where)
        schema = {"type": "object", "additionalProperties": values}
        if each is None:
            return schema, None

        def convert(value: Any) -> Any:
            if not isinstance(value, dict):
                return value
            return {k: each(v) for k, v in value.items()}

        return schema, convert

    def _object(self, cls: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        """A TypedDict or a dataclass: a closed object; recursive ones go to ``$defs``."""
        if cls in self._stack:
            ref = self._refs.get(cls)
            if ref is None:
                ref = self._refs[cls] = self._def_name(cls)
            return {"$ref": f"#/$defs/{ref}"}, lambda v: _later(self._converters, cls, v)
        self._stack.append(cls)
        try:
            schema, convert = self._fields(cls, where)
        finally:
            self._stack.pop()
        self._converters[cls] = convert
        ref = self._refs.get(cls)
        if ref is None:
            return schema, convert
        self.defs[ref] = schema
        return {"$ref": f"#/$defs/{ref}"}, convert

    def _def_name(self, cls: Any) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", getattr(cls, "__name__", "Type"))
        name, number = base, 2
        taken = set(self._refs.values()) | set(self.defs)
        while name in taken:
            name, number = f"{base}_{number}", number + 1
        return name

    def _fields(self, cls: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        label = getattr(cls, "__name__", "the type")
        try:
            hints = typing.get_type_hints(cls, localns=self.localns, include_extras=True)
        except Exception as exc:
            raise self.fail(where, cls, f"its annotations cannot be resolved ({exc})") from None
        properties: dict[str, Any] = {}
        required: list[str] = []
        converters: dict[str, Converter] = {}
        documented = parse_docstring(cls.__doc__)[1] if cls.__doc__ else {}
        if dataclasses.is_dataclass(cls):
            for item in dataclasses.fields(cls):
                if not item.init:
                    continue
                schema, convert = self.schema(hints.get(item.name, Any),
                                              f"{where} (field {item.name!r} of {label})")
                schema = dict(schema)
                if item.default is not dataclasses.MISSING:
                    default = _json_default(item.default)
                    if default is not _NO_DEFAULT:
                        schema["default"] = default
                elif item.default_factory is dataclasses.MISSING:
                    required.append(item.name)
                _describe(schema, documented.get(item.name))
                properties[item.name] = schema
                if convert is not None:
                    converters[item.name] = convert
        else:
            keys = getattr(cls, "__required_keys__", frozenset(hints))
            for key, annotation in hints.items():
                # Required/NotRequired written under ``from __future__ import annotations``
                # are missed by Python 3.11's __required_keys__: read them from the hint
                origin = typing.get_origin(annotation)
                if origin is typing.Annotated:
                    origin = typing.get_origin(typing.get_args(annotation)[0])
                if origin is typing.NotRequired:
                    keys = keys - {key}
                elif origin is typing.Required:
                    keys = keys | {key}
                schema, convert = self.schema(annotation,
                                              f"{where} (key {key!r} of {label})")
                schema = dict(schema)
                _describe(schema, documented.get(key))
                properties[key] = schema
                if key in keys:
                    required.append(key)
                if convert is not None:
                    converters[key] = convert
        schema = {"type": "object", "properties": properties, "required": required,
                  "additionalProperties": False}
        is_dataclass = dataclasses.is_dataclass(cls)
        if not converters and not is_dataclass:
            return schema, None

        def build(value: Any) -> Any:
            if not isinstance(value, dict):
                return value
            values = {k: (converters[k](v) if k in converters else v) for k, v in value.items()}
            return cls(**values) if is_dataclass else values

        return schema, build

    def _pydantic(self, cls: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        try:
            schema = dict(cls.model_json_schema())
        except Exception as exc:
            raise self.fail(where, cls, f"pydantic cannot describe it ({exc})") from None
        for name, definition in dict(schema.pop("$defs", {})).items():
            if name in self.defs and self.defs[name] != definition:
                raise self.fail(where, cls, f"two different models are named {name!r}")
            self.defs[name] = definition
        validate = cls.model_validate

        def convert(value: Any) -> Any:
            return validate(value)

        return schema, convert


def _later(converters: Mapping[Any, Converter | None], cls: Any, value: Any) -> Any:
    """The converter of a recursive type, looked up when it runs (it is made last)."""
    convert = converters.get(cls)
    return value if convert is None else convert(value)


def _describe(schema: dict[str, Any], text: str | None) -> None:
    if text and "description" not in schema:
        schema["description"] = text


def _is_pydantic(cls: type) -> bool:
    """A pydantic model, recognised without importing pydantic."""
    return callable(getattr(cls, "model_json_schema", None)) and any(
        (getattr(base, "__module__", "") or "").startswith("pydantic") for base in cls.__mro__
    )


def _with_type(schema: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    """``enum`` with its ``type`` when the values share one (providers like to see it)."""
    names = {json_type(v) for v in values}
    if len(names) == 1:
        (name,) = names
        return {"type": name, **schema}
    return schema


def _key(value: Any) -> tuple[str, Any]:
    """A lookup key that keeps ``True`` apart from ``1`` (and ``1`` together with ``1.0``,
    as JSON does)."""
    name = json_type(value)
    return ("number" if name == "integer" else name, value)


def _to_float(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return value
    return value


def _to_int(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
