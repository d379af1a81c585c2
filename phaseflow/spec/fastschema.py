"""A fast yes/no check of the workflow schema, so a valid file never imports jsonschema.

``jsonschema`` costs ~60 ms to import, a third of ``phaseflow validate``'s run time on a
typical file in a pre-commit hook. Most files checked on a commit are valid, and for those
a yes is all we need. So the schema file is compiled by
:mod:`phaseflow.spec.jsonschema_check`, once; when the answer is no, the caller runs
jsonschema to explain every error (that path is unchanged and still the only source of
schema diagnostics).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from phaseflow.spec.jsonschema_check import compile_check


def compile_schema(schema: dict[str, Any]) -> Callable[[Any], bool | None] | None:
    """A checker for ``schema`` (with ``$ref``s already inlined): ``True`` valid, ``False``
    invalid, ``None`` undecided. ``None`` instead of a checker when the schema uses a
    keyword the compiler does not implement."""
    holds = compile_check(schema)
    if holds is None:
        return None
    fast = holds

    def check(instance: Any) -> bool | None:
        try:
            return fast(instance)
        except RecursionError:
            return None

    return check
