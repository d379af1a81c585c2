"""Where each part of a compiled workflow was written: the YAML nodes beside the model.

The compiled model carries a :class:`~phaseflow.spec.model.Position` per value, which is
enough for a host. The checks need more: the node of each name in a list (PF401 points at
``ordr_id`` in ``requires: [ordr_id]``), of a transition's mapping (PF207), of the
``transitions`` key (PF204). The compiler records those here while it builds the model,
and each check reads the model and this map, so no check has to walk the YAML again.
"""

from __future__ import annotations

from collections.abc import Mapping as MappingABC
from dataclasses import dataclass

from phaseflow.expr import Guard
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.model import Transition
from phaseflow.spec.scalar_positions import SourceText
from phaseflow.spec.yamlnodes import Mapping, Node, Scalar
from phaseflow.template import Template

#: A name written in a list, with the node it was written at.
Named = tuple[str, Node]


class PhaseNodes:
    """The nodes of one built phase, filled in by the compiler as it builds it.

    A plain class whose fields default to shared empty tuples at class level: a phase uses
    few of them (a goal and its transitions, most often), and one is made per phase of the
    file, so making it sets one attribute instead of building fifteen lists (a large file
    has tens of thousands of phases). The compiler assigns a field (a list) only when it
    has something to put there; readers only iterate the fields.
    """

    key: Scalar
    #: each built transition, with its mapping and the node of its ``to``
    transitions: list[tuple[Transition, Mapping, Node | None]] | tuple[()] = ()
    transitions_key: Scalar | None = None
    #: indices (into ``transitions``) of transitions with a broken ``when`` or an invalid
    #: ``trigger``: already an error, so PF206/PF207 leave them out
    unchecked_transitions: set[int] | frozenset[int] = frozenset()
    tools: list[Named] | tuple[()] = ()
    requires: list[Named] | tuple[()] = ()
    needs: list[Named] | tuple[()] = ()
    collect: list[Named] | tuple[()] = ()
    clear: list[Named] | tuple[()] = ()
    unset: list[Named] | tuple[()] = ()
    #: the keys ``set`` effects of this phase set (effects and preparations)
    sets: list[str] | tuple[()] = ()
    #: each key a ``set`` effect writes, with the node of the value it writes (PF305)
    set_values: list[tuple[str, Node]] | tuple[()] = ()
    produces: list[Named] | tuple[()] = ()
    #: the keys the ``call`` effects of ``on_enter``/``on_exit`` declare they produce
    call_produces: list[Named] | tuple[()] = ()
    calls: list[Named] | tuple[()] = ()
    guards: list[tuple[Guard, Node]] | tuple[()] = ()
    templates: list[tuple[Template, Node]] | tuple[()] = ()

    def __init__(self, key: Scalar) -> None:
        self.key = key


@dataclass(frozen=True)
class SourceMap:
    """The nodes of a whole workflow, and what the schema pass found broken."""

    path: str
    phases: MappingABC[str, PhaseNodes]
    #: ``initial`` when it is a string, and its node (either may be ``None``)
    initial: str | None = None
    initial_node: Node | None = None
    #: the file has a ``state`` mapping (possibly empty): the reference checks are on
    state_declared: bool = False
    navigation_templates: tuple[tuple[Template, Node], ...] = ()
    #: phases the schema found errors inside: their transitions and ``terminal`` may be
    #: wrong, so graph warnings that depend on them would only add noise
    broken_phases: frozenset[str] = frozenset()
    #: the file's text, to place a diagnostic inside a guard or a template
    source_text: SourceText | None = None

    def diagnostic(self, node: Node, code: str, message: str) -> Diagnostic:
        """A diagnostic about ``node`` of this file."""
        return Diagnostic(self.path, node.line, node.column, code, message)

    def diagnostic_in(self, node: Node, offset: int | None, code: str, message: str) -> Diagnostic:
        """A diagnostic about character ``offset`` of the value of ``node`` (a name inside
        a guard or a template); about ``node`` itself when the offset is not known."""
        if offset is None or self.source_text is None or not isinstance(node, Scalar):
            return self.diagnostic(node, code, message)
        line, column = self.source_text.value_position(node, offset)
        return Diagnostic(self.path, line, column, code, message)
