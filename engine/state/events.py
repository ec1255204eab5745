"""The event record and the names of its types."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, overload

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
#: The flow's body ended (data: `ending`, and `end`: the data of the event that ends the run
#: once its cleanup is over); its `cleanup=` body runs next. See engine/elements/flow.py.
CLEANUP_STARTED = "cleanup.started"
#: The cleanup body ended (data: `error` when it failed); the run's ending event follows.
CLEANUP_ENDED = "cleanup.ended"

#: The data of every step's `node.started` row: one dict, shared (a step records it for each
#: call). The stores' encoders know a step's start by it (see snapshots/records.batch_arrays).
#: Never mutated.
STEP_STARTED_DATA: dict[str, Any] = {"kind": "step"}

#: The type of the iteration_started row of a ForEach item that a sequential ForEach records in
#: place (a body of one sync step, see containers/foreach.py): ITERATION_STARTED's text in a str
#: object of its own. Equal to it, so every reader sees the same type; by identity, an encoder
#: knows the row begins an item whose four rows (this one, the step's node.started and
#: node.completed, the iteration's completion) were recorded together, and may write them as
#: one (snapshots/records.batch_arrays).
ITEM_STARTED = "".join(("container.", "iteration_started"))

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
        CLEANUP_STARTED,
        CLEANUP_ENDED,
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


# --- compact events -------------------------------------------------------------------------
#
# The engine records an event as a plain tuple, a row: (seq, type, at, path, data), `at` in
# nanoseconds since the epoch (UTC). A row costs one tuple; an `Event` (and its datetime) is
# built only when someone looks: a subscriber, `events()`, a view of a running session. The
# stores encode rows as they are, in the order `encode_event` writes.

Row = tuple[int, str, int, tuple[Any, ...], dict[str, Any]]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def at_of(ns: int) -> datetime:
    """The UTC datetime of `ns` nanoseconds since the epoch (to the microsecond)."""
    return EPOCH + timedelta(microseconds=ns // 1000)


def ns_of(at: datetime) -> int:
    """Nanoseconds since the epoch of a timezone-aware datetime (a whole microsecond)."""
    # Exact, from the normalised parts of the difference (cheaper than timedelta // timedelta).
    d = at - EPOCH
    return ((d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds) * 1000


def event_of(row: Row, session_id: str) -> Event:
    """The `Event` a row stands for."""
    seq, type, at, path, data = row
    return new_event(seq, type, session_id, at_of(at), path, data)


class EventLog(Sequence[Event]):
    """Events of one session kept as rows: a sequence of `Event`s, each built when read.

    Writers that know the class (the stores' encoders) read `rows` directly. `items`: whether
    the rows may hold ForEach items recorded in place (ITEM_STARTED), which an encoder may
    write together (snapshots/records.batch_arrays); False says they hold none."""

    __slots__ = ("session_id", "rows", "items")

    def __init__(self, session_id: str, rows: list[Row], items: bool = False) -> None:
        self.session_id = session_id
        self.rows = rows
        self.items = items

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> EventLog: ...
    def __getitem__(self, index: int | slice) -> Event | EventLog:
        if isinstance(index, slice):
            return EventLog(self.session_id, self.rows[index], self.items)
        return event_of(self.rows[index], self.session_id)

    def __iter__(self) -> Iterator[Event]:
        sid = self.session_id
        last_ns, at = -1, EPOCH
        for seq, type, ns, path, data in self.rows:
            if ns != last_ns:  # the events of a step share their time: one datetime
                last_ns, at = ns, at_of(ns)
            yield new_event(seq, type, sid, at, path, data)

    def __repr__(self) -> str:
        return f"EventLog({self.session_id!r}, {len(self.rows)} events)"


def rows_of(events: Sequence[Event]) -> list[Row]:
    """The rows of `events`: an EventLog's own, or each Event's fields."""
    if type(events) is EventLog:
        return events.rows
    return [(e.seq, e.type, ns_of(e.at), e.path, e.data) for e in events]
