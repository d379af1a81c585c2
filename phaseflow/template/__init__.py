"""Templates: the Jinja2 text of instructions and of the navigation block.

A template is checked once, when its workflow loads (:func:`compile_template`: PF302 for
a syntax error or an unknown name, PF304 for what the sandbox is certain to refuse), and
rendered by the machine in a bounded immutable sandbox; a failing render is a value
(:class:`RenderOutcome`), never an exception raised into a turn.

The modules, top-down:

* :mod:`~phaseflow.template.compiler`: :func:`compile_template`, :class:`Template` and
  its render, the static checks of names, filters and tests;
* :mod:`~phaseflow.template.static`: what the sandbox would refuse, found at load;
* :mod:`~phaseflow.template.sandbox`: Jinja2's immutable sandbox, bounded (no constant
  folding, a budget per render, only what an author needs);
* :mod:`~phaseflow.template.limits`: the limits and the one budget that enforces them.

This layer imports only :mod:`phaseflow.errors` and :mod:`phaseflow.expr`; the workflow
compiler (``spec``) and the machine import it.
"""

from phaseflow.template.compiler import (
    FALLBACK_TEXT,
    INSTRUCTION_NAMES,
    NAVIGATION_NAMES,
    RenderOutcome,
    Template,
    TemplateCode,
    TemplateCompileError,
    TemplateOrigin,
    compile_template,
    environment,
)

__all__ = [
    "FALLBACK_TEXT",
    "INSTRUCTION_NAMES",
    "NAVIGATION_NAMES",
    "RenderOutcome",
    "Template",
    "TemplateCode",
    "TemplateCompileError",
    "TemplateOrigin",
    "compile_template",
    "environment",
]
