"""Which observer an agent gets: the no-op one unless tracing was asked for.

Tracing is asked for by an ``Agent``'s ``tracer_provider`` / ``meter_provider``, or for
every agent of a process by :func:`install` (what ``phaseflow run`` and ``phaseflow
sessions recover`` do when the ``OTEL_*`` variables switch tracing on, once they have set
up OpenTelemetry's SDK). Only then is :mod:`phaseflow.observe.otel` imported, and with it
the OpenTelemetry API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phaseflow.errors import ConfigError, install_hint
from phaseflow.observe.observer import NOOP, Observer

if TYPE_CHECKING:
    from phaseflow.stores.base import Store

#: set by :func:`install` (the CLI, when the ``OTEL_*`` variables switch tracing on):
#: every agent built afterwards without providers of its own uses the global ones
_installed = False


def install() -> None:
    """Make every agent built from now on traced through OpenTelemetry's global tracer
    and meter providers (what ``phaseflow run`` does once it has set them up)."""
    global _installed
    _installed = True


def uninstall() -> None:
    """Undo :func:`install` (a host or test that set it up and is done)."""
    global _installed
    _installed = False


def observer_for(workflow: str, store: Store, tracer_provider: Any = None,
                 meter_provider: Any = None) -> Observer:
    """The observer of an agent of ``workflow`` keeping its sessions in ``store``:
    :data:`NOOP` unless providers are given or :func:`install` was called."""
    if tracer_provider is None and meter_provider is None and not _installed:
        return NOOP
    try:
        from phaseflow.observe.otel import OtelObserver
    except ImportError as exc:
        raise ConfigError(f"tracing needs the OpenTelemetry API: {install_hint('otel')} "
                          f"({exc})") from None
    return OtelObserver(workflow, store, tracer_provider, meter_provider)
