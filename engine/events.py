"""The event record and the names of its types."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

RUN_STARTED = "run.started"
RUN_PAUSED = "run.paused"
RUN_RESUMED = "run.resumed"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
NODE_STARTED = "node.started"
NODE_COMPLETED = "node.completed"
NODE_FAILED = "node.failed"
NODE_RETRYING = "node.retrying"
NODE_SKIPPED = "node.skipped"
ITERATION_STARTED = "container.iteration_started"
ITERATION_COMPLETED = "container.iteration_completed"

EVENT_TYPES = frozenset(
    {
        RUN_STARTED,
        RUN_PAUSED,
        RUN_RESUMED,
        RUN_COMPLETED,
        RUN_FAILED,
        RUN_CANCELLED,
        NODE_STARTED,
        NODE_COMPLETED,
        NODE_FAILED,
        NODE_RETRYING,
        NODE_SKIPPED,
        ITERATION_STARTED,
        ITERATION_COMPLETED,
    }
)


@attrs.frozen(slots=True)
class Event:
    """One entry of a session's log; `seq` is gap-free for the whole session."""

    seq: int
    type: str
    session_id: str
    at: datetime
    path: tuple[Any, ...]
    data: dict[str, Any]
