"""A stateful test of the session: the real Agent, Session, runner and memory store,
driven by a model whose replies hypothesis draws as the requests arrive.

The model issues random tool groups (valid calls, invalid arguments, tools of another
phase, hallucinated tools, repeated and missing call ids, ``go_to_phase``, ``record``,
calls that need approval), text, retryable and fatal provider errors and exceptions.
The user sends messages (also while a turn runs or waits for approval: they queue),
approves, rejects, cancels (while a tool runs, while the stream is open, while a retry
waits; deterministically, at a gate), and the host reopens the session from the store
with a new Agent. After every step:

- every tool call in every request sent has exactly one result;
- no tool ran twice; each ran only after its admission was committed, was offered in
  the request whose reply called it, was not refused, and was approved when it needed it;
- the state was written only by declared writes, ``record`` of collected keys and
  effects, and equals the events' changes replayed;
- no user message was lost or reordered (queued ones included);
- every history sent is a prefix of the history stored; the session's history is the
  store's, and a session reopened from the store is the same session.

``PHASEFLOW_HYPOTHESIS_EXAMPLES=5000 pytest tests/session/test_session_stateful.py`` runs
it longer (the default keeps it to a few seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from phaseflow.providers.protocol import (
    CONTEXT_LENGTH_EXCEEDED,
    ProviderFailure,
    ProviderReply,
    ProviderRequest,
)
from phaseflow.session import events as ev
from phaseflow.session.agent import Agent, Session, SessionFinished
from phaseflow.session.core import ResolutionRefused
from phaseflow.session.fork import ForkRefused
from phaseflow.session.values import Core
from phaseflow.stores.memory import MemoryStore
from phaseflow.tools import ToolContext, tool
from phaseflow.turn.continuation import EffectState
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    MediaPart,
    TextPart,
    ToolResultMessage,
    UserMessage,
    content_from_json,
)
from tests.support.session_fakes import (
    FORGED,
    DeskTools,
    DrawnProvider,
    Gate,
    Plan,
    open_or_doubled,
)
from tests.support.stateful_session import (
    HALLUCINATED,
    ON_ENTER,
    REFUND,
    SCRIPT,
    SMALL,
    TIMED_PHASES,
    TIMER_DESK,
    answered_at,
    continues,
    is_summary,
    pick,
)

#: the image a ``send_a_photo`` step attaches (the same bytes: one stored copy)
PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


def _texts(content: Content) -> list[str]:
    """The user's messages in one user content: its text (queued messages joined by a
    blank line), or its text parts (a message with a photo keeps its text as a part)."""
    if isinstance(content, str):
        return content.split("\n\n")
    return [t for p in content if isinstance(p, TextPart) for t in p.text.split("\n\n")]


T = TypeVar("T")

EXAMPLES = int(os.environ.get("PHASEFLOW_HYPOTHESIS_EXAMPLES", "60"))
SID = "s"
HANG_SECONDS = 10.0
STEPS = int(os.environ.get("PHASEFLOW_HYPOTHESIS_STEPS", "20"))


class SessionMachine(RuleBasedStateMachine):
    desk = SMALL
    #: the agent's max_history_tokens (None: no compaction)
    history_budget: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.gate = Gate()
        self.tools = self.desk.tools(self.gate)
        self.tools.check = self._admitted_before_running
        self.provider = DrawnProvider(self.gate)
        self.store = MemoryStore()
        self.sleeps: list[float] = []
        self.agent = self._agent()
        self.session: Session = self.run(self.agent.session(SID))
        self.sent: list[str] = []  # the user's messages, in the order sent
        self.dropped: list[str] = []  # queued when the session finished
        self.next_id = 0
        self.problems: list[str] = []
        self.crashes = 0
        self.checked_requests = 0
        self.granted: set[str] = set()  # tools the host trusted (for any arguments) at some time

    def teardown(self) -> None:
        """Stop whatever a failed step left waiting, then close the loop."""
        self.gate.release()
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    # --- plumbing ------------------------------------------------------------------------

    def _agent(self) -> Agent:
        async def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)
            await self.gate.point("sleep")

        return Agent(self.desk.workflow, self.provider, tools=self.tools.mapping(),
                     store=self.store, approve=self.desk.policy, max_steps=4, max_retries=2,
                     sleep=sleep, max_history_tokens=self.history_budget,
                     max_continuations=1)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this machine's loop. Nothing here waits for time, so a step
        that does not finish within seconds is stuck: it fails, naming where."""
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, HANG_SECONDS))
        except TimeoutError:
            raise AssertionError(
                f"stuck: status {self.session.status}, gate at {self.gate.where!r}, "
                f"armed {self.gate.armed}") from None

    async def _collect(self, stream: Any) -> list[ev.Event]:
        return [e async for e in stream]

    async def _admitted_before_running(self, ctx: Any) -> None:
        """Inside every tool: its admission is in the store already (exactly once)."""
        record = await self.store.load(SID)
        assert record is not None
        checkpoint = record.continuation.checkpoint
        effect = checkpoint.effect(ctx.call_id) if checkpoint is not None else None
        if effect is None and any(isinstance(m, ToolResultMessage) and m.call_id == ctx.call_id
                                  for m in record.continuation.messages):
            # a thread the turn gave up on ('unknown': it may or may not run) that started
            # only after its call was answered, on a loaded machine: still its one run
            return
        if effect is None or effect.state is not EffectState.ADMITTED:
            self.problems.append(f"{ctx.call_id} ran while the store said "
                                 f"{None if effect is None else effect.state}")

    def _message(self) -> str:
        self.next_id += 1
        return f"m{self.next_id}"

    def _fresh_id(self) -> str:
        self.next_id += 1
        return f"c{self.next_id}"

    # --- the model ---------------------------------------------------------------------------

    def _model(self, data: st.DataObject, may_hang: bool) -> None:
        """The replies of this step, drawn now (hypothesis draws stay out of the event
        loop) and made concrete when each request arrives (what it offers). Past the
        script the model says "fine"."""
        script = list(data.draw(SCRIPT, label="replies"))

        def choose(request: ProviderRequest) -> Plan:
            if not script:
                return ProviderReply("fine")
            kind, calls, text, after = script.pop(0)
            if kind == "hang" and not (may_hang and self.gate.armed):
                kind = "text"
            if kind == "text":
                return ProviderReply(text or "fine")
            if kind == "hang":
                return "hang"
            if kind == "retryable":
                return ProviderFailure("overloaded", retryable=True, retry_after=after,
                                       status=429)
            if kind == "fatal":
                return ProviderFailure("bad request", retryable=False, status=400)
            if kind == "context_full":
                # recovered by a compaction (made with the agent's own provider when no
                # budget is set) and sent again once; the turn fails when nothing folds
                return ProviderFailure("maximum context length exceeded", status=400,
                                       code=CONTEXT_LENGTH_EXCEEDED)
            if kind == "cut_text":
                return ProviderReply(text or "partly", stop="max_tokens")
            if kind == "cut_group":
                return replace(self._group(calls, text, request), stop="max_tokens")
            if kind == "raise":
                return RuntimeError("connection reset")
            return self._group(calls, text, request)

        self.provider.choose = choose

    def _group(self, drawn: list[Any], text: str, request: ProviderRequest) -> ProviderReply:
        calls: list[tuple[str, str, str]] = []
        tools = [t.name for t in request.tools if t.name not in ("go_to_phase", "record")]
        targets = [p for t in request.tools if t.name == "go_to_phase"
                   for p in t.parameters["properties"]["phase"].get("enum", [])]
        for how, a, b, id_kind in drawn:
            if how in ("offered", "invalid") and not tools:
                how = "hallucinated"
            if how == "offered":
                name = pick(tools, a)
                arguments = json.dumps(pick(self.desk.valid.get(name, [{}]), b))
            elif how == "invalid":
                name = pick(tools, a)
                arguments = pick(self.desk.invalid.get(name, ["{not json"]), b)
            elif how == "other_phase":
                name = pick(list(self.desk.catalogue), a)
                arguments = json.dumps(pick(self.desk.valid.get(name, [{}]), b))
            elif how == "move" and targets and a < self.desk.offered_moves:
                # mostly forward, so that some runs reach the terminal phase
                phases = self.desk.phases
                forward = max(targets, key=lambda p: phases.index(p) if p in phases else -1)
                name = "go_to_phase"
                arguments = json.dumps({"phase": forward if a < self.desk.forward_moves
                                        else pick(targets, a)})
            elif how in ("move", "move_anywhere"):
                name = "go_to_phase"
                arguments = json.dumps({"phase": pick([*self.desk.phases, "nowhere"], a)})
            elif how == "record":
                name = "record"
                arguments = json.dumps(pick(self.desk.records, a))
            else:
                name = pick(HALLUCINATED, a)
                arguments = "{}"
            if id_kind == "repeat" and calls:
                call_id = calls[-1][0]
            elif id_kind == "empty":
                call_id = ""
            else:
                call_id = self._fresh_id()
            calls.append((call_id, name, arguments))
        return ProviderReply(text, tuple(calls), "tool_use")

    # --- rules -----------------------------------------------------------------------------

    @precondition(lambda self: self.session.status != "finished")
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        """A message, run to the end of its turn (or queued, if a turn waits)."""
        self._model(data, may_hang=False)
        text = self._message()
        self.sent.append(text)
        self.run(self._collect(self.session.send(text)))
        self._note_dropped()

    @precondition(lambda self: self.session.status != "finished")
    @rule(data=st.data())
    def send_a_photo(self, data: st.DataObject) -> None:
        """A message with an image attached (kept once by digest), run to its turn's end
        (or queued): it is a message like any other, and every request sends its bytes."""
        self._model(data, may_hang=False)
        text = self._message()
        photo = self.run(self.session.attach(PHOTO))
        assert isinstance(photo, MediaPart)
        self.sent.append(text)
        self.run(self._collect(self.session.send((TextPart(text), photo))))
        self._note_dropped()

    @invariant()
    def every_request_sends_the_bytes_of_the_photos_it_names(self) -> None:
        checked = getattr(self, "checked_photos", 0)
        for request in self.provider.requests[checked:]:
            named = {p.token for m in request.history if isinstance(m.content, tuple)
                     for p in m.content if isinstance(p, MediaPart)}
            assert dict(request.attachments) == dict.fromkeys(named, PHOTO), \
                request.request_id
        self.checked_photos = len(self.provider.requests)

    @precondition(lambda self: self.session.status != "finished")
    @rule(data=st.data(), action=st.sampled_from(
        ["cancel", "queue_and_cancel", "queue_and_release", "release", "crash",
         "queue_and_crash", "steer_and_release", "interrupt", "steer_elsewhere_and_release"]))
    def send_and_interrupt(self, data: st.DataObject, action: str) -> None:
        """A message whose turn stops at a gate (a tool, the stream or a retry's wait);
        there the user cancels, or sends another message (it queues, or steers the
        turn, or interrupts it) and lets the turn go on or cancels. ``steer_elsewhere``:
        another worker (an agent of its own on the same store) sends the steering
        message; it stores it for the holder, which takes it in between two steps. (Not
        drawn with a crash: a message left in the store's queue by a crashed turn is
        overtaken by the next message sent here, the known bug named below.)"""
        self._model(data, may_hang=True)
        if self.session.status == "running" and action.startswith("queue"):
            # A turn a stopped worker left is finished first; a message queued meanwhile
            # overtakes this one (a known bug: test_a_message_sent_while_an_interrupted_
            # turn_is_resumed_keeps_its_place). Not drawn here, so the rest is checked.
            action = action.removeprefix("queue_and_")
        if self.session.status == "running" and action in (
                "steer_and_release", "interrupt", "steer_elsewhere_and_release"):
            # (a steering message would rightly go with the resumed turn, before this
            # message, which waits for the next turn: the order the invariant checks)
            action = "release"
        text = self._message()
        self.sent.append(text)
        self.gate.arm()

        async def go() -> None:
            turn = asyncio.ensure_future(self._collect(self.session.send(text)))
            reached = asyncio.ensure_future(self.gate.reached.wait())
            await asyncio.wait({turn, reached}, return_when=asyncio.FIRST_COMPLETED)
            if self.gate.reached.is_set() and not turn.done():
                if action.startswith("queue"):
                    queued = self._message()
                    self.sent.append(queued)
                    await self._collect(self.session.send(queued))
                if action in ("steer_and_release", "interrupt"):
                    later = self._message()
                    self.sent.append(later)
                    await self._collect(self.session.send(
                        later, busy="steer" if action.startswith("steer") else "interrupt"))
                if action.startswith("steer_elsewhere"):
                    later = self._message()
                    self.sent.append(later)
                    other = await self._agent().session(SID)
                    stored = await self._collect(other.send(later, busy="steer"))
                    assert stored == []  # stored for the holder: no turn of its own
                if action == "interrupt":
                    pass  # the turn is cancelled at the gate; the next one starts
                elif action.endswith("cancel"):
                    self.session.cancel()
                elif action.endswith("crash"):
                    # the worker dies here: nothing after its last commit happens
                    turn.cancel()
                    await asyncio.gather(turn, return_exceptions=True)
                    self.crashes += 1
                    return
                else:
                    self.gate.release()
            reached.cancel()
            await turn

        crashes = self.crashes
        self.run(go())
        event(f"gate: {self.gate.where or 'not reached'} then {action}")
        self.gate.disarm()
        if self.crashes != crashes:
            self.reopen()
            if text not in self._user_parts() + self._queued():
                # The worker died before this message was committed (it resumed an
                # interrupted turn first: see the xfail below); the host's send failed.
                self.dropped.append(text)
        self._note_dropped()

    @precondition(lambda self: self.session.status == "awaiting_approval")
    @rule(data=st.data(), decision=st.sampled_from(
        ["approve", "approve_turn", "approve_session", "reject"]), bound=st.booleans())
    def resolve(self, data: st.DataObject, decision: str, bound: bool) -> None:
        self._model(data, may_hang=False)
        pending = self.session.pending_approval
        assert pending is not None
        assert self.desk.needs_approval(pending.name, json.dumps(pending.arguments))
        digest = pending.arguments_hash if bound else None
        self.run(self._collect(self.session.resolve(pending.call_id, decision,
                                                    reason="no", arguments_hash=digest)))
        self._note_dropped()

    @precondition(lambda self: self.session.status == "awaiting_approval")
    @rule(wrong=st.sampled_from(["call", "hash"]))
    def resolve_wrongly(self, wrong: str) -> None:
        """A decision for another call or other arguments is refused; nothing moves."""
        pending = self.session.pending_approval
        assert pending is not None
        version = self.run(self.store.load(SID)).version  # type: ignore[union-attr]
        call_id = pending.call_id + "x" if wrong == "call" else pending.call_id
        digest = "0" * 64 if wrong == "hash" else None
        with pytest.raises(ResolutionRefused):
            self.run(self._collect(self.session.resolve(call_id, "approve",
                                                        arguments_hash=digest)))
        assert self.session.status == "awaiting_approval"
        assert self.run(self.store.load(SID)).version == version  # type: ignore[union-attr]

    @rule(grant=st.booleans(), which=st.integers(0, 5))
    def change_trust(self, grant: bool, which: int) -> None:
        """The host trusts a tool that needs approval (any arguments), or takes every trust
        of it back: between turns or while one waits for a human."""
        tools = sorted(t for t in self.desk.approval if t in self.agent.tools)
        if not tools:
            return
        tool = tools[which % len(tools)]
        if grant:
            self.run(self.session.grant_trust(tool))
            self.granted.add(tool)
            assert any(t.tool == tool and t.covers == "any_arguments"
                       for t in self.session.trust())
        else:
            self.run(self.session.revoke_trust(tool))
            assert all(t.tool != tool for t in self.session.trust())

    @precondition(lambda self: self.session.status == "awaiting_approval")
    @rule()
    def cancel_pending(self) -> None:
        self.run(self.session.cancel_pending())
        assert self.session.status == "idle"

    @precondition(lambda self: self.session.status == "finished")
    @rule()
    def send_when_finished(self) -> None:
        with pytest.raises(SessionFinished):
            self.run(self._collect(self.session.send("too late")))

    @rule()
    def reopen(self) -> None:
        """The host restarts: a new Agent on the same store reopens the session."""
        self.agent = self._agent()
        self.session = self.run(self.agent.session(SID))

    @precondition(lambda self: self.session.turn >= 1)
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        """Fork at a random past turn. Made when that turn has ended and the store kept
        its end (refused otherwise, writing nothing): the fork's history is a prefix of
        the original's stored history with every call answered once, its turn, phase
        and state are the kept record's, nothing runs, and the original is untouched."""
        current = self.session.turn
        at = data.draw(st.integers(1, current), label="fork at")
        before = self.run(self.store.load(SID))
        assert before is not None
        kept = self.run(self.store.turn_record(SID, at))
        not_ended = at == before.turn and before.status in ("running", "awaiting_approval")
        new_id = f"fork-{self._fresh_id()}"
        try:
            fork = self.run(self.session.fork(new_id, at_turn=at))
        except ForkRefused as exc:
            assert not_ended or kept is None, str(exc)
            assert self.run(self.store.version(new_id)) == 0
            event("fork: refused")
            return
        assert not not_ended and kept is not None
        stored = Core(SID, continuation=before.continuation).history().to_tuple()
        assert stored[:len(fork.transcript)] == fork.transcript
        assert open_or_doubled(fork.transcript) == {}
        assert open_or_doubled(fork.history) == {}  # (after a summary, when compacted)
        assert (fork.turn, fork.phase, dict(fork.state)) == (at, kept.phase, dict(kept.state))
        assert fork.status == kept.status and fork.status not in ("running",
                                                                   "awaiting_approval")
        assert self.run(self.store.load(SID)) == before
        event("fork: made")

    # --- what must hold after every step -------------------------------------------------------

    def _note_dropped(self) -> None:
        """Messages queued when the session finished never get a turn (see the report)."""
        if self.session.status == "finished":
            core = self.session._runner.core
            queued = [*core.execution.steering, *core.execution.follow_up]
            assert not queued
            in_history = self._user_parts()
            self.dropped = [m for m in self.sent if m not in in_history]

    def _user_parts(self) -> list[str]:
        parts: list[str] = []
        for m in self.session.transcript:
            if isinstance(m, UserMessage) and not m.note:  # (a timer's note: no user's)
                parts.extend(_texts(m.content))
        return parts

    def _events(self) -> tuple[ev.Event, ...]:
        return self.run(self.session.events())

    @invariant()
    def nothing_went_wrong_inside_a_tool(self) -> None:
        assert self.problems == []
        event(f"status: {self.session.status}, phase: {self.session.phase}")
        if self.history_budget is not None:
            event(f"compactions so far: {min(len(self.provider.compactions), 3)}")

    @invariant()
    def every_request_answers_every_call_once(self) -> None:
        for request in self.provider.requests[self.checked_requests:]:
            assert open_or_doubled(request.history) == {}, request.request_id
        self.checked_requests = len(self.provider.requests)

    @invariant()
    def every_history_sent_is_the_history_stored(self) -> None:
        """What a request carried is the stored transcript: from its start, or (with a
        summary in front) a run of its messages that ends where the request was made."""
        history = self.session.transcript
        for request in self.provider.requests:
            sent = tuple(request.history)
            if continues(sent):
                # a cut reply's continuation: the reply so far and the ask, then what
                # the transcript holds (the parts stitched into one message)
                cut = sent[-2]
                assert isinstance(cut, AssistantMessage) and not cut.tool_calls
                sent = sent[:-2]
            if request.folded_replies or (sent and is_summary(sent[0])):
                rest = sent[1:]
                assert any(history[i:i + len(rest)] == rest
                           for i in range(len(history) - len(rest) + 1)), request.request_id
                continue
            assert history[:len(sent)] == sent, request.request_id

    @invariant()
    def the_session_history_is_the_stores(self) -> None:
        record = self.run(self.store.load(SID))
        if record is None:
            assert self.session.history == ()
            return
        # (a steering message delivered to the request in flight is stored with it)
        steer = record.core.get("steer")
        stored = Core(SID, continuation=record.continuation,
                      steer=None if steer is None else content_from_json(steer)
                      ).history().to_tuple()
        assert self.session.transcript == stored
        assert record.status == self.session.status
        assert record.phase == self.session.phase
        assert dict(record.state) == dict(self.session.state)

    @invariant()
    def a_reopened_session_is_the_same(self) -> None:
        other = Agent(self.desk.workflow, self.provider, tools=self.tools.mapping(),
                      store=self.store, approve=self.desk.policy, max_steps=4, max_retries=2)
        reopened = self.run(other.session(SID))
        s = self.session
        assert reopened.history == s.history and reopened.transcript == s.transcript
        assert (reopened.status, reopened.phase, reopened.turn) == (s.status, s.phase, s.turn)
        assert dict(reopened.state) == dict(s.state)
        assert reopened.trust() == s.trust()  # trust is stored with the session
        mine, theirs = s.pending_approval, reopened.pending_approval
        assert (mine and (mine.call_id, mine.arguments_hash)) == (
            theirs and (theirs.call_id, theirs.arguments_hash))

    def _queued(self) -> list[str]:
        """Messages waiting: in the session's queue, then in the store's (for the worker
        holding the turn)."""
        core = self.session._runner.core
        queued: list[str] = []
        for content in (*core.execution.steering, *core.execution.follow_up):
            queued.extend(_texts(content))
        for waiting in self.run(self.store.queued(SID)):
            queued.extend(_texts(content_from_json(waiting.data.get("content"))))
        return queued

    @invariant()
    def no_user_message_is_lost_or_reordered(self) -> None:
        expected = [m for m in self.sent if m not in self.dropped]
        assert self._user_parts() + self._queued() == expected, self.session.status

    @invariant()
    def no_tool_ran_twice_and_each_ran_as_allowed(self) -> None:
        keys = [i.idempotency_key for i in self.tools.invocations
                if not (self.crashes and i.name in self.desk.idempotent)]
        assert len(keys) == len(set(keys)), "a tool ran twice"
        history = self.session.transcript
        where = {c.id: (k, c) for k, m in enumerate(history) if isinstance(m, AssistantMessage)
                 for c in m.tool_calls}
        events = self._events()
        results = {e.call_id: e.status for e in events if isinstance(e, ev.ToolResultEvent)}
        approved = {e.call_id: e.decision for e in events
                    if isinstance(e, ev.ApprovalResolvedEvent)}
        for inv in self.tools.invocations:
            if inv.call_id not in where:
                continue  # its group is still open (the turn waits): checked later
            k, call = where[inv.call_id]
            assert call.name == inv.name
            asked = [r for r in self.provider.requests if answered_at(r, history, k)]
            assert asked, f"no request was answered by {inv.call_id}"
            assert inv.name in {t.name for t in asked[-1].tools}, (
                f"{inv.name} ran but was not offered")
            assert results.get(inv.call_id) in ("ok", "error", "cancelled", "unknown", None), (
                f"{inv.call_id} ran and was labelled {results.get(inv.call_id)}")
            if self.desk.needs_approval(call.name, call.arguments):
                decision = approved.get(inv.call_id)
                trusted = any(
                    d in ("approve_session", "approve_turn") and where.get(cid, (0, None))[1]
                    is not None and where[cid][1].name == call.name
                    and where[cid][1].arguments == call.arguments
                    for cid, d in approved.items()) or call.name in self.granted
                assert (decision is not None and decision != "reject") or trusted, (
                    f"{inv.call_id} ({inv.name}) ran without approval")

    @invariant()
    def every_persisted_call_has_one_result_when_its_group_closed(self) -> None:
        events = self._events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        group = self.session._runner.core.group
        open_ids = {p.call.id for p in group.calls} if group is not None else set()
        calls: dict[tuple[int, str], int] = {}
        for e in events:
            if isinstance(e, ev.ToolCallEvent):
                calls[(e.turn, e.call_id)] = 0
            elif isinstance(e, ev.ToolResultEvent):
                assert (e.turn, e.call_id) in calls, f"a result for no call: {e.call_id}"
                calls[(e.turn, e.call_id)] += 1
        for (turn, cid), n in calls.items():
            if cid in open_ids and turn == self.session.turn:
                assert n <= 1
            else:
                assert n == 1, f"call {cid} of turn {turn} has {n} results"

    @invariant()
    def state_was_written_only_as_allowed(self) -> None:
        state = dict(self.session.state)
        assert FORGED not in state.values(), state
        assert state.get("paid") is not False, state
        replayed: dict[str, Any] = dict(self.desk.workflow.defaults())
        for e in self._events():
            if isinstance(e, ev.StateChanged):
                allowed = self.desk.writes.get(e.source)
                assert allowed is not None, e.source
                assert set(e.keys) <= allowed, (e.source, e.keys)
                for key in e.keys:
                    replayed[key] = e.new.get(key)
        replayed = {k: v for k, v in replayed.items() if v is not None}
        assert replayed == state

    @invariant()
    def a_cut_reply_is_continued_or_ends_its_turn_cut(self) -> None:
        """Each continuation is an event, each stitched part is one of them, and a turn
        whose reply stayed cut ends ``cut`` (never ``completed``) with a ``max_tokens``
        error; a full context is recovered (``context_full``) or fails its turn."""
        events = self._events()
        asked = [e for e in events if isinstance(e, ev.ReplyContinued)]
        stitched = sum(m.continued for m in self.session.transcript
                       if isinstance(m, AssistantMessage))
        assert stitched <= len(asked)
        for e in events:
            if isinstance(e, ev.TurnFinished) and e.status == "cut":
                assert any(isinstance(x, ev.ErrorEvent) and x.code == "max_tokens"
                           and x.turn == e.turn for x in events)
        if asked:
            event("a reply was continued")
        if stitched:
            event("continued parts were stitched")
        if any(isinstance(e, ev.TurnFinished) and e.status == "cut" for e in events):
            event("a turn ended cut")
        if any(isinstance(e, ev.ErrorEvent) and e.code == "context_full" for e in events):
            event("a full context was recovered")

    @invariant()
    def retries_never_wait_past_the_cap(self) -> None:
        assert all(0.0 <= s <= 30.0 for s in self.sleeps)


class CompactingMachine(SessionMachine):
    """The same machine with a small history budget: compactions at random points (in
    a turn, between its requests, under cancels, crashes, steering and interrupts)."""

    history_budget = 120


class ThreadedDeskTools(DeskTools):
    """The desk's tools with ``wait`` a sync tool with a timeout: it runs in a thread of
    its own and blocks there at the gate (a real thread, which nothing can stop)."""

    loop: asyncio.AbstractEventLoop | None = None

    def mapping(self) -> dict[str, Any]:
        tools = super().mapping()

        def wait(ctx: ToolContext, **arguments: Any) -> str:
            loop = self.loop
            assert loop is not None
            asyncio.run_coroutine_threadsafe(self._note("wait", arguments, ctx), loop).result()
            asyncio.run_coroutine_threadsafe(self.gate.point("tool"), loop).result()
            return "waited"

        tools["wait"] = tool(name="wait", description="the wait tool",
                             parameters={"type": "object"}, timeout=0.5)(wait)
        return tools


class ThreadedToolMachine(SessionMachine):
    """The same machine with a tool that blocks in a thread of its own: a cancel (or an
    interrupt) at it leaves the session ``cancelling`` until the thread is released or
    reaches its deadline (``unknown``); never at rest, and no call gets two results."""

    desk = replace(SMALL, tools=ThreadedDeskTools)

    def __init__(self) -> None:
        super().__init__()
        assert isinstance(self.tools, ThreadedDeskTools)
        self.tools.loop = self.loop

    @invariant()
    def never_cancelling_at_rest(self) -> None:
        assert self.session.status != "cancelling" or self.crashes, self.session.status
        if any(isinstance(e, ev.TurnCancelling) for e in self._events()):
            event("a cancel waited for a tool's thread")


class FakeClock:
    """The agents' wall and phase clock: moved by the test; every reading a millisecond
    later than the last (so no two deadlines of the run are the same number)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


class TimerMachine(SessionMachine):
    """The same machine on the desk with timers (intake: ``after: 10m``; review: a guard
    ``seconds_in_phase >= 1800``), and a clock the test moves: among messages, approvals,
    cancels and crashes, the time passes and due timers are fired - by the session or by
    the agent's ``fire_timers`` - or a timer turn is killed at a gate (in the ``on_enter``
    of the phase the timer moves to, at the model, a tool or a retry's wait). Besides the
    invariants of every machine (no tool effect twice, no message lost, every call one
    result): each deadline fires at most one timer turn, and a timer turn asks the model
    only after its move (never in the phase its timer leaves, also when it was resumed
    by another worker)."""

    desk = TIMER_DESK

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.on_enter_gated = False
        #: the deadlines that fired a timer turn
        self.fired: set[float] = set()
        super().__init__()
        ON_ENTER[0] = self

    def teardown(self) -> None:
        ON_ENTER[0] = None
        super().teardown()

    def _agent(self) -> Agent:
        async def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)
            await self.gate.point("sleep")

        return Agent(self.desk.workflow, self.provider, tools=self.tools.mapping(),
                     store=self.store, approve=self.desk.policy, max_steps=4, max_retries=2,
                     sleep=sleep, max_continuations=1, clock=self.clock,
                     phase_clock=self.clock)

    def _timer_turns(self) -> list[ev.TurnStartedEvent]:
        return [e for e in self._events()
                if isinstance(e, ev.TurnStartedEvent) and e.note == "timer"]

    @precondition(lambda self: self.session.status != "finished")
    @rule(data=st.data(), seconds=st.sampled_from([1.0, 299.0, 600.0, 1200.0, 1800.0]),
          by=st.sampled_from(["session", "agent"]), crash=st.booleans())
    def tick(self, data: st.DataObject, seconds: float, by: str, crash: bool) -> None:
        """The time passes; the session's due timer is fired (``crash``: its turn is
        killed at the first gate it reaches, then the host restarts)."""
        self._model(data, may_hang=crash)
        self.clock.now += seconds
        record = self.run(self.store.load(SID))
        due = record.next_timer_at if record is not None else None
        before = len(self._timer_turns())
        if crash:
            self.on_enter_gated = True
            self.gate.arm()

        async def go() -> None:
            firing = asyncio.ensure_future(
                self._collect(self.session.firing_timer()) if by == "session"
                else self.agent.fire_timers())
            reached = asyncio.ensure_future(self.gate.reached.wait())
            await asyncio.wait({firing, reached}, return_when=asyncio.FIRST_COMPLETED)
            if crash and self.gate.reached.is_set() and not firing.done():
                firing.cancel()  # the worker dies here
                await asyncio.gather(firing, return_exceptions=True)
                self.crashes += 1
            else:
                await firing
            reached.cancel()
            await asyncio.gather(reached, return_exceptions=True)

        crashes = self.crashes
        try:
            self.run(go())
        finally:
            self.on_enter_gated = False
            self.gate.disarm()
        event(f"tick: {by}, gate {self.gate.where or 'not reached'}"
              f"{', crashed' if self.crashes != crashes else ''}")
        if by == "agent" or self.crashes != crashes:
            self.reopen()  # (the agent fired it through a session of its own)
        new = self._timer_turns()[before:]
        assert len(new) <= 1
        if new:
            assert due is not None and due <= self.clock.now, (due, self.clock.now)
            assert due not in self.fired, f"the deadline {due} fired a second timer turn"
            self.fired.add(due)
            event(f"a timer fired in {new[0].message.split(chr(39))[1]}")
        self._note_dropped()

    @precondition(lambda self: self.session.turn >= 1)
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        """A fork as every machine makes it; its deadline is the forked turn's end's,
        as far ahead of the fork's making as it was of that turn's end (its clock starts
        again there). The fork is then deleted: ``fire_timers`` would fire its timers
        too, and its requests are not this session's."""
        super().fork(data)
        new_id = f"fork-c{self.next_id}"
        made = self.run(self.store.load(new_id))
        if made is None:
            return
        kept = self.run(self.store.turn_record(SID, made.turn))
        assert kept is not None
        if kept.next_timer_at is None:
            assert made.next_timer_at is None
        else:
            assert made.next_timer_at == pytest.approx(
                kept.next_timer_at + (made.updated_at - kept.updated_at))
        assert self.run(self.store.delete(new_id))

    @invariant()
    def each_deadline_fired_at_most_one_timer_turn(self) -> None:
        assert len(self._timer_turns()) == len(self.fired)

    @invariant()
    def a_timer_turn_asks_the_model_only_after_its_move(self) -> None:
        for started in self._timer_turns():
            left = started.message.split("'")[1]  # "... the timer of phase 'intake' ..."
            if left not in TIMED_PHASES:
                continue
            first = [r for r in self.provider.requests
                     if r.request_id == f"{SID}:{started.turn}:1"]
            assert all(f"Current phase: {left} " not in r.context for r in first), (
                f"turn {started.turn} asked the model in {left}, the phase its timer left")

    @invariant()
    def a_timer_note_is_never_a_users_message(self) -> None:
        for m in self.session.transcript:
            if isinstance(m, UserMessage) and isinstance(m.content, str) and (
                    m.content.startswith("[timer]")):
                assert m.note == "timer"
        assert not any(isinstance(c, str) and "[timer]" in c for c in self._queued())


class RefundDeskMachine(SessionMachine):
    """The same machine on the bundled refund desk (preparations, guards, needs)."""

    desk = REFUND


SETTINGS = settings(
    phases=tuple(Phase) if not os.environ.get("PHASEFLOW_HYPOTHESIS_NO_SHRINK") else (
        Phase.explicit, Phase.reuse, Phase.generate),
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SessionMachine.TestCase.settings = SETTINGS
RefundDeskMachine.TestCase.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 3))
CompactingMachine.TestCase.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))
TestSession = SessionMachine.TestCase
TestCompacting = CompactingMachine.TestCase
TestRefundDesk = RefundDeskMachine.TestCase
ThreadedToolMachine.TestCase.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 3))
TestThreadedTool = ThreadedToolMachine.TestCase
TimerMachine.TestCase.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))
TestTimers = TimerMachine.TestCase


class _Script:
    """A stand-in for hypothesis data: every draw returns the given script."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        return self.replies


def test_a_message_sent_while_an_interrupted_turn_is_resumed_keeps_its_place() -> None:
    """m2's turn is interrupted (its worker stops while a tool runs). m4, sent to a new
    worker, resumes that turn first; m5 is sent while the resumed turn waits for the
    model. The user sent m4 before m5: the history must say so."""
    machine = SessionMachine()
    here = globals()
    saved, here["event"] = here["event"], lambda *a, **k: None
    try:
        machine.send(_Script(("text", [], "ok", None)))  # type: ignore[arg-type]
        machine.send_and_interrupt(_Script(  # type: ignore[arg-type]
            ("group", [("offered", 1, 0, "fresh")], "", None)), "crash")
        assert machine.session.status == "running"
        machine.gate.arm()

        async def resumed_then_queued() -> None:
            turn = asyncio.ensure_future(machine._collect(machine.session.send("m4")))
            await machine.gate.reached.wait()
            await machine._collect(machine.session.send("m5"))
            machine.gate.release()
            await turn

        machine._model(_Script(("hang", [], "", None), ("text", [], "ok", None),  # type: ignore[arg-type]
                               ("text", [], "ok", None)), may_hang=True)
        machine.run(resumed_then_queued())
        parts = machine._user_parts()

        assert parts.index("m4") < parts.index("m5"), parts
    finally:
        here["event"] = saved
        machine.teardown()
