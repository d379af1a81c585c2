"""A model per phase: a workflow's phases name model roles, the agent maps roles to
providers, and each phase's requests go to its role's provider (real SDKs against the
loopback wire servers). Carried provider parts made by one role's provider are dropped
when the next request goes to another role's provider, even on the same wire."""

from __future__ import annotations

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import AnthropicProvider, OpenAIResponsesProvider
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.session import Agent
from tests.support.wire_scripts import anthropic_reply
from tests.support.wire_servers import WireServer

pytest.importorskip("anthropic")

WORKFLOW = """\
phaseflow: 1
name: refunds
initial: triage
model: fast
phases:
  triage:
    goal: Sort the request.
    transitions:
      - to: decide
        trigger: model
  decide:
    goal: Decide the refund.
    model: strong
    terminal: true
"""

THINKING = ("The customer wants a refund: move on.", "EqQBsig-fast==")


def _claude(model: str, server: WireServer) -> AnthropicProvider:
    return AnthropicProvider(model, base_url=server.base_url, api_key="k-loop")


def test_each_phase_runs_on_its_roles_provider_and_other_roles_drop_carried_parts() -> None:
    workflow = phaseflow.load_workflow_text(WORKFLOW)
    with WireServer("anthropic") as fast, WireServer("anthropic") as strong, \
            WireServer("responses") as default:
        fast.push(anthropic_reply("Moving on.", [("toolu_1", "go_to_phase",
                                                  '{"phase": "decide"}')],
                                  thinking=[THINKING]))
        strong.push(anthropic_reply("Refund approved."))
        agent = Agent(workflow, OpenAIResponsesProvider("gpt-default",
                                                        base_url=default.base_url,
                                                        api_key="k"),
                      providers={"fast": _claude("claude-fast", fast),
                                 "strong": _claude("claude-strong", strong)})
        session = agent.session_sync("s")
        assert session.reply_sync("I want my money back") == "Refund approved."
        assert session.phase == "decide"
    assert default.requests == []  # no phase runs on the default role
    assert [r.body["model"] for r in fast.requests] == ["claude-fast"]
    assert [r.body["model"] for r in strong.requests] == ["claude-strong"]
    sent = strong.requests[0].body["messages"]
    assistant = sent[1]
    assert assistant["role"] == "assistant"
    # the fast role's thinking block (and its signature) is not sent to the strong role's
    # provider; the visible text and the call are
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
    assert "EqQBsig-fast==" not in str(sent)
    assert assistant["content"][1]["name"] == "go_to_phase"


def test_a_role_mapped_to_the_same_provider_keeps_its_carried_parts() -> None:
    workflow = phaseflow.load_workflow_text(WORKFLOW)
    with WireServer("anthropic") as claude:
        claude.push(anthropic_reply("Moving on.", [("toolu_1", "go_to_phase",
                                                    '{"phase": "decide"}')],
                                    thinking=[THINKING]),
                    anthropic_reply("Refund approved."))
        one = _claude("claude-one", claude)
        agent = Agent(workflow, one, providers={"fast": one, "strong": one})
        assert agent.session_sync("s").reply_sync("Refund please") == "Refund approved."
    content = claude.requests[1].body["messages"][1]["content"]
    assert content[0] == {"type": "thinking", "thinking": THINKING[0],
                          "signature": THINKING[1]}


def test_a_role_the_agent_does_not_map_is_refused_when_it_is_made() -> None:
    workflow = phaseflow.load_workflow_text(WORKFLOW)
    script = ScriptedProvider([])
    with pytest.raises(ConfigError, match=r"model role\(s\) strong, which the agent does "
                                          r"not map \(providers: default, fast\)"):
        Agent(workflow, script, providers={"fast": script})
    with pytest.raises(ConfigError, match="an agent needs a provider"):
        Agent(workflow, providers={"fast": script, "strong": script})
    with pytest.raises(ConfigError, match="two default providers"):
        Agent(workflow, script, providers={"default": ScriptedProvider([]), "fast": script,
                                           "strong": script})
    with pytest.raises(ConfigError, match=r"providers\['strong'\] must have a stream"):
        Agent(workflow, script, providers={"fast": script, "strong": object()})  # type: ignore[dict-item]


def test_the_compaction_role_summarizes_and_falls_back_to_default() -> None:
    workflow = phaseflow.load_workflow_text(WORKFLOW)
    default, summarizer = ScriptedProvider([]), ScriptedProvider([])
    roles = {"fast": default, "strong": default}
    with_role = Agent(workflow, default, providers={**roles, "compaction": summarizer})
    assert with_role.config.compaction_provider is summarizer
    without = Agent(workflow, default, providers=roles)
    assert without.config.compaction_provider is None  # the default role's provider
    with pytest.raises(ConfigError, match="two compaction providers"):
        Agent(workflow, default, providers={**roles, "compaction": summarizer},
              compaction_provider=ScriptedProvider([]))
