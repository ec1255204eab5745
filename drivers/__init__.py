"""What drives runs: the pump, the Runtime, tokens, clocks, adapters and views of sessions.

The only layer that knows about awaitables: the engine below yields `Await` signals and the
pump here decides whether a run stays sync or becomes a coroutine.
"""

TYPE_CHECKING = False  # not typing's: `import tarry.drivers.X` must not import typing
if TYPE_CHECKING:
    from tarry.drivers.adapters import NOT_READY, ResumeRequest
    from tarry.drivers.clock import Clock, ManualClock, SystemClock
    from tarry.drivers.drive.outcome import Outcome, PauseInfo
    from tarry.drivers.reading.jsonable import export_events
    from tarry.drivers.reading.stats import NodeStats, Stats
    from tarry.drivers.reading.views import SessionSummary, SessionView
    from tarry.drivers.rounds.delivering import Delivery
    from tarry.drivers.runtime import Runtime
    from tarry.snapshots.mail import MailInfo

__all__ = [
    "NOT_READY",
    "Clock",
    "Delivery",
    "MailInfo",
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


#: Every name is loaded when first read (PEP 562), not with the package: importing any
#: `tarry.drivers.X` runs this file first, and should not pay for the Runtime, the views, the
#: adapters and their records when it needs none of them. Some are rarer still: the JSON form
#: (and `json`), the stats records, which only `Runtime.stats` builds, and the records of
#: delivery and the mailbox, which only `deliver_many` and `mailbox` build.
_LAZY = {
    "NOT_READY": "tarry.drivers.adapters",
    "ResumeRequest": "tarry.drivers.adapters",
    "Clock": "tarry.drivers.clock",
    "ManualClock": "tarry.drivers.clock",
    "SystemClock": "tarry.drivers.clock",
    "Outcome": "tarry.drivers.drive.outcome",
    "PauseInfo": "tarry.drivers.drive.outcome",
    "SessionSummary": "tarry.drivers.reading.views",
    "SessionView": "tarry.drivers.reading.views",
    "Runtime": "tarry.drivers.runtime",
    "Delivery": "tarry.drivers.rounds.delivering",
    "MailInfo": "tarry.snapshots.mail",
    "export_events": "tarry.drivers.reading.jsonable",
    "NodeStats": "tarry.drivers.reading.stats",
    "Stats": "tarry.drivers.reading.stats",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later reads find it without calling here again
        return value
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
