"""What drives runs: the pump, the Runtime, tokens, clocks, adapters and views of sessions.

The only layer that knows about awaitables: the engine below yields `Await` signals and the
pump here decides whether a run stays sync or becomes a coroutine.
"""

from .adapters import NOT_READY, ResumeRequest
from .clock import Clock, ManualClock, SystemClock
from .jsonable import export_events
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
