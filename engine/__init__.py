"""What runs: steps, containers, signals, events, SessionState and its reducer.

Plain generators only: this package never imports asyncio, msgpack, or the other layers.
"""

from tarry.engine.containers import Branch, ForEach, Graph, Loop, Parallel
from tarry.engine.context import Context, Scope
from tarry.engine.elements.child import Child
from tarry.engine.elements.element import Element, Route
from tarry.engine.elements.flow import Flow, structural
from tarry.engine.elements.step import Step, step
from tarry.engine.elements.waits import Gate, Sleep, Wait
from tarry.engine.errors import (
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
from tarry.engine.execution import Execution, Ledger
from tarry.engine.failure import NodeFailure
from tarry.engine.signals import Await, Checkpoint, Pause
from tarry.engine.state.events import EVENT_TYPES, Event
from tarry.engine.state.records import ContainerFrame, ErrorInfo, PauseState, SessionState
from tarry.engine.state.reducer import apply, derive_state

__all__ = [
    "EVENT_TYPES",
    "AsyncInSyncContext",
    "Await",
    "Branch",
    "Checkpoint",
    "Child",
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
