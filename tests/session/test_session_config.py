"""A wrong configuration is refused when it is given, naming what is wrong: the Agent's
options, a provider that is not one, a host tool named like a built-in, a tool that cannot
take its declared parameters, and a call effect without its hook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.session import Agent
from tests.support.hostile_desk import TOOLS, workflow


def _agent(**options: Any) -> Agent:
    return Agent(workflow(), ScriptedProvider(["ok"]), **{"tools": TOOLS, **options})


@pytest.mark.parametrize(("option", "value", "message"), [
    ("output_lines", 0, "output_lines must be a positive integer"),
    ("output_lines", -1, "output_lines must be a positive integer"),
    ("output_lines", True, "output_lines must be a positive integer"),
    ("output_chars", -5, "output_chars must be a positive integer"),
    ("max_steps", 0, "max_steps must be a positive integer"),
    ("max_retries", -1, "max_retries must be an integer >= 0"),
    ("lease", float("nan"), "lease must be a positive number of seconds"),
    ("lease", 0, "lease must be a positive number of seconds"),
    ("parallel_tools", "yes", "parallel_tools must be True or False"),
    ("system", None, "system must be a string"),
    ("max_output_tokens", 0, "max_output_tokens must be a positive integer"),
    ("clock", 5, "clock must be a callable"),
    ("approve", "always", "approve must be a callable"),
    ("hooks", {"audit": "not a function"}, "hook 'audit' is not a callable"),
    ("hooks", ["audit"], "hooks must be a mapping from name to callable"),
    ("worker", 5, "worker must be a non-empty string"),
])
def test_bad_configuration_is_refused_when_it_is_given(option: str, value: Any,
                                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _agent(**{option: value})


def test_a_provider_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="Provider protocol"):
        Agent(workflow(), object(), tools=TOOLS)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["go_to_phase", "record"])
def test_a_host_tool_named_like_a_built_in_is_refused(name: str) -> None:
    wf = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: t\ninitial: a\nphases:\n  a:\n    goal: g\n    terminal: true\n")

    def fake(phase: str) -> str:
        return phase

    with pytest.raises(ConfigError, match=f"'{name}' has the name of a built-in tool"):
        Agent(wf, ScriptedProvider(["ok"]), tools={name: fake})


SIGNED = """\
phaseflow: 1
name: signed
initial: a
tools:
  find:
    parameters:
      type: object
      properties:
        email: {type: string}
        limit: {type: integer}
      required: [email]
phases:
  a:
    goal: g
    tools: [find]
    terminal: true
"""


@pytest.mark.parametrize(("fn", "message"), [
    (lambda mail: mail, "no parameter for the declared argument"),
    (lambda email, extra, limit=1: email, "parameter 'extra' has no default"),
])
def test_a_tool_that_cannot_take_its_declared_parameters_is_refused_at_start(
        fn: Callable[..., Any], message: str) -> None:
    wf = phaseflow.load_workflow_text(SIGNED)
    with pytest.raises(ConfigError, match=message):
        Agent(wf, ScriptedProvider(["ok"]), tools={"find": fn})


def test_a_tool_that_takes_its_declared_parameters_is_accepted() -> None:
    wf = phaseflow.load_workflow_text(SIGNED)
    for fn in (lambda email, limit=10: email, lambda **arguments: arguments,
               lambda email, limit: email,
               lambda email, limit=None, ctx=None: email):
        Agent(wf, ScriptedProvider(["ok"]), tools={"find": fn})


HOOKED = """\
phaseflow: 1
name: hooked
initial: a
phases:
  a:
    goal: g
    on_enter:
      - call: audit
    terminal: true
"""


def test_a_call_effect_without_its_hook_is_refused_at_start() -> None:
    wf = phaseflow.load_workflow_text(HOOKED)
    with pytest.raises(ConfigError, match=r"no callable for the workflow's call effect.*'audit'"):
        Agent(wf, ScriptedProvider(["ok"]))
    Agent(wf, ScriptedProvider(["ok"]), hooks={"audit": lambda ctx: None})
