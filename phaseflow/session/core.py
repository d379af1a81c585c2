"""The session's turn loop as a pure step function.

``step(core, input, limits)`` takes the session's values and one thing that happened (the
user sent a message, the model replied, a tool finished, a boundary ran, a human
decided, the host cancelled) and returns the next values and the commands the runner
must perform, in order. Nothing here performs I/O, reads a clock or draws a random
number: those arrive in the inputs. So the exactly-once order is data that a test can
read - ``[Persist(admission), RunTools(calls)]`` - and every rule of a turn is tested
without a model, a store or an event loop (see ``tests/session/test_core*.py``).

The values are the turn core's two (:class:`TurnExecution` for the run phase, queues,
approvals and trust; :class:`Continuation` for the exact history and the tool ledger)
plus the session's own: the user turn number (each request's turn id), the requests
made in this turn and the open tool group's plan. The turn core's :class:`TurnProgress`
stages are not mirrored here: the session's status and its group say where a turn is.
The machine is not here: it runs host code (effects, preparations), so the runner owns
it and reports what it did (:class:`BoundaryDone`) and where the conversation now is
(:class:`PhaseView`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from phaseflow.errors import PhaseflowError
from phaseflow.providers.protocol import CONTEXT_LENGTH_EXCEEDED
from phaseflow.session import events as ev
from phaseflow.session.compaction import fold_point, history_chars, replies_in, visible
from phaseflow.session.host_inputs import (
    host_compaction_id,
    on_change_trust,
    on_compact_now,
    on_limit_edits,
    on_mode,
)
from phaseflow.session.prompt_text import joined_content, plain_text, unanswered
from phaseflow.session.structured import RETRY_TEXT, check_reply, recorded
from phaseflow.session.tool_calls import (
    arguments_hash,
    judged_writes,
    named_calls,
    plan,
    shown_arguments,
)
from phaseflow.session.values import (
    BoundaryDone,
    CallProvider,
    Cancel,
    Cancelling,
    ChangeTrust,
    Command,
    Compact,
    Compacted,
    Compaction,
    CompactNow,
    Core,
    Done,
    Group,
    Input,
    Interrupt,
    LimitEdits,
    Limits,
    Pause,
    Persist,
    Planned,
    Replied,
    RequestFailed,
    Resolve,
    ResultLabel,
    Resume,
    RunBoundary,
    RunTools,
    Send,
    SetMode,
    Sleep,
    Status,
    Step,
    ToolDone,
    TurnOver,
)
from phaseflow.spec.builtin_tools import BUILTIN_TOOLS
from phaseflow.spec.builtin_tools import GO_TO_PHASE as GO_TO_PHASE  # the session's names
from phaseflow.spec.builtin_tools import RECORD as RECORD
from phaseflow.turn.continuation import OUTCOME_UNKNOWN_TEXT, RequestOutcome
from phaseflow.turn.execution import (
    ApprovalRequest,
    ApprovalResolved,
    CompletionFinished,
    PromptKind,
    Queued,
    SendNext,
    SendNow,
)
from phaseflow.turn.inputs import evolve
from phaseflow.turn.messages import (
    AssistantMessage,
    Content,
    ToolCall,
    ToolOutcome,
    UserMessage,
)
from phaseflow.turn.progress import TurnId
from phaseflow.turn.rejections import Rejected

BUILTINS = BUILTIN_TOOLS


class CoreError(PhaseflowError):
    """The session's values and an input do not fit: a bug in the runner, never a domain
    outcome (those are values)."""


def _ok(value: Any) -> Any:
    """Unwrap a turn-core result that cannot be a rejection when the core is right."""
    if isinstance(value, Rejected):
        raise CoreError(f"turn core refused: {value}")
    return value


# --- the step function -----------------------------------------------------------------


#: the limits of a step when the caller gives none (a frozen value, shared)
DEFAULT_LIMITS = Limits()


def step(core: Core, event: Input, limits: Limits = DEFAULT_LIMITS) -> Step:
    """The next values and what to do, for one input. Raises :class:`CoreError` only
    for an input that does not fit the values (a runner bug); stale inputs (a reply to
    an old request, a second result for a call) change nothing."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise CoreError(f"not a session input: {type(event).__name__}")
    return handler(core, event, limits)


def _between_turns(handler: Callable[[Core, Any], Step]) -> Callable[[Core, Any, Limits], Step]:
    """A host's input that needs no limits (it acts between turns)."""
    return lambda core, event, _limits: handler(core, event)


# --- a turn begins -----------------------------------------------------------------------


def _on_send(core: Core, event: Send, limits: Limits) -> Step:
    if event.timer:
        # A timer's turn: the session's note alone (messages still queued from an
        # aborted turn stay queued: they start the next turn, never joined to the note)
        if core.execution.active:
            return Step(core)  # a turn holds the session: its boundary sees the timer
        started = _ok(core.execution.begin_turn())
        return _start_turn(evolve(core, execution=started, view=event.view),
                           event.content, limits, note=TIMER)
    admitted = core.execution.admit_prompt(event.kind, event.content)
    core = evolve(core, execution=admitted.execution, view=event.view)
    outcome = admitted.action
    if isinstance(outcome, Queued):
        return Step(core, (Persist(),))
    contents = (outcome.content,) if isinstance(outcome, SendNow) else outcome.contents
    return _start_turn(core, joined_content(contents), limits)


#: the note of a timer's turn's input (its user message and ``turn_started`` event)
TIMER = "timer"


def _start_turn(core: Core, content: Content, limits: Limits, *, note: str = "") -> Step:
    """A turn begins with ``content``. ``note`` ``"timer"``: a timer's turn, whose
    first step is the boundary (the timer's transition taken, ``on_enter`` run), then
    the model's first request in the phase it leads to; until that boundary is done the
    turn ``awaits_first_boundary``, and a worker that resumes it takes the boundary
    first (never a request in the phase the timer leaves)."""
    turn = core.turn + 1
    request_id = f"{core.session_id}:{turn}"
    continuation = _ok(core.continuation.begin_request(request_id, TurnId(turn), content,
                                                       note))
    boundary = note == TIMER
    execution = _ok(core.execution.provider_started())
    core = evolve(
        core, execution=execution, continuation=continuation,
        status="running", turn=turn, step=0, attempt=0, group=None, request_id=None,
        final_request=False, reply="", input_tokens=0, output_tokens=0, cached_input_tokens=0,
        cut="", cut_reasoning="", cut_parts=0, continued=0, cut_off=False, recovered=0,
        reply_retry="", reply_problem="", awaits_first_boundary=boundary,
    )
    events: tuple[ev.Event, ...] = (
        ev.TurnStartedEvent(message=plain_text(content), turn=turn, note=note),)
    if boundary:
        return Step(core, (Persist(events), RunBoundary((), None, final=False)))
    nxt = _next_request(core, limits)
    return Step(nxt.core, (Persist(events), *nxt.commands))


def _next_request(core: Core, limits: Limits) -> Step:
    """Ask the model again (the turn's next step), or end the turn at the step limit.
    Steering messages sent while the turn ran go with this request (committed first, so
    a worker that resumes sends them again)."""
    if core.step >= limits.max_steps:
        return _end_at_step_limit(core, limits)
    n = core.step + 1
    request_id = f"{core.session_id}:{core.turn}:{n}"
    final = core.view is not None and core.view.terminal
    first: tuple[Command, ...] = ()
    steering = core.execution.steering
    if steering and core.step > 0 and core.steer is None:
        content = joined_content(steering)
        core = evolve(core, steer=content,
                      execution=evolve(core.execution, steering=()))
        first = (Persist((ev.MessageSteered(message=plain_text(content), turn=core.turn),)),)
    core = evolve(core, step=n, attempt=0, request_id=request_id, final_request=final,
                   sent=core.history(), recovered=0)
    return _ask(core, first, limits)


def _ask(core: Core, first: tuple[Command, ...], limits: Limits) -> Step:
    """Send the current request - after compacting the history when it would carry more
    than the agent's budget (see :mod:`phaseflow.session.compaction`)."""
    budget = limits.max_history_tokens
    sent = core.sent
    assert sent is not None and core.request_id is not None
    if budget is not None:
        shown = visible(sent, core.compaction)
        if history_chars(shown) * core.tokens_per_char > budget:
            upto = fold_point(sent, core.compaction, int(budget / 2 / core.tokens_per_char))
            if upto is not None:
                start = core.compaction.upto if core.compaction is not None else 0
                previous = core.compaction.summary if core.compaction is not None else ""
                folded = sent.after(start)[:upto - start]
                core = evolve(core, folding=upto)
                return Step(core, (*first, Compact(f"{core.request_id}:compact", folded,
                                                   previous, max(64, budget // 4))))
    return Step(core, (*first, _call(core)))


def _call(core: Core) -> CallProvider:
    """The current request as the model sees it (the summary in place of what it
    folds)."""
    sent = core.sent if core.sent is not None else core.history()
    assert core.request_id is not None
    compaction = core.compaction
    shown = visible(sent, compaction)
    if core.reply_retry:
        # a final reply that did not match the phase's reply schema: it, and the problem
        shown = shown.append(AssistantMessage(core.reply_retry)).append(
            UserMessage(RETRY_TEXT.format(problem=core.reply_problem)))
    if core.cut_parts:
        # a reply cut at the output limit: what it said so far, and the ask to go on
        shown = shown.append(AssistantMessage(core.cut, (), core.cut_reasoning,
                                              continued=core.cut_parts - 1)).append(
            UserMessage(CONTINUE_TEXT))
    return CallProvider(core.request_id, shown, core.final_request,
                        compaction.replies if compaction is not None else 0,
                        compaction.upto if compaction is not None else 0)


#: what the model is asked after a reply cut at its output limit (with what it said)
CONTINUE_TEXT = ("Your reply was cut at the output limit. Continue it exactly where it "
                 "stopped, without repeating anything.")


def _on_compacted(core: Core, event: Compacted) -> Step:
    """The summary is in: the fold is committed with a ``history_compacted`` event,
    then the waiting request is sent (none, for the host's compaction between turns).
    A failed summary leaves the history as it was."""
    upto = core.folding
    between_turns = core.request_id is None and core.status not in (
        "running", "awaiting_approval") and event.request_id == host_compaction_id(core)
    in_turn = core.request_id is not None and core.status == "running" and (
        event.request_id == f"{core.request_id}:compact")
    if upto is None or not (between_turns or in_turn):
        return Step(core)  # stale: the turn moved on (a cancel)
    core = evolve(core, folding=None)
    if event.summary is None:
        if in_turn and core.recovered:
            # the request was refused as too long: sent again as it was, it would be
            # refused again
            return _fail(core, "context_length_exceeded", (
                f"the model's context is full and the history could not be compacted "
                f"({event.problem})"))
        failed = ev.ErrorEvent(code="compaction_failed", turn=core.turn, message=(
            f"the history could not be compacted ({event.problem}); "
            + ("the request is sent with the history as it was" if in_turn else
               "the history is as it was")))
        return Step(core, (Persist((failed,)), *((_call(core),) if in_turn else ())))
    sent = core.sent
    assert sent is not None
    before = core.compaction
    start = before.upto if before is not None else 0
    replies = (before.replies if before is not None else 0) + replies_in(
        sent.after(start)[:upto - start])
    core = evolve(core, compaction=Compaction(upto, event.summary, replies))
    compacted = ev.HistoryCompacted(folded=upto - start, upto=upto, summary=event.summary,
                                    turn=core.turn)
    if not in_turn:
        core = evolve(core, sent=None)
    # the request waiting for the summary is built now, with the fold in place (built
    # before it, it would carry the history the fold was made to shorten)
    return Step(core, (Persist((compacted,)), *((_call(core),) if in_turn else ())))


def _end_after_group(core: Core) -> Core:
    """Close the request after a tool group with no next generation to come (the step
    limit, a cut reply)."""
    return _close_request(core)


def _end_at_step_limit(core: Core, limits: Limits) -> Step:
    core = _end_after_group(core)
    error = ev.ErrorEvent(code="step_limit", turn=core.turn, message=(
        f"the turn made {limits.max_steps} model requests (max_steps) without a final reply;"
        " it ends here"))
    return _finish(core, "step_limit", (error,), limits)


def _close_request(core: Core) -> Core:
    """End the continuation's request keeping what it has (the prompt, every result)."""
    c = core.continuation
    request = c.request
    if request is None:
        return core
    if c.checkpoint is not None and not c.checkpoint.complete:
        raise CoreError("a request is closed with calls still open")
    done = _ok(c.complete(RequestOutcome(request.id, request.turn_id, request.revision,
                                         core.history())))
    return evolve(core, continuation=done, group=None, request_id=None, steer=None)


def _finish(core: Core, status: str, events: tuple[ev.Event, ...], limits: Limits) -> Step:
    """The turn is over: completion, then the queued prompts start the next turn."""
    execution = core.execution
    nxt: SendNext | None = None
    if execution.active:
        started = execution.begin_completion()
        if isinstance(started, Rejected):  # tools were still marked running: drop them
            execution = execution.abort()
        else:
            finished: CompletionFinished = _ok(started.finish_completion())
            execution, nxt = finished.execution, finished.next
    terminal = core.view is not None and core.view.terminal and core.final_request
    session_status: Status
    if terminal:
        session_status = "finished"
    elif status == "failed":
        session_status = "failed"
    else:
        session_status = "idle"
    core = evolve(core, execution=execution, status=session_status, request_id=None,
                   group=None)
    finished_event = ev.TurnFinished(
        reply=core.reply, status=status, turn=core.turn, input_tokens=core.input_tokens,
        output_tokens=core.output_tokens, cached_input_tokens=core.cached_input_tokens,
    )
    if nxt is not None and session_status == "finished":
        events = (*events, unanswered(nxt.contents, core.turn))
    commands: list[Command] = [Persist((*events, finished_event)), TurnOver(status)]
    if nxt is not None and session_status != "finished":
        # The queued prompts were taken out of the queue by the completion: they are the
        # next turn's message, started now (the commit above stored them as queued).
        follow = _start_turn(core, joined_content(nxt.contents), limits)
        return Step(follow.core, (*commands, *follow.commands))
    return Step(core, tuple(commands))


# --- the model replied -------------------------------------------------------------------


def _on_reply(core: Core, event: Replied, limits: Limits) -> Step:
    if event.request_id != core.request_id or core.status != "running" or core.group:
        return Step(core)  # stale: a reply to a request that is no longer asked
    reply = event.reply
    calls = named_calls(reply.calls, core) if not core.final_request else []
    # a continued reply: the parts so far, then this one (stitched into one message)
    text, reasoning, parts = core.cut + reply.text, core.cut_reasoning + reply.reasoning, \
        core.cut_parts
    core = evolve(
        core, view=event.view, reply=text or core.reply,
        input_tokens=core.input_tokens + reply.usage.input_tokens,
        output_tokens=core.output_tokens + reply.usage.output_tokens, request_id=None,
        cached_input_tokens=core.cached_input_tokens + reply.usage.cached_input_tokens,
    )
    if event.sent_chars > 0 and reply.usage.input_tokens > 0:
        # what a character costs, as this provider counts: the next budget check's ratio
        core = evolve(core, tokens_per_char=reply.usage.input_tokens / event.sent_chars)
    events: list[ev.Event] = []
    cut = reply.stop == "max_tokens"
    more = cut and core.continued < limits.max_continuations
    if more and not calls:
        return _continue_cut(core, text, reasoning, limits)
    if cut and not more:
        events.append(ev.ErrorEvent(code="max_tokens", turn=core.turn, message=(
            "the model's reply was cut at its output limit" + (
                f", and still after {core.continued} continuation(s) (max_continuations)"
                if core.continued else ""))))
        core = evolve(core, cut_off=True)
    if core.continued or parts:
        core = evolve(core, cut="", cut_reasoning="", cut_parts=0,
                      continued=core.continued if cut else 0)
    # a stitched reply's provider parts belong to its last part alone: none are carried
    assistant = AssistantMessage(text, tuple(calls), reasoning,
                                 reply.carried if not parts else None, continued=parts)
    messages = (core.sent if core.sent is not None else core.history()).append(assistant)
    request = core.continuation.request
    assert request is not None
    writes: tuple[tuple[str, str, str, Any], ...] = ()
    retried = bool(core.reply_retry)  # this reply answers a structured reply sent back
    if retried:
        core = evolve(core, reply_retry="", reply_problem="")
    if not calls and event.shape is not None and not core.final_request and not cut:
        value, problem = check_reply(text, event.shape)
        if value is None and not retried:
            return _retry_reply(core, text, problem, limits)
        if value is None:
            events.append(ev.ErrorEvent(code="reply_invalid", turn=core.turn, message=(
                f"the model's reply did not match the phase's reply schema, also when sent "
                f"back once: {problem}")))
        else:
            writes = tuple((REPLY_CALL, REPLY_CALL, key, v)
                           for key, v in recorded(value, event.shape))
    if not calls:
        done = _ok(core.continuation.complete(
            RequestOutcome(request.id, request.turn_id, request.revision, messages)))
        core = evolve(core, continuation=done, steer=None)
        if core.final_request:
            return _finish(core, _ended(core), tuple(events), limits)
        # The reply is committed with the final boundary (one commit): a crash before it
        # resumes from the last commit, which asks the model this request again.
        first: tuple[Command, ...] = (Persist(tuple(events)),) if events else ()
        return Step(core, (*first, RunBoundary(writes, None, final=True)))
    continuation = _ok(core.continuation.checkpoint_tool_group(request.id, messages, calls))
    checkpoint = continuation.checkpoint
    assert checkpoint is not None
    if cut:
        # A reply cut at the output limit may hold a call cut short: none of its calls
        # runs (each gets a result saying so); the model is asked to go on after the
        # group, or, past max_continuations, the turn ends after it.
        planned = tuple(Planned(c, "refused", CUT_CALL_TEXT) for c in calls)
        if more:
            core = evolve(core, continued=core.continued + 1)
            events.append(ev.ReplyContinued(continuation=core.continued,
                                            of=limits.max_continuations, calls=len(calls),
                                            turn=core.turn))
    else:
        planned = plan(calls, event.view, event.flagged, core.execution)
        listed = tuple(p.call for p in planned if p.kind == "planned")
        if listed:
            core = evolve(core, plan=(*core.plan, *listed))
    core = evolve(core, continuation=continuation, steer=None,
                  group=Group(checkpoint.id, planned, cut=cut and not more))
    for call in calls:
        events.append(ev.ToolCallEvent(call_id=call.id, name=call.name, turn=core.turn,
                                       arguments=shown_arguments(call)))
    # Calls decided without running anything get their results now: in the same commit
    # as the checkpoint, so none of them can ever be admitted later.
    for p in planned:
        if p.kind in ("refused", "ignored", "planned"):
            label: ResultLabel = p.kind  # (one of these three)
            core, event_ = _settle(core, p.call, Done(ToolOutcome.error(p.note), label))
            events.append(event_)
        elif p.kind == "record":
            keys = ", ".join(k for k, _ in p.writes) or "nothing"
            core, event_ = _settle(core, p.call, Done(ToolOutcome.ok(f"recorded: {keys}"), "ok",
                                                      p.writes))
            events.append(event_)
    return _continue_group(core, tuple(events), limits)


#: the result of each call of a reply cut at the model's output limit
CUT_CALL_TEXT = ("Not run: your reply was cut at the output limit (max_tokens), so this call "
                 "may be incomplete. Make it again if you still need it.")


def _ended(core: Core) -> str:
    """How a turn whose last reply is in ended: ``cut`` when that reply was still cut
    at the output limit after the last continuation."""
    return "cut" if core.cut_off else "completed"


#: the call id and tool name of the state writes of a structured reply
REPLY_CALL = "reply"


def _retry_reply(core: Core, text: str, problem: str, limits: Limits) -> Step:
    """A final reply that does not match the phase's ``reply`` schema, the first time in
    this request: sent back (that reply, then :data:`RETRY_TEXT` with the problem) within
    the same request of the ledger; the reply that answers replaces it in the history."""
    request_id = f"{core.session_id}:{core.turn}:{core.step}:reply"
    core = evolve(core, reply_retry=text or " ", reply_problem=problem,
                  request_id=request_id, attempt=0, recovered=0)
    return _ask(core, (), limits)


def _continue_cut(core: Core, text: str, reasoning: str, limits: Limits) -> Step:
    """A text reply cut at the output limit, with continuations left: the model is
    asked to go on (its reply so far sent back, then :data:`CONTINUE_TEXT`), within the
    same request of the ledger; the parts are stitched into one message when a reply
    that is not cut arrives."""
    k = core.continued + 1
    request_id = f"{core.session_id}:{core.turn}:{core.step}:more{k}"
    core = evolve(core, cut=text, cut_reasoning=reasoning, cut_parts=core.cut_parts + 1,
                  continued=k, request_id=request_id, attempt=0, recovered=0)
    continued = ev.ReplyContinued(continuation=k, of=limits.max_continuations,
                                  turn=core.turn)
    return _ask(core, (Persist((continued,)),), limits)


def _settle(core: Core, call: ToolCall, done: Done) -> tuple[Core, ev.ToolResultEvent]:
    """Give ``call`` its result: in the ledger (admitting it first when it was never
    run: the admission token is spent, so it can never run later) and in the group."""
    group = core.group
    assert group is not None
    request = core.continuation.request
    assert request is not None
    c = core.continuation
    effect = c.checkpoint.effect(call.id) if c.checkpoint is not None else None
    if effect is not None and effect.state.value == "pending":
        c = _ok(c.admit_call(request.id, group.checkpoint_id, call))
    c = _ok(c.complete_call(request.id, group.checkpoint_id, call, done.outcome))
    entry = group.entry(call.id)
    assert entry is not None
    group = group.with_entry(evolve(entry, ended=done.ended))
    if done.captured is not None and done.captured not in core.captures:
        core = evolve(core, captures=(*core.captures, done.captured))
    event = ev.ToolResultEvent(call_id=call.id, name=call.name, status=done.label,
                               content=plain_text(done.outcome.content), turn=core.turn)
    return evolve(core, continuation=c, group=group), event


def _continue_group(core: Core, events: tuple[ev.Event, ...], limits: Limits) -> Step:
    """After a decision: ask the next approval, or admit and run what may run, or, when
    every call has its result, close the group."""
    group = core.group
    assert group is not None
    for p in group.calls:
        if p.kind == "approval" and not p.approved and p.ended is None:
            if core.execution.trusted_scope(p.call) is not None:
                # trusted since the reply came: an approve_turn / approve_session of an
                # identical call earlier in this group
                group = group.with_entry(evolve(p, approved=True))
                core = evolve(core, group=group)
                continue
            approval = ApprovalRequest(p.call, f"{p.call.name} needs approval")
            execution = _ok(core.execution.request_approval(approval))
            core = evolve(core, execution=execution, status="awaiting_approval")
            asked = ev.ApprovalRequested(
                call_id=p.call.id, name=p.call.name, arguments=p.call.argument_value(),
                arguments_hash=arguments_hash(p.call), reason=approval.reason, turn=core.turn)
            return Step(core, (Persist((*events, asked)), Pause()))
    if not group.admitted:
        runnable = tuple(p for p in group.calls if (p.kind in ("run", "move") or (
            p.kind == "approval" and p.approved)) and p.ended is None)
        if runnable:
            c = core.continuation
            request = c.request
            assert request is not None
            for p in runnable:
                c = _ok(c.admit_call(request.id, group.checkpoint_id, p.call))
            core = evolve(core, continuation=c, status="running",
                           group=evolve(group, admitted=True))
            return Step(core, (Persist(events), RunTools(runnable, not limits.parallel_tools)))
        core = evolve(core, group=evolve(group, admitted=True))
    if core.group is not None and core.group.complete:
        return _close_group(core, events)
    return Step(core, (Persist(events),) if events else ())


def _close_group(core: Core, events: tuple[ev.Event, ...]) -> Step:
    """Every call has its result: persist them, then the writes and the boundary. A
    quiet boundary (it calls nothing outside the process) runs first and is committed
    with the results: one commit, not two."""
    group = core.group
    assert group is not None
    move = next((p.ended.move for p in group.calls
                 if p.ended is not None and p.ended.move is not None), None)
    events = (*core.pending, *events)
    boundary = RunBoundary(group.writes(), move, final=group.cut)
    if core.view is not None and core.view.quiet:
        return Step(evolve(core, status="running", pending=events), (boundary,))
    core = evolve(core, status="running", pending=())
    return Step(core, (Persist(events), boundary))


# --- tools finish ------------------------------------------------------------------------


def _on_tool_done(core: Core, event: ToolDone, limits: Limits) -> Step:
    group = core.group
    planned = group.entry(event.call_id) if group is not None and group.admitted else None
    if planned is None or planned.ended is not None:
        return Step(core)  # stale or a second result: the first one wins
    done = judged_writes(event.done, planned.call, core.view)
    core, result_event = _settle(core, planned.call, done)
    result_events = (*done.notes, evolve(result_event, duration=event.duration))
    assert core.group is not None
    if core.group.complete:
        return _close_group(core, result_events)
    # Results are committed together when the group is complete (a small constant number
    # of commits per group); until then they wait in the values.
    return Step(evolve(core, pending=(*core.pending, *result_events)))


# --- a boundary ran ----------------------------------------------------------------------


def _on_boundary(core: Core, event: BoundaryDone, limits: Limits) -> Step:
    if core.pending:  # a quiet boundary's group results: committed with it
        event = replace(event, events=(*core.pending, *event.events))
    core = evolve(core, view=event.view, pending=(), awaits_first_boundary=False)
    if event.final and core.group is not None:
        core = _end_after_group(core)  # the boundary after a cut reply's group
    if event.final:
        if event.view.terminal and not core.final_request:
            return _final_request(core, event.events, limits)
        return _finish(core, _ended(core), event.events, limits)
    nxt = _next_request(evolve(core, group=None), limits)
    head = nxt.commands[0] if nxt.commands else None
    if isinstance(head, Persist):
        # What comes next commits first (the step limit ending the turn, steering
        # delivered): that commit carries the boundary's events too.
        return Step(nxt.core, (Persist((*event.events, *head.events)), *nxt.commands[1:]))
    # A boundary that changed nothing (no write, no move, no error) needs no commit of
    # its own: resumed from the group's results, it would run again and change nothing
    # again.
    first: tuple[Command, ...] = (Persist(event.events),) if event.events else ()
    return Step(nxt.core, (*first, *nxt.commands))


def _final_request(core: Core, events: tuple[ev.Event, ...], limits: Limits) -> Step:
    """The turn's last boundary entered a terminal phase: the model gets one last
    request there, with no tools, within the same user turn."""
    request_id = f"{core.session_id}:{core.turn}:final"
    continuation = _ok(core.continuation.begin_request(request_id, TurnId(core.turn), None))
    core = evolve(core, continuation=continuation, step=core.step + 1, attempt=0,
                  request_id=request_id, final_request=True, cut_off=False, recovered=0)
    return _ask(evolve(core, sent=core.history()), (Persist(events),), limits)


# --- provider failures -------------------------------------------------------------------


def _on_failed(core: Core, event: RequestFailed, limits: Limits) -> Step:
    if event.request_id != core.request_id or core.status != "running":
        return Step(core)
    failure = event.failure
    if failure.code == CONTEXT_LENGTH_EXCEEDED:
        return _recover_context(core, failure.message, limits)
    if failure.retryable and core.attempt < limits.max_retries:
        attempt = core.attempt + 1
        delay = failure.retry_after
        if delay is None:
            delay = min(limits.max_backoff, limits.backoff * (2 ** (attempt - 1)))
            delay *= 0.5 + event.jitter / 2
        delay = max(0.0, min(delay, limits.max_backoff))
        core = evolve(core, attempt=attempt)
        retrying = ev.Retrying(attempt=attempt, delay=delay, message=failure.message,
                               turn=core.turn)
        if core.sent is None:
            core = evolve(core, sent=core.history())
        return Step(core, (Persist((retrying,)), Sleep(delay), _call(core)))
    return _fail(core, "provider_error", failure.message)


def _fail(core: Core, code: str, message: str) -> Step:
    """The turn fails: its request closed (what it has kept), an error event naming
    why, the session ``failed``."""
    core = _close_request(core)
    execution = core.execution.fail(message) if core.execution.active else core.execution
    core = evolve(core, execution=execution, cut="", cut_reasoning="", cut_parts=0,
                  reply_retry="", reply_problem="", awaits_first_boundary=False)
    error = ev.ErrorEvent(code=code, message=message, turn=core.turn)
    finished = ev.TurnFinished(reply="", status="failed", turn=core.turn,
                               input_tokens=core.input_tokens,
                               output_tokens=core.output_tokens,
                               cached_input_tokens=core.cached_input_tokens)
    return Step(evolve(core, status="failed", request_id=None, folding=None),
                (Persist((error, finished)), TurnOver("failed")))


def _recover_context(core: Core, problem: str, limits: Limits) -> Step:
    """The provider refused the request as larger than the model's context: the history
    is compacted as ``max_history_tokens`` compaction does (to that budget, or to half
    the request's size when none is configured) and the same request sent again, once.
    Refused again, or with nothing left to fold, the turn fails naming the size and the
    budget."""
    sent = core.sent if core.sent is not None else core.history()
    core = evolve(core, sent=sent)
    chars = history_chars(visible(sent, core.compaction)) + (
        len(core.cut) if core.cut_parts else 0)
    size = max(1, round(chars * core.tokens_per_char))
    if core.recovered:
        return _fail(core, "context_length_exceeded", (
            f"the request is still larger than the model's context after its history was "
            f"compacted: about {size} tokens of history, for a budget of {core.recovered} "
            f"tokens ({problem})"))
    configured = limits.max_history_tokens
    budget = configured if configured is not None and configured < size else max(1, size // 2)
    upto = fold_point(sent, core.compaction, int(budget / 2 / core.tokens_per_char))
    if upto is None:
        return _fail(core, "context_length_exceeded", (
            f"the request is larger than the model's context and its history cannot be "
            f"compacted further (the current turn is never folded): about {size} tokens "
            f"of history, for a budget of {budget} tokens ({problem})"))
    if configured is not None:
        who = ""
    elif limits.compaction_provider:
        who = (" by the agent's compaction provider (no max_history_tokens is "
               "configured)")
    else:
        who = (" by the agent's own provider (no compaction is configured: "
               "max_history_tokens)")
    notice = ev.ErrorEvent(code="context_full", turn=core.turn, message=(
        f"the model's context is full ({problem}): the history (about {size} tokens) is "
        f"compacted to {budget} tokens{who} and the request sent again"))
    start = core.compaction.upto if core.compaction is not None else 0
    previous = core.compaction.summary if core.compaction is not None else ""
    folded = sent.after(start)[:upto - start]
    assert core.request_id is not None
    core = evolve(core, folding=upto, recovered=budget, attempt=0)
    return Step(core, (Persist((notice,)), Compact(f"{core.request_id}:compact", folded,
                                                   previous, max(64, budget // 4))))


# --- approvals ---------------------------------------------------------------------------


class ResolutionRefused(PhaseflowError):
    """A decision that does not match the pending approval (another call, other
    arguments, nothing pending): refused, fail closed."""


def check_resolution(core: Core, event: Resolve) -> str | None:
    """Why ``event`` cannot resolve the pending approval, or ``None``."""
    pending = core.execution.pending_approval
    if core.status != "awaiting_approval" or pending is None or core.group is None:
        return "no approval is pending"
    if event.call_id != pending.call_id:
        return f"the pending approval is for call {pending.call_id!r}, not {event.call_id!r}"
    if event.arguments_hash is not None and event.arguments_hash != arguments_hash(pending.call):
        return "the call's arguments are not the ones this decision was made for"
    return None


def _on_resolve(core: Core, event: Resolve, limits: Limits) -> Step:
    problem = check_resolution(core, event)
    if problem is not None:
        raise ResolutionRefused(problem)
    resolved: ApprovalResolved = _ok(core.execution.resolve_approval(event.call_id,
                                                                     event.decision))
    core = evolve(core, execution=resolved.execution, status="running")
    call = resolved.approval.call
    decided = ev.ApprovalResolvedEvent(call_id=call.id, name=call.name,
                                       decision=resolved.decision.value, reason=event.reason,
                                       turn=core.turn)
    events: list[ev.Event] = [decided]
    group = core.group
    assert group is not None
    if resolved.approved:
        entry = group.entry(call.id)
        assert entry is not None
        core = evolve(core, group=group.with_entry(evolve(entry, approved=True)))
    else:
        why = f": {event.reason}" if event.reason else ""
        core, settled = _settle(core, call, Done(ToolOutcome.error(
            f"The user rejected this call{why}"), "rejected"))
        events.append(settled)
    return _continue_group(core, tuple(events), limits)


# --- cancellation ------------------------------------------------------------------------


#: the result of a call whose sync tool still ran at its deadline after a cancel
GIVEN_UP_TEXT = ("Cancelled, and given up on: its thread was still running at its deadline, "
                 "so its outcome is unknown; do not assume it failed, and do not call it "
                 "again to retry.")


def _on_cancelling(core: Core, event: Cancelling, limits: Limits) -> Step:
    """A cancel that waits for sync tools' threads: the session is ``cancelling`` (and
    committed so) until :class:`Cancel` ends the turn."""
    if core.status != "running":
        return Step(core)
    core = evolve(core, status="cancelling")
    return Step(core, (Persist((ev.TurnCancelling(tools=event.tools, turn=core.turn),)),))


def _on_cancel(core: Core, event: Cancel, limits: Limits = DEFAULT_LIMITS) -> Step:
    if core.status not in ("running", "awaiting_approval", "cancelling"):
        return Step(core)
    given_up = set(event.given_up)
    events: list[ev.Event] = list(core.pending)
    core = evolve(core, pending=())
    for done in event.done:
        group = core.group
        planned = group.entry(done.call_id) if group is not None and group.admitted else None
        if planned is not None and planned.ended is None:
            judged = judged_writes(done.done, planned.call, core.view)
            core, settled = _settle(core, planned.call, judged)
            events.extend((*judged.notes, evolve(settled, duration=done.duration)))
    group = core.group
    if group is not None:
        c = core.continuation
        for p in group.calls:
            if p.ended is not None:
                continue
            effect = c.checkpoint.effect(p.call.id) if c.checkpoint is not None else None
            if p.call.id in given_up:
                done_ = Done(ToolOutcome.error(GIVEN_UP_TEXT), "unknown")
            elif effect is not None and effect.state.value == "admitted":
                done_ = Done(ToolOutcome.cancelled(
                    f"Cancelled while running: {OUTCOME_UNKNOWN_TEXT}"), "cancelled")
            else:
                done_ = Done(ToolOutcome.cancelled(), "cancelled")
            core, settled = _settle(core, p.call, done_)
            events.append(settled)
            c = core.continuation
    writes = core.group.writes() if core.group is not None else ()
    core = _close_request(core)
    core = evolve(core, execution=core.execution.abort(), status="idle", request_id=None,
                  folding=None, cut="", cut_reasoning="", cut_parts=0, reply_retry="",
                  reply_problem="", awaits_first_boundary=False)
    finished = ev.TurnFinished(reply="", status="cancelled", turn=core.turn,
                               input_tokens=core.input_tokens, output_tokens=core.output_tokens,
                               cached_input_tokens=core.cached_input_tokens)
    # the results that finished keep their writes; no boundary runs after them
    commands: list[Command] = [Persist((*events, finished), writes), TurnOver("cancelled")]
    queued = (*core.execution.steering, *core.execution.follow_up)
    if event.restart and queued:
        # An interrupt: what was queued (the interrupting message last) starts the next
        # turn now, as a finished turn's queue would.
        started = _ok(core.execution.begin_turn())
        core = evolve(core, execution=evolve(started, steering=(), follow_up=()))
        follow = _start_turn(core, joined_content(queued), limits)
        return Step(follow.core, (*commands, *follow.commands))
    return Step(core, tuple(commands))


# --- resuming an interrupted turn ----------------------------------------------------------

#: the result of a call that was admitted and may have run when its worker stopped
INTERRUPTED_TEXT = ("The session was interrupted while this call ran; its outcome is "
                    "unknown and it was not run again.")


def _on_resume(core: Core, event: Resume, limits: Limits) -> Step:
    """Finish what a stopped worker left, from the last commit (see docs/durability.md):

    - a tool group with calls still open: a call that was admitted (it may have run) gets
      "outcome unknown, not run again", unless its tool is idempotent, which runs again;
      a call never admitted never ran, and runs now;
    - a group whose results were all committed: its boundary runs (it never committed);
    - a model request in flight: it is sent again (the same history);
    - a final reply whose boundary never committed: that boundary runs.
    """
    # ``pending``: results committed in the values (with a queued message) whose events
    # wait for the group's commit; they go out with it, as they would have.
    core = evolve(core, view=event.view, sent=None)
    if core.status == "cancelling":
        # stopped while it waited for a cancelled turn's threads: what ran is not known
        group = core.group
        open_ids = tuple(p.call.id for p in group.calls if p.ended is None) if (
            group is not None and group.admitted) else ()
        return _on_cancel(core, Cancel(0.0, given_up=open_ids), limits)
    if core.status != "running":
        return Step(core)
    if core.awaits_first_boundary:
        # a timer's turn stopped before its first boundary: the timer's move first
        return Step(core, (RunBoundary((), None, final=False),))
    group = core.group
    if group is not None and group.admitted:
        c = core.continuation
        events: list[ev.Event] = []
        rerun: list[Planned] = []
        pending: list[Planned] = []
        for p in group.calls:
            if p.ended is not None:
                continue
            effect = c.checkpoint.effect(p.call.id) if c.checkpoint is not None else None
            if effect is not None and effect.state.value == "admitted":
                if p.call.name in event.idempotent:
                    rerun.append(p)
                else:
                    core, settled = _settle(core, p.call, Done(
                        ToolOutcome.error(INTERRUPTED_TEXT), "unknown"))
                    events.append(settled)
            else:
                pending.append(p)
        if pending:
            request = core.continuation.request
            assert request is not None
            c = core.continuation
            for p in pending:
                c = _ok(c.admit_call(request.id, group.checkpoint_id, p.call))
            core = evolve(core, continuation=c)
        runnable = tuple(rerun + pending)
        if runnable:
            return Step(core, (Persist(tuple(events)), RunTools(runnable,
                                                                not limits.parallel_tools)))
        return _close_group(core, tuple(events))
    if group is not None:  # checkpointed, nothing admitted yet (an approval was granted)
        return _continue_group(core, (), limits)
    if core.request_id is not None:
        return _ask(evolve(core, sent=core.history(), attempt=0), (), limits)
    if core.continuation.request is None:
        return Step(core, (RunBoundary((), None, final=True),))
    return _next_request(core, limits)


# --- double texting: an interrupt ----------------------------------------------------------


def _on_interrupt(core: Core, event: Interrupt, limits: Limits) -> Step:
    """Cancel what runs or waits (every call gets its result, as ``cancel()`` gives
    them), then start the next turn with what was queued and this message. Only for a
    turn that no runner is executing now (one waiting for a human, or left by a worker
    that was taken over): a runner that executes the turn is stopped first and sends a
    ``Cancel(restart=True)`` instead."""
    if core.status not in ("running", "awaiting_approval"):
        return _on_send(core, Send(event.content, event.view), limits)
    admitted = core.execution.admit_prompt(PromptKind.FOLLOW_UP, event.content)
    core = evolve(core, execution=admitted.execution, view=event.view)
    return _on_cancel(core, Cancel(event.now, restart=True), limits)


#: each input's handler, by its exact class (inputs are final dataclasses)
_HANDLERS: dict[type, Callable[[Core, Any, Limits], Step]] = {
    Send: _on_send,
    Replied: _on_reply,
    RequestFailed: _on_failed,
    ToolDone: _on_tool_done,
    BoundaryDone: _on_boundary,
    Resolve: _on_resolve,
    Cancel: _on_cancel,
    Cancelling: _on_cancelling,
    Resume: _on_resume,
    Interrupt: _on_interrupt,
    SetMode: _between_turns(on_mode),
    Compacted: _between_turns(_on_compacted),
    CompactNow: _between_turns(on_compact_now),
    LimitEdits: _between_turns(on_limit_edits),
    ChangeTrust: _between_turns(on_change_trust),
}
