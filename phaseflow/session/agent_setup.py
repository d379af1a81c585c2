"""What the host gives an :class:`~phaseflow.session.agent.Agent`, made into what it
uses: the workflow loaded, the tools by name, the providers by model role (each
checked), and the content hash its sessions are pinned to."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from phaseflow.errors import ConfigError
from phaseflow.providers.protocol import Provider
from phaseflow.spec.model import DEFAULT_ROLE, Workflow
from phaseflow.spec.model_roles import unmapped_roles
from phaseflow.tools.function import FunctionTool
from phaseflow.tools.function import tool as make_tool


def workflow_hash(workflow: Workflow) -> str:
    """The content hash a session is pinned to (the file's bytes when it has one)."""
    if workflow.path:
        try:
            return hashlib.sha256(Path(workflow.path).read_bytes()).hexdigest()
        except OSError:
            pass
    return hashlib.sha256(repr(sorted(workflow.phases)).encode()).hexdigest()


def compiled_workflow(workflow: Workflow | str | Path) -> Workflow:
    """The workflow an Agent is given: compiled from its file when given a path."""
    if isinstance(workflow, Workflow):
        return workflow
    if isinstance(workflow, str | Path):
        from phaseflow.spec.loader import compile_file

        loaded: Workflow = compile_file(str(workflow))
        return loaded
    raise ConfigError(f"workflow must be a path or a Workflow, not {type(workflow).__name__}")


def tools_by_name(tools: Iterable[Any] | Mapping[str, Any] | None) -> dict[str, FunctionTool]:
    """The host's tools by the name the workflow uses: ``@tool`` functions, plain
    callables (made tools by their name), or a mapping from name to either."""
    out: dict[str, FunctionTool] = {}
    if tools is None:
        return out
    items: Iterable[tuple[str | None, Any]] = (
        tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools))
    for name, value in items:
        if isinstance(value, FunctionTool):
            fn = value if name is None or name == value.name else value.with_name(name)
        elif callable(value):
            fn = make_tool(name=name)(value) if name else make_tool(value)
        else:
            raise ConfigError(f"tool {name or value!r} is not a callable")
        if fn.name in out:
            raise ConfigError(f"two tools are named {fn.name!r}")
        out[fn.name] = fn
    return out


#: what a model role's name may be
_ROLE = re.compile(r"[a-z][a-z0-9_-]*")

#: the role of the provider that summarizes a compacted history (falls back to ``default``)
COMPACTION_ROLE = "compaction"


def providers_by_role(workflow: Workflow, provider: Provider | None,
                      providers: Mapping[str, Provider] | None,
                      compaction: Provider | None) -> dict[str, Provider]:
    """The agent's providers by role, each checked: ``provider`` is the ``default`` role
    (given once), every role the workflow names is mapped, each is a Provider."""
    if providers is not None and not isinstance(providers, Mapping):
        raise ConfigError("providers must be a mapping of model roles to providers, not "
                          f"{type(providers).__name__}")
    roles = dict(providers or {})
    if provider is not None:
        if DEFAULT_ROLE in roles and roles[DEFAULT_ROLE] is not provider:
            raise ConfigError("two default providers: give it as provider= or as "
                              "providers['default'], not both")
        roles[DEFAULT_ROLE] = provider
    if DEFAULT_ROLE not in roles:
        raise ConfigError("an agent needs a provider: provider=... (or providers="
                          "{'default': ...})")
    if compaction is not None and COMPACTION_ROLE in roles and roles[COMPACTION_ROLE] \
            is not compaction:
        raise ConfigError("two compaction providers: give it as compaction_provider= or "
                          "as providers['compaction'], not both")
    for role, given in roles.items():
        if not isinstance(role, str) or not _ROLE.fullmatch(role):
            raise ConfigError(f"providers: {role!r} is not a model role name (lowercase "
                              "letters, digits, '_' and '-', starting with a letter)")
        if not callable(getattr(given, "stream", None)):
            what = "provider" if role == DEFAULT_ROLE else f"providers[{role!r}]"
            raise ConfigError(f"{what} must have a stream(request) method (the Provider "
                              f"protocol), not {type(given).__name__}")
    missing = unmapped_roles(workflow, roles)
    if missing:
        raise ConfigError(
            f"workflow {workflow.name!r} runs on model role(s) {', '.join(missing)}, which "
            f"the agent does not map (providers: {', '.join(sorted(roles))}): map each, "
            "e.g. providers={'fast': ...} or --provider fast=anthropic:MODEL")
    return roles
