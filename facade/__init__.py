"""tarry: workflows that wait — for a person, a batch job or a timer — without holding a process.

This package only re-exports. The layers below it, each importing only downwards:
`tarry.drivers` (what drives runs: the pump, Runtime, tokens, clocks) -> `tarry.engine` (what
runs: steps, containers, events, the state and its reducer) and `tarry.snapshots` (how it is
saved: the codec and the stores).
"""

from __future__ import annotations

# Nothing is imported here but `_thread` (built in): every public name is loaded when it is
# first read (PEP 562 `__getattr__` below), so `import tarry` costs what `python -c pass` costs,
# and a program pays only for what it uses — `tarry.Flow` loads the engine, `tarry.Runtime`
# the drivers; never the stores, the CLI, the HTTP monitor or their libraries until asked.
# `from typing import TYPE_CHECKING` would import typing (a fifth of an interpreter's start):
# mypy and pyright read any `TYPE_CHECKING` name as true.
import _thread
from importlib import import_module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tarry import batches as batches
    from tarry import drivers as drivers
    from tarry import engine as engine
    from tarry import snapshots as snapshots
    from tarry.drivers import (
        NOT_READY,
        Delivery,
        MailInfo,
        ManualClock,
        NodeStats,
        Outcome,
        PauseInfo,
        ResumeRequest,
        Runtime,
        SessionSummary,
        SessionView,
        Stats,
    )
    from tarry.drivers.reading.jsonable import export_events
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
        NotSendable,
        PayloadTooLarge,
        SecretRequired,
        SnapshotTooLarge,
    )
    from tarry.engine.retry import Retry
    from tarry.snapshots.log_records import LogRecord

__version__ = "0.1.0"

#: Where each public name lives: the module `__getattr__` imports when the name is first read.
_HOMES = {
    **dict.fromkeys(
        (
            "NOT_READY",
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
            "export_events",
        ),
        "tarry.drivers",
    ),
    **dict.fromkeys(
        (
            "AsyncInSyncContext",
            "Branch",
            "Child",
            "ContainerFrame",
            "Context",
            "ErrorInfo",
            "Event",
            "Flow",
            "FlowMismatch",
            "ForEach",
            "Gate",
            "Graph",
            "InvalidFlow",
            "InvalidResumeValue",
            "Loop",
            "NotSerializable",
            "Parallel",
            "Route",
            "SessionExists",
            "SessionNotResumable",
            "SessionState",
            "Sleep",
            "SnapshotError",
            "TarryError",
            "TokenAlreadyUsed",
            "UnknownFlow",
            "UnknownRoute",
            "UnknownSession",
            "UnknownToken",
            "Wait",
        ),
        "tarry.engine",
    ),
    **dict.fromkeys(
        (
            "BatchItemFailed",
            "ChildFailed",
            "ConcurrentUpdate",
            "InvalidArgument",
            "InvalidBatchRequest",
            "NotSendable",
            "PayloadTooLarge",
            "SecretRequired",
            "SnapshotTooLarge",
        ),
        "tarry.engine.errors",
    ),
    "BatchRequest": "tarry.engine.elements.batch_request",
    "step": "tarry.engine.elements.step",
    "Retry": "tarry.engine.retry",
    "LogRecord": "tarry.snapshots.log_records",
}

#: The subpackages, read as attributes (`tarry.snapshots.SQLiteStore` after `import tarry`).
_SUBPACKAGES = frozenset({"batches", "drivers", "engine", "snapshots"})

_default: Runtime | None = None
_default_lock = _thread.allocate_lock()


def default_runtime() -> Runtime:
    """The process-wide in-memory Runtime used by `tarry.run` and `tarry.resume`."""
    global _default
    with _default_lock:
        if _default is None:
            from tarry.drivers import Runtime

            _default = Runtime()
        return _default


def run(flow: Flow, input: Any = None, **runtime_kwargs: Any) -> Outcome:
    """Run `flow` on the default in-memory Runtime (or on `Runtime(**runtime_kwargs)`). Sync and
    typed like `Runtime.run`: an Outcome, or an awaitable of one once an async step is met."""
    if runtime_kwargs:
        from tarry.drivers import Runtime

        return Runtime(**runtime_kwargs).run(flow, input)
    return default_runtime().run(flow, input)


def resume(token: str | None, value: Any = None, *, flow: Flow, **runtime_kwargs: Any) -> Outcome:
    """Resume a token of the default in-memory Runtime (or of `Runtime(**runtime_kwargs)`). Sync
    and typed like `Runtime.resume`."""
    if runtime_kwargs:
        from tarry.drivers import Runtime

        return Runtime(**runtime_kwargs).resume(token, value, flow=flow)
    return default_runtime().resume(token, value, flow=flow)


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
    "NotSendable",
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
    # PEP 562: a public name is imported when first read, then kept in the module's globals so
    # later reads (and `from tarry import X`) never call here again. import_module is
    # thread-safe: a second thread waits for the module the first is still importing.
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(import_module(home), name)
    elif name in _SUBPACKAGES:
        value = import_module(f"{__name__}.{name}")
    else:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names are listed before they are first read.
    return sorted(set(globals()) | set(__all__) | _SUBPACKAGES)
