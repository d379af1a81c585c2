"""Read, check and compile workflow files: the one entry point for CLI and hosts.

``check_text``/``check_file`` return every diagnostic and never raise, whatever the
input; ``compile_file``/``compile_text`` raise :class:`~phaseflow.errors.WorkflowError`
when there are errors and otherwise return the compiled workflow with its warnings.
A host calls :func:`phaseflow.load_workflow`, which compiles with these and gives the
workflow the machine it makes (this layer knows no machine).
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from phaseflow.errors import WorkflowError
from phaseflow.spec.diagnostics import Diagnostic
from phaseflow.spec.files import MAX_FILE_BYTES as MAX_FILE_BYTES
from phaseflow.spec.files import decode_text as decode_text
from phaseflow.spec.files import read_text as read_text
from phaseflow.spec.model import MachineFactory, Workflow
from phaseflow.spec.results import CheckResult as CheckResult

if TYPE_CHECKING:
    from phaseflow.spec.compiler import ImportResolver



def _result(path: str, diags: list[Diagnostic], workflow: Workflow | None) -> CheckResult:
    return CheckResult(path, tuple(sorted(diags, key=Diagnostic.sort_key)), workflow)


def check_text(
    text: str,
    path: str = "<string>",
    registry: Mapping[str, Any] | None = None,
    *,
    imports: ImportResolver | None = None,
) -> CheckResult:
    """Check YAML text; never raises for anything in the text. ``imports`` reads the
    shared files the text imports (:mod:`phaseflow.spec.tree`); without it they are read
    from the disk, relative to ``path`` when it names a file (text of no file imports
    nothing)."""
    # Checking builds a large tree of small objects and frees none of them before the end,
    # so the cycle collector would only walk them again and again (~8% of the time on
    # 60,000 phases): it is paused meanwhile, and resumed if it was running.
    running = gc.isenabled()
    gc.disable()
    try:
        return _check_text(text, path, registry, imports)
    finally:
        if running:
            _promote()
            gc.enable()


def _promote() -> None:
    """Move every object the collector tracks to its oldest generation, in one step.

    What checking built and keeps (the workflow: a few objects per phase) was made while
    the collector was paused, so it all sits in the youngest generation: the next young
    collection would walk all of it once only to find it alive (~0.1 s on 60,000 phases,
    a process that loads a workflow and then imports or allocates anything). Freezing
    then unfreezing promotes it (and anything else still young) without a walk; the full
    collections find it where they find every long-lived object. Done only when nothing
    is frozen: a host that froze its objects (before forking) keeps them frozen.
    """
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def _check_text(
    text: str, path: str, registry: Mapping[str, Any] | None, imports: ImportResolver | None
) -> CheckResult:
    from phaseflow.spec.compiler import Compiler
    from phaseflow.spec.schema import schema_diagnostics
    from phaseflow.spec.yamlnodes import Mapping as MappingNode
    from phaseflow.spec.yamlnodes import YamlProblem, compose

    try:
        document = compose(text)
    except YamlProblem as problem:
        return _result(
            path,
            [Diagnostic(path, problem.line, problem.column, problem.code, problem.message)],
            None,
        )
    except (RecursionError, MemoryError):
        return _result(
            path, [Diagnostic(path, 1, 1, "PF002", "the file is too complex to read")], None
        )
    diags = [Diagnostic(path, p.line, p.column, p.code, p.message) for p in document.problems]
    root = document.root
    if root is None or (hasattr(root, "value") and getattr(root, "value", 0) is None):
        diags.append(
            Diagnostic(
                path, 1, 1, "PF004", "the file is empty: a workflow starts with 'phaseflow: 1'"
            )
        )
        return _result(path, diags, None)
    if not isinstance(root, MappingNode):
        diags.append(
            Diagnostic(
                path,
                root.line,
                root.column,
                "PF103",
                "a workflow file is a mapping at the top level "
                "(phaseflow: 1, name: ..., phases: ...)",
            )
        )
        return _result(path, diags, None)
    broken: set[str] = set()
    diags.extend(schema_diagnostics(document.data, root, path, broken, text))
    if imports is None and os.path.isfile(path):  # text without a file has no folder
        from phaseflow.spec.shared import SharedFiles

        imports = SharedFiles().imports
    compiler = Compiler(path, text, root, broken, imports)
    workflow = compiler.run(registry.keys() if registry is not None else None)
    diags.extend(compiler.diags)
    diags = list({(d.line, d.column, d.code, d.message): d for d in diags}.values())
    if workflow is not None and any(d.severity == "error" for d in diags):
        workflow = None
    if workflow is not None:
        warnings = tuple(sorted(diags, key=Diagnostic.sort_key))
        workflow = dataclasses.replace(workflow, warnings=warnings, registry=dict(registry or {}))
    return _result(path, diags, workflow)


def check_file(path: str, registry: Mapping[str, Any] | None = None) -> CheckResult:
    """Check one file on disk; never raises."""
    text = read_text(path)
    if isinstance(text, Diagnostic):
        return _result(path, [text], None)
    return check_text(text, path, registry)


def compile_file(
    path: str | os.PathLike[str],
    registry: Mapping[str, Callable[..., Any]] | None = None,
    *,
    machine_factory: MachineFactory | None = None,
) -> Workflow:
    """Load and compile the workflow file at ``path``.

    Runs every check of ``phaseflow validate``; with a ``registry``, a ``call`` naming no
    registered callable is an error too. Raises :class:`WorkflowError` (carrying every
    diagnostic) when any error is found, a file that cannot be read included (PF001);
    warnings are on ``workflow.warnings``. ``path`` is always a path: YAML text goes to
    :func:`compile_text`, so a mistyped path is reported as not found, never parsed
    as YAML.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"a workflow is loaded from a path (str or os.PathLike), not "
                        f"{type(path).__name__}")
    from phaseflow.spec.tree import load_tree

    result, _ = load_tree(os.fspath(path), check_text, registry)
    return _compiled(result, machine_factory)


def compile_text(
    text: str,
    registry: Mapping[str, Callable[..., Any]] | None = None,
    *,
    path: str = "<string>",
    machine_factory: MachineFactory | None = None,
) -> Workflow:
    """Load and compile a workflow from YAML ``text``, as :func:`compile_file` does for a
    file; ``path`` is the name diagnostics give the text."""
    if not isinstance(text, str):
        raise TypeError(f"a workflow text is YAML in a str, not {type(text).__name__}")
    return _compiled(check_text(text, path, registry), machine_factory)


def _compiled(result: CheckResult, machine_factory: MachineFactory | None) -> Workflow:
    if result.workflow is None:
        raise WorkflowError(result.diagnostics)
    workflow = result.workflow
    if machine_factory is not None:
        workflow = dataclasses.replace(workflow, machine_factory=machine_factory)
    # Generate every template's code now, so that no turn ever pays for it.
    templates = [p.instructions for p in workflow.phases.values()]
    templates.append(workflow.navigation.template)
    for template in templates:
        if template is not None:
            template.compile()
    return workflow
