"""How a runner is configured: an agent's settings its sessions share (``RunnerConfig``),
the host's approval policy, and the two derived from the workflow and the providers -
the widest transcript a ``call`` effect receives and a history as one provider sends it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from phaseflow.observe.observer import NOOP, Observer
from phaseflow.providers.protocol import Provider
from phaseflow.session.compaction import DEFAULT_PROMPT
from phaseflow.session.values import Limits
from phaseflow.session.view import ViewCache
from phaseflow.spec.model import DEFAULT_ROLE, CallEffect, Workflow, tree_phases
from phaseflow.stores.base import Store
from phaseflow.tools.function import FunctionTool, ToolContext
from phaseflow.turn.messages import AssistantMessage, Message, ToolCall

#: who decides whether a call needs a human: ``approve(call, ctx) -> bool``
ApprovalPolicy = Callable[[ToolCall, ToolContext], bool]


def transcript_window(workflow: Workflow) -> int:
    """The widest ``transcript: N`` of the ``call`` effects and preparations of the
    workflow and every workflow it uses (each without one: the default); 0 when none
    has a call."""
    widest = 0
    for phase in tree_phases(workflow):
        effects = (*phase.on_enter, *phase.on_exit, *(p.effect for p in phase.prepare))
        for effect in effects:
            if isinstance(effect, CallEffect):
                widest = max(widest, effect.transcript_window)
    return widest


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    """An agent's settings, shared by its sessions."""

    workflow: Workflow
    workflow_hash: str
    provider: Provider
    tools: Mapping[str, FunctionTool]
    store: Store
    system: str = ""
    model: str = ""
    limits: Limits = field(default_factory=Limits)
    approve: ApprovalPolicy | None = None
    #: lines of a tool's output the model is shown; the rest is kept by the store
    output_lines: int = 200
    #: characters of a tool's output the model is shown (after the line limit)
    output_chars: int = 20_000
    #: the most bytes of one tool output kept for ``read_output`` (capture_byte_limit)
    capture_bytes: int = 10 * 2**20
    #: the most bytes of tool output one session keeps (session_disk_quota)
    session_capture_bytes: int = 100 * 2**20
    max_concurrency: int = 8
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)
    #: seconds a worker's lease on a session lasts (renewed while a turn runs)
    lease: float = 30.0
    #: this worker's name in leases
    worker: str = ""
    #: the most tokens a model reply may have, sent with every request (None: no limit)
    max_output_tokens: int | None = None
    #: what each phase offers, worked out once per phase (see ViewCache)
    views: ViewCache = field(default_factory=ViewCache)
    #: the most messages a ``call`` effect or preparation of the workflow receives
    #: (``transcript: N``; 0: none has a call, and no transcript is built)
    transcript_window: int = 0
    #: who summarizes a compacted history (None: ``provider``), and what it is told
    compaction_provider: Provider | None = None
    compaction_prompt: str = DEFAULT_PROMPT
    #: who watches the turns (traces and metrics; see phaseflow.observe)
    observer: Observer = NOOP
    #: where the phase's instructions and the navigation block go: ``end`` (after the
    #: history, ``ProviderRequest.context``) or ``system`` (in the system text)
    context_position: Literal["end", "system"] = "end"
    #: the tools each request offers: the ``phase``'s, or every tool of the ``workflow``
    #: in one stable order (the phase's view still decides what may run)
    offer_tools: Literal["phase", "workflow"] = "phase"
    #: the providers by model role (``default`` is ``provider``): a phase's requests go
    #: to its role's (``Workflow.role_of``); empty: ``provider`` for every phase
    providers: Mapping[str, Provider] = field(default_factory=dict)

    def role_provider(self, role: str) -> Provider:
        """The provider of ``role`` (``provider`` for ``default`` or an unmapped role)."""
        return self.providers.get(role, self.provider)

    def model_of(self, provider: Provider) -> str:
        """The model name a request to ``provider`` carries: the agent's ``model`` for its
        default provider, otherwise the provider's own ``model``."""
        if provider is self.provider:
            return self.model
        return getattr(provider, "model", "") or self.model


def for_provider(history: Sequence[Message], provider: Provider, config: RunnerConfig
                 ) -> Sequence[Message]:
    """``history`` as a request to ``provider`` sends it: an assistant message whose
    carried parts were made by another provider object (another model role's) loses them,
    its text and calls kept. The history itself when nothing is dropped (no copy: an agent
    with one provider, or a conversation that stayed on one role)."""
    if not config.providers or len(set(map(id, config.providers.values()))) == 1:
        return history

    def foreign(message: Message) -> bool:
        if not isinstance(message, AssistantMessage) or message.carried is None:
            return False
        return config.providers.get(message.carried.role or DEFAULT_ROLE) is not provider

    if not any(foreign(m) for m in history):
        return history
    return tuple(replace(m, carried=None) if isinstance(m, AssistantMessage) and foreign(m)
                 else m for m in history)
