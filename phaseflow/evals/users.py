"""Simulated users: a script (CI), or a model playing a persona toward a goal.

A model user is any :class:`~phaseflow.providers.protocol.Provider`: it is told who it
is, what it wants, what it knows (to give when asked) and what it will not do, and sees
the conversation from the user's side (the agent's replies are its input). It ends the
conversation by answering ``[done]``; it never sees the agent's tools or state.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

from phaseflow.evals.evalfile import SimulatedUser
from phaseflow.providers.protocol import (
    Provider,
    ProviderFailure,
    ProviderRequest,
    TextDelta,
    Usage,
)
from phaseflow.turn.messages import AssistantMessage, Message, UserMessage

__all__ = ["DONE", "ModelUser", "ScriptedUser", "User", "UserFailed", "user_prompt"]

#: what a model user answers to end the conversation
DONE = "[done]"
_START = "(The conversation starts: write your first message to the agent.)"
#: the most tokens a simulated user's message, or a judge's verdict, may have: a user
#: writes a chat message, a judge a word and a sentence (a model that rambles is cut)
USER_MAX_TOKENS = 300
_ids = itertools.count(1)


class UserFailed(Exception):
    """The user simulator's model could not answer (the conversation is an error)."""


class User(Protocol):
    tokens: int

    async def next(self, agent_reply: str | None) -> str | None:
        """The user's next message (``agent_reply``: the agent's last reply, ``None``
        before the first message); ``None`` ends the conversation."""
        ...


class ScriptedUser:
    """The messages of ``user.script``, in order; then the conversation ends."""

    def __init__(self, script: Sequence[str]) -> None:
        self.script = list(script)
        self.sent = 0
        self.tokens = 0

    async def next(self, agent_reply: str | None) -> str | None:
        if self.sent >= len(self.script):
            return None
        self.sent += 1
        return self.script[self.sent - 1]


def user_prompt(user: SimulatedUser) -> str:
    """The system text a model user is given."""
    lines = ["You are role-playing a customer who is talking to a support agent in a "
             "chat. Stay in character; write only the customer's next message, short "
             "and natural, with no narration."]
    if user.persona:
        lines.append(f"Who you are: {user.persona}")
    if user.goal:
        lines.append(f"What you want: {user.goal}")
    if user.knows:
        facts = "; ".join(f"{k}: {v}" for k, v in user.knows.items())
        lines.append(f"Facts you know and give when the agent asks for them (only "
                     f"then): {facts}")
    if user.will_not:
        lines.append("You will not: " + "; ".join(user.will_not))
    lines.append(f"When your goal is reached, or the agent cannot help further, answer "
                 f"exactly {DONE}.")
    return "\n".join(lines)


class ModelUser:
    """A model playing ``user``; its first message is ``user.opens`` when given."""

    def __init__(self, user: SimulatedUser, provider: Provider, model: str = "") -> None:
        self.user = user
        self.provider = provider
        self.model = model
        self.system = user_prompt(user)
        self.history: list[Message] = []
        self.tokens = 0

    async def next(self, agent_reply: str | None) -> str | None:
        if agent_reply is None and self.user.opens:
            self.history.append(UserMessage(_START))
            self.history.append(AssistantMessage(self.user.opens))
            return self.user.opens
        self.history.append(UserMessage(agent_reply or _START))
        text = await self._ask()
        if DONE in text.lower() or not text.strip():
            return None
        self.history.append(AssistantMessage(text))
        return text

    async def _ask(self) -> str:
        request = ProviderRequest(model=self.model, system=self.system,
                                  history=tuple(self.history), tools=(),
                                  request_id=f"user-{next(_ids)}", tool_choice="none",
                                  max_output_tokens=USER_MAX_TOKENS)
        for _attempt in range(3):
            parts: list[str] = []
            failure: ProviderFailure | None = None
            async for event in self.provider.stream(request):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Usage):
                    self.tokens += event.input_tokens + event.output_tokens
                elif isinstance(event, ProviderFailure):
                    failure = event
                    break
            if failure is None:
                return "".join(parts).strip()
            if not failure.retryable:
                break
        raise UserFailed(f"the user simulator's model failed: "
                         f"{failure.message if failure else 'no answer'}")


async def ask_judge(provider: Provider, model: str, rubric: str,
                    transcript: str) -> tuple[bool, str]:
    """A judge model's verdict on ``transcript`` against ``rubric``: PASS or FAIL as
    the first word of its answer, then its reason."""
    system = ("You grade a conversation between a support agent and a customer against "
              "a rubric. Answer PASS or FAIL as your first word, then one sentence saying "
              "why.")
    request = ProviderRequest(
        model=model, system=system, tools=(), tool_choice="none",
        history=(UserMessage(f"Rubric: {rubric}\n\nConversation:\n{transcript}"),),
        request_id=f"judge-{next(_ids)}", max_output_tokens=USER_MAX_TOKENS)
    parts: list[str] = []
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, ProviderFailure):
            raise UserFailed(f"the judge's model failed: {event.message}")
    answer = "".join(parts).strip()
    words = answer.split(None, 1)
    verdict = words[0].strip(".:,!").upper() if words else ""
    if verdict not in ("PASS", "FAIL"):
        return False, f"the judge did not answer PASS or FAIL: {answer[:200]!r}"
    return verdict == "PASS", words[1].strip() if len(words) > 1 else ""


__all__ += ["ask_judge"]
