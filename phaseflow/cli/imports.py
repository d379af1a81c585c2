"""``MODULE:ATTR`` options (``--tools``, ``--hooks``): the one way the commands import a
host's objects, with the current folder on the path (as ``python -m`` has it)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from phaseflow.errors import ConfigError


def import_attr(spec: str, option: str) -> Any:
    """The object ``spec`` names; :class:`ConfigError` saying what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{option} takes MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(f"{option} {spec}: cannot import {module_name}: "
                          f"{type(exc).__name__}: {exc}") from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"{option} {spec}: {module_name} has no attribute {attr!r}")
        value = getattr(value, part)
    return value
