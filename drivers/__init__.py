"""What drives runs: the pump, the Runtime, tokens, clocks, adapters and views of sessions.

The only layer that knows about awaitables: the engine below yields `Await` signals and the
pump here decides whether a run stays sync or becomes a coroutine.
"""

from typing import TYPE_CHECKING

from .adapters import NOT_READY, ResumeRequest
from .clock import Clock, ManualClock, SystemClock
from .outcome import Outcome, PauseInfo
from .runtime import Runtime
from .views import SessionSummary, SessionView

if TYPE_CHECKING:
    from .jsonable import export_events
    from .stats import NodeStats, Stats

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


#: Names loaded when first read (PEP 562), not with `import tarry`: the JSON form (and `json`),
#: and the stats records, which only `Runtime.stats` builds.
_LAZY = {
    "export_events": "tarry.drivers.jsonable",
    "NodeStats": "tarry.drivers.stats",
    "Stats": "tarry.drivers.stats",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later reads find it without calling here again
        return value
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
