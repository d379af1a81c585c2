"""The session under attack: what a host sees when a provider breaks its protocol, a tool
overruns its timeout, the store is altered, or the configuration is wrong.

Each test is one promise of the session, tried with hostile input written to the
documented protocol (providers yield the documented event classes with the wrong
values, as a buggy adapter would)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import phaseflow
from phaseflow.errors import ConfigError
from phaseflow.providers import ScriptedProvider
from phaseflow.providers.protocol import (
    ProviderFailure,
    ProviderRequest,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
)
from phaseflow.session import Agent, SessionError, TurnFailed
from phaseflow.session.events import Event
from phaseflow.stores import SQLiteStore
from phaseflow.tools import tool

WORKFLOW = """\
phaseflow: 1
name: desk
initial: ask
state:
  paid: {type: number}
  note: {type: string}
tools:
  pay: {approval: always, writes: [paid]}
  napper: {timeout: 0.2, writes: [note]}
  lookup: {}
phases:
  ask:
    goal: Help.
    tools: [pay, napper, lookup]
    transitions:
      - to: done
        when: state.paid
  done:
    goal: Say goodbye.
    terminal: true
"""

#: what the tools did, in order (a tool that ran twice shows twice)
RAN: list[str] = []


@tool
def pay(amount: float) -> dict[str, Any]:
    """Pay an amount."""
    RAN.append(f"pay {amount}")
    return {"paid": amount}


NAPPED = threading.Event()


@tool
def napper(seconds: float) -> dict[str, Any]:
    """Sleep (a blocking, sync tool)."""
    time.sleep(seconds)
    NAPPED.set()
    RAN.append("napper")
    return {"note": "slept"}


@tool
def lookup(q: str) -> str:
    """Look something up."""
    RAN.append(f"lookup {q}")
    return "found"


TOOLS = [pay, napper, lookup]


def workflow() -> phaseflow.Workflow:
    return phaseflow.load_workflow_text(WORKFLOW)


def collect(stream: AsyncIterator[Event], seconds: float = 20.0) -> list[Event]:
    """The events of a stream, or a failed test when it hangs (never a hung suite)."""
    async def run() -> list[Event]:
        return [e async for e in stream]

    async def bounded() -> list[Event]:
        return await asyncio.wait_for(run(), seconds)

    return asyncio.run(bounded())


class Broken:
    """A provider that yields ``events`` (then raises ``raises``, if given) on its first
    call, and answers "fine" after that."""

    def __init__(self, events: list[Any], raises: BaseException | None = None) -> None:
        self.events = events
        self.raises = raises
        self.calls = 0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        self.calls += 1
        if self.calls > 1:
            yield TextDelta("fine")
            yield StreamEnd()
            return
        for item in self.events:
            yield item
        if self.raises is not None:
            raise self.raises


class Boom(BaseException):
    """Not an Exception: what a careless library might raise."""


MALFORMED: dict[str, tuple[list[Any], BaseException | None]] = {
    "text is an int": ([TextDelta(123), StreamEnd()], None),  # type: ignore[arg-type]
    "text is None": ([TextDelta(None), StreamEnd()], None),  # type: ignore[arg-type]
    "text is a list": ([TextDelta(["a"]), StreamEnd()], None),  # type: ignore[arg-type]
    "reasoning is None": ([ReasoningDelta(None), StreamEnd()], None),  # type: ignore[arg-type]
    "indexes of two kinds": ([ToolCallStart(0, "c1", "lookup"),
                              ToolCallStart("1", "c2", "lookup"),  # type: ignore[arg-type]
                              StreamEnd("tool_use")], None),
    "call id not a string": ([ToolCallStart(0, 7, "lookup"),  # type: ignore[arg-type]
                              ToolCallDelta(0, '{"q": "x"}'), StreamEnd("tool_use")], None),
    "name not a string": ([ToolCallStart(0, "c1", None),  # type: ignore[arg-type]
                           StreamEnd("tool_use")], None),
    "arguments not a string": ([ToolCallStart(0, "c1", "lookup"),
                                ToolCallDelta(0, {"q": "x"}),  # type: ignore[arg-type]
                                StreamEnd("tool_use")], None),
    "usage of words": ([TextDelta("hi"), Usage("many", None),  # type: ignore[arg-type]
                        StreamEnd()], None),
    "failure without a message": ([ProviderFailure(None)], None),  # type: ignore[arg-type]
    "retry_after as text": ([ProviderFailure("slow", True, "5")], None),  # type: ignore[arg-type]
    "an unknown stop": ([TextDelta("hi"), StreamEnd("done")], None),  # type: ignore[arg-type]
    "not an event at all": ([TextDelta("hi"), {"kind": "text_delta"}], None),
    "a BaseException": ([TextDelta("hi")], Boom("out of band")),
    "its own CancelledError": ([TextDelta("hi")], asyncio.CancelledError()),
    "an exception": ([TextDelta("hi")], RuntimeError("socket gone")),
    "no StreamEnd": ([ToolCallStart(0, "c1", "lookup"), ToolCallDelta(0, '{"q": "x"}')],
                     None),
    "a delta before its start": ([ToolCallDelta(0, '{"q": "x"}'), StreamEnd("tool_use")],
                                 None),
    "two starts of one index": ([ToolCallStart(0, "c1", "lookup"),
                                 ToolCallStart(0, "c2", "lookup"), StreamEnd("tool_use")],
                                None),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_whatever_a_provider_yields_or_raises_the_turn_ends_and_the_session_goes_on(
        case: str) -> None:
    RAN.clear()
    events_, raises = MALFORMED[case]
    provider = Broken(events_, raises)
    agent = Agent(workflow(), provider, tools=TOOLS, max_retries=3)
    session = agent.session_sync("s")
    events = collect(session.send("hello"))
    finished = [e for e in events if e.type == "turn_finished"]
    assert [e.status for e in finished] == ["failed"]
    errors = [e for e in events if e.type == "error"]
    assert [e.code for e in errors] == ["provider_error"]
    assert provider.calls == 1  # the provider's own fault: never retried
    assert RAN == []  # nothing of a broken reply runs
    assert session.status == "failed"
    # usable at once: the next message is a normal turn
    again = collect(session.send("still there?"))
    assert [e.reply for e in again if e.type == "turn_finished"] == ["fine"]
    assert session.status == "idle"


def test_a_malformed_event_is_named_in_the_error() -> None:
    provider = Broken([TextDelta(123), StreamEnd()])  # type: ignore[arg-type]
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("hello"))
    error = next(e for e in events if e.type == "error")
    assert "TextDelta.text is int, not str" in error.message
    assert "protocol" in error.message


def test_reply_raises_turn_failed_naming_the_provider_error() -> None:
    provider = Broken([TextDelta("hi")], RuntimeError("socket gone"))
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    with pytest.raises(TurnFailed, match="socket gone") as caught:
        session.reply_sync("hello")
    assert caught.value.status == "failed"
    assert caught.value.error.startswith("provider_error: ")
    reply = session.reply_sync("again")
    assert reply == "fine" and reply.status == "completed"


def test_reply_says_when_the_turn_waits_for_a_human() -> None:
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 5}}]}, "paid"])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    reply = session.reply_sync("pay 5")
    assert reply.status == "awaiting_approval"
    assert reply.approval is not None and reply.approval.arguments == {"amount": 5}


def test_a_sync_tool_s_timeout_is_enforced_and_its_writes_are_dropped() -> None:
    RAN.clear()
    NAPPED.clear()
    provider = ScriptedProvider([{"calls": [{"napper": {"seconds": 1.5}}]}, "ok",
                                 "still here"])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")

    async def scenario() -> tuple[list[Event], list[Event]]:
        events = [e async for e in session.send("nap")]
        # the turn did not wait for the function: it is still asleep in its thread
        assert not NAPPED.is_set()
        # the loop is alive while the thread finishes: its late result is dropped
        await asyncio.get_running_loop().run_in_executor(None, NAPPED.wait, 10)
        await asyncio.sleep(0.05)
        assert "note" not in session.state
        return events, [e async for e in session.send("and now?")]

    events, after = asyncio.run(asyncio.wait_for(scenario(), 20))
    result = next(e for e in events if e.type == "tool_result")
    # a sync tool's thread runs on: its outcome is not known, and the model is told so
    assert result.status == "unknown" and "timed out after 0.2 s" in result.content
    assert "do not assume it failed" in result.content
    assert NAPPED.is_set() and RAN == ["napper"]
    assert "note" not in session.state
    assert [e.reply for e in events if e.type == "turn_finished"] == ["ok"]
    assert [e.reply for e in after if e.type == "turn_finished"] == ["still here"]


@tool
def flaky(q: str) -> str:
    """A tool whose own socket times out."""
    raise TimeoutError("socket timed out")


@tool(timeout=5)
def later(q: str) -> Any:
    """A sync tool with a timeout that returns an awaitable."""
    async def value() -> str:
        return f"later {q}"
    return value()


def test_a_tool_s_own_timeout_error_is_its_failure_not_the_deadline() -> None:
    wf = phaseflow.load_workflow_text(
        "phaseflow: 1\nname: t\ninitial: a\nphases:\n  a:\n    goal: g\n"
        "    tools: [flaky, later]\n")
    provider = ScriptedProvider([{"calls": [{"flaky": {"q": "x"}}, {"later": {"q": "y"}}]},
                                 "done"])
    session = Agent(wf, provider, tools=[flaky, later]).session_sync("s")
    events = collect(session.send("go"))
    results = {e.name: (e.status, e.content) for e in events if e.type == "tool_result"}
    assert results["flaky"] == ("error", "flaky failed: TimeoutError: socket timed out")
    assert results["later"] == ("ok", "later y")  # awaited, in a thread or not
    assert session.status == "idle"


def test_a_sync_tool_within_its_timeout_writes_as_usual() -> None:
    provider = ScriptedProvider([{"calls": [{"napper": {"seconds": 0}}]}, "ok"])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("nap"))
    assert [e.status for e in events if e.type == "tool_result"] == ["ok"]
    assert session.state.get("note") == "slept"


def test_a_reply_cut_at_max_tokens_runs_none_of_its_calls_and_ends_the_turn() -> None:
    RAN.clear()
    provider = Broken([TextDelta("Looking"), ToolCallStart(0, "c1", "lookup"),
                       ToolCallDelta(0, '{"q": "a"}'), ToolCallStart(1, "c2", "lookup"),
                       ToolCallDelta(1, '{"q": "b'), StreamEnd("max_tokens")])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("look"))
    assert RAN == []
    assert provider.calls == 1  # the model is not asked again in this turn
    assert [e.code for e in events if e.type == "error"] == ["max_tokens"]
    results = [e for e in events if e.type == "tool_result"]
    assert [e.call_id for e in results] == ["c1", "c2"]
    assert all("Not run" in e.content for e in results)
    finished = [e for e in events if e.type == "turn_finished"]
    assert [(e.status, e.reply) for e in finished] == [("completed", "Looking")]
    # the cut reply is kept as it was, every call answered: the next turn is a normal one
    history = session.history
    assert [c.id for c in history[1].tool_calls] == ["c1", "c2"]
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]
    assert [e.reply for e in collect(session.send("go on")) if e.type == "turn_finished"] \
        == ["fine"]


def test_arguments_that_are_not_json_are_shown_as_the_model_wrote_them() -> None:
    provider = Broken([ToolCallStart(0, "c1", "lookup"), ToolCallDelta(0, "{q: x"),
                       StreamEnd("tool_use")])
    session = Agent(workflow(), provider, tools=TOOLS).session_sync("s")
    events = collect(session.send("look"))
    shown = next(e for e in events if e.type == "tool_call")
    assert shown.arguments == "{q: x"
    result = next(e for e in events if e.type == "tool_result")
    assert result.status == "refused" and "not JSON" in result.content


def _rewrite_approval_arguments(path: Path, amount: float) -> int:
    """As an operator with sqlite3 would: change the amount of the stored pending
    approval only (the copy a human is shown). Returns how many copies changed."""
    db = sqlite3.connect(path)
    (snapshot,) = db.execute("SELECT snapshot FROM sessions WHERE id = 's'").fetchone()
    data = json.loads(snapshot)
    changed = 0

    def walk(node: Any, inside: bool) -> Any:
        nonlocal changed
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                out[key] = walk(value, inside or key == "pending_approval")
            return out
        if isinstance(node, list):
            return [walk(v, inside) for v in node]
        if inside and node == 5000:
            changed += 1
            return amount
        return node

    data = walk(data, False)
    db.execute("UPDATE sessions SET snapshot = ? WHERE id = 's'", (json.dumps(data),))
    db.commit()
    db.close()
    return changed


def test_an_approval_altered_in_the_store_is_refused_and_never_runs(tmp_path: Path) -> None:
    RAN.clear()
    path = tmp_path / "s.db"
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 5000}}]}, "paid"])
    first = Agent(workflow(), provider, tools=TOOLS, store=SQLiteStore(path))
    session = first.session_sync("s")
    assert session.reply_sync("pay 5000").status == "awaiting_approval"
    assert _rewrite_approval_arguments(path, 5) == 1
    again = Agent(workflow(), ScriptedProvider(["paid"]), tools=TOOLS,
                  store=SQLiteStore(path))
    with pytest.raises(SessionError, match=r"'s'.*pending approval.*altered"):
        again.session_sync("s")
    assert RAN == []


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


def test_the_final_phase_is_said_once_in_the_last_system_text() -> None:
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 1}}]}, "bye"])
    agent = Agent(workflow(), provider, tools=TOOLS, approve=None)
    session = agent.session_sync("s")
    collect(session.send("pay 1"))
    pending = session.pending_approval
    assert pending is not None
    collect(session.resolve(pending.call_id, "approve"))
    assert session.status == "finished"
    last = provider.requests[-1].system
    assert last.count("This is the final phase.") == 1


class Held:
    """A provider whose replies wait until the test lets them go."""

    def __init__(self, replies: list[Any]) -> None:
        self.inner = ScriptedProvider(replies)
        self.go = asyncio.Event()
        self.asked = asyncio.Event()

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
        self.asked.set()
        await self.go.wait()
        async for item in self.inner.stream(request):
            yield item


def test_a_message_queued_for_a_turn_that_finishes_the_session_is_recorded(
        tmp_path: Path) -> None:
    """Two workers on one store: the second's message is queued while the first runs the
    turn that finishes the session. It is taken out of the queue and recorded as
    unanswered (a ``session_finished`` error event), never left there for good."""
    path = tmp_path / "s.db"

    async def scenario() -> tuple[list[Event], list[Event], Any]:
        held = Held([{"calls": [{"pay": {"amount": 1}}]}, "bye"])
        first = Agent(workflow(), held, tools=TOOLS, store=SQLiteStore(path),
                      approve=None, worker="w1")
        one = await first.session("s")
        held.go.set()
        async for _ in one.send("pay 1"):
            pass
        pending = one.pending_approval
        assert pending is not None
        held.go.clear()
        held.asked.clear()
        finishing = asyncio.ensure_future(
            collect_async(one.resolve(pending.call_id, "approve")))
        await held.asked.wait()  # the finishing turn holds the lease now
        second = Agent(workflow(), ScriptedProvider([]), tools=TOOLS,
                       store=SQLiteStore(path), worker="w2")
        two = await second.session("s")
        queued = await collect_async(two.send("one more thing"))
        held.go.set()
        events = await finishing
        store = SQLiteStore(path)
        return events, queued, (await store.queued("s"), one.status,
                                [e async for e in _stored(one)])

    _, queued, (left, status, stored) = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert queued == []  # told nothing yet: the message waits for the turn
    assert status == "finished"
    assert not left  # nothing stays in the queue
    notes = [e for e in stored if e.type == "error" and e.code == "session_finished"]
    assert len(notes) == 1 and "one more thing" in notes[0].message


async def collect_async(stream: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in stream]


async def _stored(session: Any) -> AsyncIterator[Event]:
    for e in await session.events():
        yield e


def test_max_output_tokens_goes_with_every_request() -> None:
    provider = ScriptedProvider([{"calls": [{"lookup": {"q": "x"}}]}, "ok"])
    session = Agent(workflow(), provider, tools=TOOLS, max_output_tokens=64).session_sync("s")
    collect(session.send("look"))
    assert [r.max_output_tokens for r in provider.requests] == [64, 64]


def test_reply_is_this_message_s_turn_and_a_queued_message_says_so() -> None:
    """Two replies at once on one session: the second message is queued behind the
    first turn (status ``queued``, no text), and the first caller gets its own turn's
    answer, not the one its turn's end sent for the queued message."""
    held = Held(["answer one", "answer two"])
    session = Agent(workflow(), held, tools=TOOLS).session_sync("s")

    async def scenario() -> tuple[Any, Any]:
        first = asyncio.ensure_future(session.reply("one"))
        await held.asked.wait()
        second = await session.reply("two")
        held.go.set()
        return await first, second

    first, second = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert (first, first.status) == ("answer one", "completed")
    assert (second, second.status) == ("", "queued")
    assert [str(m.content) for m in session.history if m.role == "user"] == ["one", "two"]


def test_sessions_show_reports_an_altered_approval_as_damage(tmp_path: Path) -> None:
    """What an approver reads on the command line is what the API would run, or nothing:
    the altered approval is one line, exit 1, never the forged amount."""
    import subprocess
    import sys

    path = tmp_path / "s.db"
    provider = ScriptedProvider([{"calls": [{"pay": {"amount": 5000}}]}, "paid"])
    session = Agent(workflow(), provider, tools=TOOLS, store=SQLiteStore(path)).session_sync("s")
    assert session.reply_sync("pay 5000").status == "awaiting_approval"
    assert _rewrite_approval_arguments(path, 5) == 1
    for extra in ([], ["--json"]):
        out = subprocess.run([sys.executable, "-m", "phaseflow.cli.main", "sessions", "show",
                              "s", "--store", str(path), *extra],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out
        assert out.stdout == ""
        assert "pending approval of call" in out.stderr and "altered" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_one_session_driven_from_a_new_event_loop_each_turn(tmp_path: Path) -> None:
    """Each ``reply_sync`` is an ``asyncio.run`` of its own: nothing of one turn's loop
    (the cancellation event) may be waited on by the next (it was taken for a cancel)."""
    provider = ScriptedProvider([{"calls": [{"lookup": {"q": "a"}}]}, "one",
                                 {"calls": [{"lookup": {"q": "b"}}]}, "two"])
    session = Agent(workflow(), provider, tools=TOOLS,
                    store=SQLiteStore(tmp_path / "s.db")).session_sync("s")
    assert session.reply_sync("first") == "one"
    assert session.reply_sync("second") == "two"


def test_the_approval_policy_judges_a_call_under_the_id_the_session_gives_it() -> None:
    """A model that sends calls without ids: the host's policy is asked about the call
    under the id it then has in the history and in the pending approval (never a
    provisional one), so a policy that keys on the id means the call that waits."""
    seen: list[str] = []

    def policy(call: Any, ctx: Any) -> bool:
        seen.append(f"{call.id}={ctx.call_id}")
        return call.name == "lookup"

    class NoIds:
        def __init__(self) -> None:
            self.calls = 0

        async def stream(self, request: ProviderRequest) -> AsyncIterator[Any]:
            self.calls += 1
            if self.calls == 1:
                yield ToolCallStart(0, "", "lookup")
                yield ToolCallDelta(0, '{"q": "a"}')
                yield StreamEnd(stop="tool_use")
            else:
                yield TextDelta("done")
                yield StreamEnd()

    agent = Agent(workflow(), NoIds(), tools=TOOLS, approve=policy)
    session = agent.session_sync("ids")
    collect(session.send("look it up"))
    pending = session.pending_approval
    assert pending is not None
    assert seen == [f"{pending.call_id}={pending.call_id}"]
    assert pending.call_id == "call_1_1_0"
    history_ids = [c.id for m in session.history for c in getattr(m, "tool_calls", ())]
    assert history_ids == [pending.call_id]


def test_a_host_task_cancelled_while_tools_run_stops_them_and_leaves_nothing_behind(
        caplog: pytest.LogCaptureFixture) -> None:
    """The host's own task is cancelled (a server shutting down, a client's request
    dropped by its framework) while a tool group runs: the tools are cancelled with it,
    not left running, and nothing is reported as an exception nobody retrieved."""
    stopped = threading.Event()

    @tool
    async def lookup(q: str) -> str:
        """Look something up, slowly."""
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()
        return "never"

    async def scenario() -> None:
        provider = ScriptedProvider([{"calls": [{"lookup": {"q": "a"}},
                                                {"lookup": {"q": "b"}}]}, "done"])
        session = await Agent(workflow(), provider, tools=[pay, napper, lookup]).session("s")
        turn = asyncio.ensure_future(collect_async(session.send("go")))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if session.status == "running" and session._runner.core.group is not None:
                break
        await asyncio.sleep(0.05)
        turn.cancel()
        await asyncio.gather(turn, return_exceptions=True)
        assert stopped.is_set()

    asyncio.run(scenario())
    import gc

    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
