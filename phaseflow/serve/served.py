"""A workflow this server serves, and the pool of agents its requests borrow: on its
own, below the hub and the kept sessions that both name it."""

from __future__ import annotations

from collections.abc import Callable

from phaseflow.session.agent import Agent
from phaseflow.session.agent_setup import workflow_hash


class Served:
    """A workflow this server serves: ``agent`` says what it is (its workflow, tools,
    store, clock); ``make(busy)`` builds another agent of it with a new worker id, for
    the pool of agents lent to the tasks (``busy`` is ``queue`` or ``reject``)."""

    def __init__(self, name: str, agent: Agent, make: Callable[[str], Agent],
                 content_hash: str) -> None:
        self.name = name
        self.agent = agent
        self.content_hash = content_hash
        self._make = make
        self._idle: dict[str, list[Agent]] = {"queue": [], "reject": []}

    def take(self, busy: str) -> Agent:
        idle = self._idle[busy]
        return idle.pop() if idle else self._make(busy)

    def give(self, agent: Agent) -> None:
        self._idle[agent.busy].append(agent)


def serving(*factories: Callable[..., Agent]) -> dict[str, Served]:
    """What ``ServeConfig(served=...)`` takes, for a host that builds the server itself:
    one workflow per factory, which makes an agent when called with the keyword
    arguments ``busy`` and ``worker`` (``functools.partial(Agent, workflow, provider,
    tools=..., store=...)`` is one): each task's agent gets a worker id of its own."""
    from phaseflow.session.workers import new_worker_id

    served: dict[str, Served] = {}
    for factory in factories:
        def make(busy: str, factory: Callable[..., Agent] = factory) -> Agent:
            return factory(busy=busy, worker=new_worker_id())

        agent = make("queue")
        name = agent.workflow.name
        served[name] = Served(name, agent, make, workflow_hash(agent.workflow))
    return served
