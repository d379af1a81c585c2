"""What the template test files share: the refund-desk example to put a template into,
the pattern of a printed address, and rendering against a context."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phaseflow.template import RenderOutcome, compile_template

SPEC_EXAMPLE = (Path(__file__).parents[1] / "spec" / "data" / "refund_desk.yaml").read_text()
ORIGINAL_INSTRUCTIONS = "instructions: Ask for the email address on the account. Be brief."
#: a Python repr's memory address, which must never reach the model
ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


def render_in(source: str, context: Mapping[str, Any]) -> RenderOutcome:
    """Compile ``source`` (code generation included) and render it against ``context``."""
    template = compile_template(source)
    template.compile()
    return template.render_checked(context)
