"""The simulated users: what a model user is told and sees, and how it ends."""

from __future__ import annotations

import asyncio

from phaseflow.evals.evalfile import SimulatedUser
from phaseflow.evals.users import ModelUser, ScriptedUser, ask_judge
from phaseflow.providers.scripted import ScriptedProvider
from phaseflow.turn.messages import AssistantMessage, UserMessage

USER = SimulatedUser(persona="Ada, polite", goal="a refund for order O-9",
                     knows={"email": "ada@example.com"}, will_not=("give her password",))


def test_a_model_user_plays_the_persona_from_the_user_side() -> None:
    model = ScriptedProvider(["Hi, I want a refund", "ada@example.com", "[DONE] thanks"])
    user = ModelUser(USER, model, "m")

    async def talk() -> list[str | None]:
        return [await user.next(None), await user.next("Your email, please?"),
                await user.next("Refunded.")]

    assert asyncio.run(talk()) == ["Hi, I want a refund", "ada@example.com", None]
    first, second, _ = model.requests
    assert first.system.splitlines()[1:] == [
        "Who you are: Ada, polite", "What you want: a refund for order O-9",
        "Facts you know and give when the agent asks for them (only then): "
        "email: ada@example.com",
        "You will not: give her password",
        "When your goal is reached, or the agent cannot help further, answer exactly [done]."]
    assert (first.tools, first.max_output_tokens, first.model) == ((), 300, "m")
    # the agent's replies are the user's input; its own messages are the assistant's
    assert [type(m) for m in second.history] == [UserMessage, AssistantMessage, UserMessage]
    assert second.history[2].content == "Your email, please?"
    assert user.tokens > 0


def test_opens_is_the_first_message_without_asking_the_model() -> None:
    model = ScriptedProvider(["(unused)", "Rex"])
    user = ModelUser(SimulatedUser(goal="g", opens="Hello"), model)
    assert asyncio.run(user.next(None)) == "Hello"
    assert model.requests == []
    assert asyncio.run(user.next("Your first pet?")) == "Rex"


def test_a_scripted_user_says_its_lines_then_ends() -> None:
    user = ScriptedUser(["a", "b"])
    assert [asyncio.run(user.next(x)) for x in (None, "1", "2")] == ["a", "b", None]


def test_a_judge_answers_pass_or_fail_and_anything_else_fails() -> None:
    def judged(answer: str) -> tuple[bool, str]:
        return asyncio.run(ask_judge(ScriptedProvider([answer]), "", "polite", "..."))

    assert judged("PASS: it apologised") == (True, "it apologised")
    assert judged("fail. It was rude.") == (False, "It was rude.")
    assert judged("Maybe") == (False, "the judge did not answer PASS or FAIL: 'Maybe'")
