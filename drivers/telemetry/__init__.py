"""What a Runtime tells the outside about its work: OpenTelemetry traces (otel.py, the
`tarry[otel]` extra) and Prometheus metrics (prometheus.py, the `tarry[prometheus]` extra).

Nothing here is imported by `import tarry`: a Runtime without tracing loads none of it, and a
drive pays nothing for it (no subscriber, no check per step)."""

from __future__ import annotations

import os
from typing import Any

from tarry.engine.errors import InvalidArgument

#: The environment variable that turns tracing on for Runtimes built with `tracing=None` (the
#: default): the CLI's workers and servers are traced without a flag of their own.
TRACING_ENV = "TARRY_TRACING"
_ON = ("1", "true", "yes", "on")


def tracing_of(core: Any, tracing: Any) -> Any:
    """The `Tracing` of a Runtime built with `tracing=` (`None`: as `TARRY_TRACING` says;
    `False`: off; `True`: on, with OpenTelemetry's global tracer provider; a tracer provider:
    on, with that one), subscribed to the Runtime's events; or None when it is off."""
    if tracing is None:
        tracing = os.environ.get(TRACING_ENV, "").strip().lower() in _ON
    if tracing is False:
        return None
    try:
        from tarry.drivers.telemetry.otel import Tracing
    except ImportError as exc:
        msg = (
            "tracing needs OpenTelemetry's API: pip install 'tarry[otel]' "
            f"(and an SDK to export the spans) ({exc})"
        )
        raise InvalidArgument(msg) from None
    found = Tracing(core.store, None if tracing is True else tracing)
    core.hub.subscribe(found.on_event)
    return found
