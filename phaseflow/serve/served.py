"""A workflow this server serves, and the pool of agents its requests borrow: on its
own, below the hub and the kept sessions that both name it."""

from __future__ import annotations

from collections.abc import Callable

from phaseflow.session.agent import Agent


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
