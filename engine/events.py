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


_new = object.__new__
# The setters of the slots themselves. A frozen class's `__init__` goes through
# `object.__setattr__` for each field, which looks the field up again every time.
_seq, _type, _sid, _at, _path, _data = (
    Event.__dict__[name].__set__ for name in ("seq", "type", "session_id", "at", "path", "data")
)


def new_event(
    seq: int, type: str, session_id: str, at: datetime, path: tuple[Any, ...], data: dict[str, Any]
) -> Event:
    """`Event(seq, type, session_id, at, path, data)` for the engine's hot path (two events per
    step): the same event, which has no validators or converters, for a quarter less."""
    event = _new(Event)
    _seq(event, seq)
    _type(event, type)
    _sid(event, session_id)
    _at(event, at)
    _path(event, path)
    _data(event, data)
    return event
