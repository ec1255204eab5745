"""What runs: steps, containers, signals, events, SessionState and its reducer.

Plain generators only: this package never imports asyncio, msgpack, or the other layers.
"""

from .containers import Branch, ForEach, Graph, Loop, Parallel
from .context import Context, Scope
from .element import Element, Route
from .errors import (
    AsyncInSyncContext,
    ConcurrentUpdate,
    FlowMismatch,
    InvalidFlow,
    InvalidResumeValue,
    NotSerializable,
    SessionExists,
    SessionNotResumable,
    SnapshotError,
    TarryError,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownRoute,
    UnknownSession,
    UnknownToken,
)
from .events import EVENT_TYPES, Event
from .execution import Execution, Ledger
from .failure import NodeFailure
from .flow import Flow, structural
from .reducer import apply, derive_state
from .signals import Await, Checkpoint, Pause
from .state import ContainerFrame, ErrorInfo, PauseState, SessionState
from .step import Step, step
from .waits import Gate, Sleep, Wait

__all__ = [
    "EVENT_TYPES",
    "AsyncInSyncContext",
    "Await",
    "Branch",
    "Checkpoint",
    "ConcurrentUpdate",
    "ContainerFrame",
    "Context",
    "Element",
    "ErrorInfo",
    "Event",
    "Execution",
    "Flow",
    "FlowMismatch",
    "ForEach",
    "Gate",
    "Graph",
    "InvalidFlow",
    "InvalidResumeValue",
    "Ledger",
    "Loop",
    "Parallel",
    "NodeFailure",
    "NotSerializable",
    "Pause",
    "PauseState",
    "Route",
    "Scope",
    "SessionExists",
    "SessionNotResumable",
    "SessionState",
    "Sleep",
    "SnapshotError",
    "Step",
    "TarryError",
    "TokenAlreadyUsed",
    "UnknownFlow",
    "UnknownRoute",
    "UnknownSession",
    "UnknownToken",
    "Wait",
    "apply",
    "derive_state",
    "step",
    "structural",
]
