"""tarry: workflows that wait — for a person, a batch job or a timer — without holding a process.

This package only re-exports. The layers below it, each importing only downwards:
`tarry.drivers` (what drives runs: the pump, Runtime, tokens, clocks) -> `tarry.engine` (what
runs: steps, containers, events, the state and its reducer) and `tarry.snapshots` (how it is
saved: the codec and the stores).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tarry.drivers import (
    NOT_READY,
    ManualClock,
    Outcome,
    PauseInfo,
    ResumeRequest,
    Runtime,
    SessionSummary,
    SessionView,
)
from tarry.engine import (
    AsyncInSyncContext,
    Branch,
    Child,
    ContainerFrame,
    Context,
    ErrorInfo,
    Event,
    Flow,
    FlowMismatch,
    ForEach,
    Gate,
    Graph,
    InvalidFlow,
    InvalidResumeValue,
    Loop,
    NotSerializable,
    Parallel,
    Route,
    SessionExists,
    SessionNotResumable,
    SessionState,
    Sleep,
    SnapshotError,
    TarryError,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownRoute,
    UnknownSession,
    UnknownToken,
    Wait,
)
from tarry.engine.elements.batch_request import BatchRequest
from tarry.engine.elements.step import step
from tarry.engine.errors import (
    BatchItemFailed,
    ChildFailed,
    ConcurrentUpdate,
    InvalidArgument,
    InvalidBatchRequest,
    PayloadTooLarge,
    SecretRequired,
    SnapshotTooLarge,
)
from tarry.engine.retry import Retry
from tarry.snapshots.log_records import LogRecord

if TYPE_CHECKING:
    from tarry.drivers import Delivery, MailInfo, NodeStats, Stats
    from tarry.drivers.reading.jsonable import export_events

__version__ = "0.1.0"

_default: Runtime | None = None
_default_lock = threading.Lock()


def default_runtime() -> Runtime:
    """The process-wide in-memory Runtime used by `tarry.run` and `tarry.resume`."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Runtime()
        return _default


def run(flow: Flow, input: Any = None, **runtime_kwargs: Any) -> Outcome:
    """Run `flow` on the default in-memory Runtime (or on `Runtime(**runtime_kwargs)`). Sync and
    typed like `Runtime.run`: an Outcome, or an awaitable of one once an async step is met."""
    rt = Runtime(**runtime_kwargs) if runtime_kwargs else default_runtime()
    return rt.run(flow, input)


def resume(token: str | None, value: Any = None, *, flow: Flow, **runtime_kwargs: Any) -> Outcome:
    """Resume a token of the default in-memory Runtime (or of `Runtime(**runtime_kwargs)`). Sync
    and typed like `Runtime.resume`."""
    rt = Runtime(**runtime_kwargs) if runtime_kwargs else default_runtime()
    return rt.resume(token, value, flow=flow)


__all__ = [
    "NOT_READY",
    "AsyncInSyncContext",
    "BatchItemFailed",
    "BatchRequest",
    "Branch",
    "Child",
    "ChildFailed",
    "ConcurrentUpdate",
    "ContainerFrame",
    "Context",
    "Delivery",
    "ErrorInfo",
    "Event",
    "Flow",
    "FlowMismatch",
    "ForEach",
    "Gate",
    "Graph",
    "InvalidArgument",
    "InvalidBatchRequest",
    "InvalidFlow",
    "InvalidResumeValue",
    "LogRecord",
    "Loop",
    "Parallel",
    "MailInfo",
    "ManualClock",
    "NodeStats",
    "NotSerializable",
    "Outcome",
    "PauseInfo",
    "PayloadTooLarge",
    "ResumeRequest",
    "Retry",
    "Route",
    "Runtime",
    "SecretRequired",
    "SessionExists",
    "SessionNotResumable",
    "SessionState",
    "SessionSummary",
    "SessionView",
    "Sleep",
    "SnapshotError",
    "SnapshotTooLarge",
    "Stats",
    "TarryError",
    "TokenAlreadyUsed",
    "UnknownFlow",
    "UnknownRoute",
    "UnknownSession",
    "UnknownToken",
    "Wait",
    "default_runtime",
    "export_events",
    "resume",
    "run",
    "step",
]


def __getattr__(name: str) -> Any:
    # PEP 562: names that few programs use load when first read, not with `import tarry`
    # (the JSON form, the stats records); tarry.drivers knows where each lives.
    if name in ("Delivery", "MailInfo", "NodeStats", "Stats", "export_events"):
        import tarry.drivers

        value = getattr(tarry.drivers, name)
        globals()[name] = value  # later reads find it without calling here again
        return value
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list[str]:
    # The lazy names are listed before they are first read.
    return sorted(set(globals()) | set(__all__))
