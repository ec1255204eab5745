"""What drives runs: the pump, the Runtime, tokens, clocks, adapters and views of sessions.

The only layer that knows about awaitables: the engine below yields `Await` signals and the
pump here decides whether a run stays sync or becomes a coroutine.
"""

from .adapters import NOT_READY, ResumeRequest
from .clock import Clock, ManualClock, SystemClock
from .outcome import Outcome, PauseInfo
from .runtime import Runtime
from .stats import NodeStats, Stats
from .views import SessionSummary, SessionView

__all__ = [
    "NOT_READY",
    "Clock",
    "ManualClock",
    "NodeStats",
    "Outcome",
    "PauseInfo",
    "ResumeRequest",
    "Runtime",
    "SessionSummary",
    "SessionView",
    "Stats",
    "SystemClock",
    "export_events",
]


def __getattr__(name: str) -> object:
    # The JSON form (and `json`) loads when first used, not with `import tarry`.
    if name == "export_events":
        from .jsonable import export_events

        return export_events
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
