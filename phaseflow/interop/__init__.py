"""Adapters between phaseflow workflows and other state-machine libraries.

* :mod:`phaseflow.interop.transitions`: build a pytransitions ``Machine`` from a compiled
  workflow (optional dependency: ``pip install '.[transitions]'``).

Importing this package never imports the optional libraries; building a machine does.
"""

# the adapter's public names, listed once (in the adapter's own ``__all__``)
from phaseflow.interop.transitions import *  # noqa: F403
from phaseflow.interop.transitions import __all__ as __all__
