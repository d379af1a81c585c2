"""``phaseflow`` as the tests start it, in one place: its command line (``python -m
phaseflow.cli.main``, so the checkout under test runs, not a script on ``PATH``), the
environment a child process gets, and ``phaseflow ARGS`` run to the end with its output
as text -- what the ``phaseflow_cli`` fixture hands a test. The type a test annotates the
fixture with is kept here, not in ``conftest.py``, since test modules import it and a test
module never imports a conftest."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]

#: the repository's root: the checkout a child process imports phaseflow from
ROOT = Path(__file__).resolve().parents[2]

#: the command line that starts ``phaseflow``; a test adds the subcommand and its arguments
PHASEFLOW = (sys.executable, "-m", "phaseflow.cli.main")

#: variables a child never inherits from the shell that runs the tests, since each changes
#: what ``phaseflow`` does: a model's key, ``serve``'s tokens, tracing, colour switches. A
#: test that wants one passes it to :func:`cli_env`.
_NOT_INHERITED = ("OPENAI_", "PHASEFLOW_TOKENS", "OTEL_", "FORCE_COLOR", "NO_COLOR",
                  "ANTHROPIC_", "GEMINI_", "GOOGLE_API_KEY")


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``phaseflow`` child process: this one's without the variables
    that would change its behaviour from outside the test, with the repository first on
    ``PYTHONPATH`` (a child started in a temporary folder imports this checkout), plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.update(extra)
    return env


def run_phaseflow(
    *args: str | bytes, cwd: Path | str | None = None, timeout: float = 60,
    input: str | None = None, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``phaseflow ARGS`` as a user would run it, to the end; output as text (``bytes``: an
    argument as the shell passes it, not necessarily UTF-8). Without ``input`` its stdin
    is empty (never the terminal of the test run); without ``env`` it inherits this
    process's environment."""
    return subprocess.run(
        [*PHASEFLOW, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        env=env,
        check=False,
    )
