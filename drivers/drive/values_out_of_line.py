"""Values a session's state refers to instead of holding them (engine.state.OutOfLine): a large
flow input or top-level output, stored once, with the event that brought it in.

The event log is where such a value lives out of line: it is written there anyway, once, and
never rewritten, so a snapshot written after it holds a reference of a few bytes and a pause
costs nothing for it. Reading it back is reading one event by its seq, which every store
serves through its (session, seq) index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tarry.engine.errors import SnapshotError
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.records import OutOfLine, SessionState, from_fields
from tarry.snapshots.store import SessionStore

#: The field of the event's data that holds the value, by event type.
_FIELDS = {ev.RUN_STARTED: "input", ev.NODE_COMPLETED: "output"}


def fetch(store: SessionStore, session_id: str, seq: int, unwritten: Sequence[Event] = ()) -> Any:
    """The value the session's event `seq` keeps out of line (looked for first among the
    `unwritten` events of a drive in this process). SnapshotError when there is none."""
    for event in unwritten:
        if event.seq == seq:
            return _value(event, session_id, seq)
    found = store.events(session_id, seq - 1, 1)
    event = found[0] if found and found[0].seq == seq else None
    return _value(event, session_id, seq)


def _value(event: Event | None, session_id: str, seq: int) -> Any:
    field = None if event is None else _FIELDS.get(event.type)
    if (
        event is None
        or field is None
        or not event.data.get("out_of_line")
        or field not in event.data
    ):
        found = "no such event" if event is None else f"a {event.type!r} event holding none"
        msg = (
            f"session {session_id!r}: its state refers to the value of event {seq}, "
            f"and the store has {found}"
        )
        raise SnapshotError(msg)
    return event.data[field]


def resolved(state: SessionState, read: Callable[[int], Any]) -> SessionState:
    """`state` with the values it refers to (see the module docstring) read back with
    `read(seq)` and put in their places; `state` itself when it refers to none."""
    f = state.__dict__
    inp = f["input"]
    outputs = f["outputs"]
    if type(inp) is not OutOfLine and OutOfLine not in map(type, outputs.values()):
        return state
    fields = dict(f)
    if type(inp) is OutOfLine:
        fields["input"] = read(inp.seq)
    fields["outputs"] = {
        name: read(v.seq) if type(v) is OutOfLine else v for name, v in outputs.items()
    }
    return from_fields(SessionState, fields)


class Reader:
    """`read(seq)` for one session, each value read once (for views and outcomes)."""

    __slots__ = ("_store", "_sid", "_unwritten", "_read")

    def __init__(
        self, store: SessionStore, session_id: str, unwritten: Sequence[Event] = ()
    ) -> None:
        self._store = store
        self._sid = session_id
        self._unwritten = unwritten
        self._read: dict[int, Any] = {}

    def __call__(self, seq: int) -> Any:
        read = self._read
        if seq not in read:
            read[seq] = fetch(self._store, self._sid, seq, self._unwritten)
        return read[seq]
