"""Read-only views of stored sessions."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
from tarry.drivers.drive.outcome import Outcome, outcome_of
from tarry.drivers.drive.values_out_of_line import Reader, resolved
from tarry.drivers.tokens import Tokens
from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument, SnapshotError
from tarry.engine.state.events import RUN_RESUMED, Event
from tarry.engine.state.lanes import concurrent, parked, restore
from tarry.engine.state.records import ErrorInfo, SessionState
from tarry.engine.state.reducer import apply, own
from tarry.snapshots.records import SessionRecord, decode_lane, decode_state
from tarry.snapshots.store import SessionStore

if TYPE_CHECKING:
    from tarry.drivers.core import Core

#: Events read at a time where a whole log is walked (`derive_state`), so memory stays flat.
PAGE = 500


def state_of(record: SessionRecord) -> SessionState:
    """The state a record holds (a session that never wrote one has the initial state)."""
    if not record.state:
        return SessionState(session_id=record.session_id, flow=record.flow)
    return decode_state(record.state)


def stored_state(core: Core, record: SessionRecord) -> SessionState:
    """The state `record` holds: the one this runtime kept when it wrote that very snapshot,
    else decoded (see statecache.py). Nobody may change it. A snapshot that cannot be decoded
    raises SnapshotError naming the session."""
    kept = core.states.get(record.state)
    if kept is not None:
        return kept
    try:
        return state_of(record)
    except SnapshotError as exc:
        msg = f"session {record.session_id!r}: its snapshot cannot be read: {exc}"
        raise SnapshotError(msg) from exc


#: The status shown for a session stored as running whose lease lapsed: the process that ran
#: it died (or stalled), and `recover()` may take it over. Derived when read, never stored.
STALE = "stale"


def lapsed(status: str, lease_until: datetime | None, now: datetime | None) -> bool:
    """Whether a session stored as `status` with a lease until `lease_until` is stale at
    `now`: running, and its lease ran out (no process renewed it in time)."""
    return (
        status == "running" and now is not None and lease_until is not None and lease_until <= now
    )


@attrs.frozen
class SessionSummary:
    """One row of `Runtime.sessions()`. `status` is the stored status, except "stale" for a
    running session whose lease lapsed (see STALE); `lease_until` is when its lease ends."""

    session_id: str
    flow: str
    status: str
    created_at: datetime
    updated_at: datetime
    wake_at: datetime | None = None
    lease_until: datetime | None = None

    @classmethod
    def of(cls, record: SessionRecord, now: datetime | None = None) -> SessionSummary:
        stale = lapsed(record.status, record.lease_until, now)
        return cls(
            record.session_id,
            record.flow,
            STALE if stale else record.status,
            record.created_at,
            record.updated_at,
            record.wake_at,
            record.lease_until if record.status == "running" else None,
        )


class SessionView:
    """A session as stored: status, state, event log (a page at a time), latest outcome.

    A session that this process is running is seen live: `state` includes the events its
    drive has not written yet (`tail`), and `events()` ends with them."""

    def __init__(
        self,
        store: SessionStore,
        record: SessionRecord,
        tokens: Tokens,
        *,
        state: SessionState | None = None,
        tail: list[Event] | None = None,
    ) -> None:
        self._store = store
        self._record = record
        self._tokens = tokens
        self._state = state
        self._resolved: SessionState | None = None
        self._tail = tail or []
        self._read = Reader(store, record.session_id, self._tail)

    @property
    def session_id(self) -> str:
        return self._record.session_id

    @property
    def flow(self) -> str:
        return self._record.flow

    @property
    def status(self) -> str:
        return self._record.status

    @property
    def lease_until(self) -> datetime | None:
        """When the lease of a running session ends (None when no process holds it): a
        running session whose lease ended before now is stale (see `stale`)."""
        return self._record.lease_until if self._record.status == "running" else None

    def stale(self, now: datetime) -> bool:
        """Whether the session is running with a lease that lapsed at `now` (its process died
        or stalled): `status` stays "running" until it is recovered; lists show "stale"."""
        return lapsed(self._record.status, self._record.lease_until, now)

    @property
    def durability(self) -> str:
        """The session's own durability ("pause" or "step"), kept by whoever continues it."""
        return self._record.durability

    @property
    def deadline(self) -> datetime | None:
        """When the session fails with "deadline_exceeded" if still not ended (None: none)."""
        return self._head().deadline

    @property
    def ending(self) -> str | None:
        """How its flow's body ended, once its `cleanup=` began: "completed", "failed",
        "cancelled" or "deadline_exceeded" (None before, or without a cleanup)."""
        return self._head().ending

    @property
    def cleanup_error(self) -> ErrorInfo | None:
        """What its flow's `cleanup=` body failed with, if it did: recorded on the session,
        which still ended as its body did (completed, failed, cancelled)."""
        return self._head().cleanup_error

    def _head(self) -> SessionState:
        """The state as stored or live, without reading what it keeps out of line."""
        return self._state if self._state is not None else state_of(self._record)

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the flow version the session runs with."""
        return self._record.fingerprint

    @property
    def meta(self) -> dict[str, Any]:
        """The dict given to `Runtime.run(meta=...)`."""
        return dict(self._record.meta)

    @property
    def parent(self) -> str | None:
        """The session that started this one with a `Child` element, if it did."""
        parent = self._record.meta.get("parent")
        return parent if isinstance(parent, str) else None

    @property
    def children(self) -> list[str]:
        """The ids of the sessions this one started with `Child` elements, in the order it
        started them (the store lists each from the transaction that created it)."""
        return self._store.children(self.session_id)

    @property
    def forked_from(self) -> dict[str, Any] | None:
        """Where a session made by `Runtime.fork` came from: `{"session_id": ..., "seq": ...}`
        (the original and the seq of its last event the fork holds); None for any other."""
        found = self._record.meta.get("forked_from")
        return dict(found) if isinstance(found, dict) else None

    @property
    def created_at(self) -> datetime:
        return self._record.created_at

    @property
    def updated_at(self) -> datetime:
        return self._record.updated_at

    @property
    def state(self) -> SessionState:
        """The state, with the large input and top-level outputs it keeps out of line read back
        in their places, and the waiting lanes kept in the store's wait rows back in their
        containers (once per view): the whole state, as a fold of its events makes it."""
        if self._resolved is None:
            state = self._state if self._state is not None else state_of(self._record)
            if parked(state):  # the lanes that wait in the store's wait rows come back
                state = self._unparked(state)
            self._resolved = resolved(state, self._read)
        return self._resolved

    def _unparked(self, state: SessionState) -> SessionState:
        """`state` with its parked lanes back: those that wait (from their wait rows) and
        those a resume took since the snapshot was written (from the `run.resumed` events
        after it, which carry them: a session that runs, or whose run died)."""
        rows = self._store.waits(self.session_id)
        state = restore(own(state), [decode_lane(w.lane) for w in rows if w.lane])
        if parked(state):
            for event in self._store.events(self.session_id, state.last_seq):
                blob = event.data.get("lane") if event.type == RUN_RESUMED else None
                if type(blob) is bytes:
                    with contextlib.suppress(SnapshotError):  # (not parked: it came back)
                        state = restore(state, [decode_lane(blob)])
        return state

    def events(self, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The session's ordered event log (seq 1, 2, 3 ...): the events with seq > `after_seq`,
        the first `limit` of them (all when None). A page costs what it holds, wherever it is
        in the log: read a long log with `after_seq=page[-1].seq` until a page comes back
        short (or empty). InvalidArgument for an `after_seq` that is not an int >= 0 or a
        `limit` that is not None or an int >= 1. A session running in this process ends with
        the events its drive has not written yet."""
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            msg = f"after_seq must be an int >= 0 (got {describe(after_seq)})"
            raise InvalidArgument(msg)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            msg = f"limit must be None or an int >= 1 (got {describe(limit)})"
            raise InvalidArgument(msg)
        stored = self._store.events(self._record.session_id, after_seq, limit)
        if self._tail and (limit is None or len(stored) < limit):
            last = stored[-1].seq if stored else after_seq
            unwritten = [e for e in self._tail if e.seq > last]
            stored += unwritten if limit is None else unwritten[: limit - len(stored)]
        return stored

    def derive_state(self) -> SessionState:
        """A pure fold of `events()` up to the last event `state` has seen (a running session
        may have written more since this view read it), with the values kept out of line read
        back as `state` has them: always equal to `state`. Reads the log a page at a time."""
        # From the initial state `state_of` gives a session that never wrote one.
        state = SessionState(session_id=self._record.session_id, flow=self._record.flow)
        last = self.state.last_seq
        after = 0
        while True:
            page = self.events(after, PAGE)
            for event in page:
                if event.seq > last:
                    return resolved(state, self._read)
                state = apply(state, event)
            if len(page) < PAGE:
                return resolved(state, self._read)
            after = page[-1].seq

    @property
    def outcome(self) -> Outcome:
        key = self._record.token
        token = None
        if key is not None:
            info = self._store.find_token(key)
            if info is not None and not info.used:
                token = self._tokens.token(key)
        state = self.state
        if state.status == "paused" and concurrent(state):
            # Every waiting branch's own token, as the store lists them.
            by_path = {
                w.path: self._tokens.token(w.token) for w in self._store.waits(self.session_id)
            }
            return outcome_of(state, token, tokens=by_path)
        return outcome_of(state, token)

    def __repr__(self) -> str:
        return f"<SessionView {self.session_id} {self.flow} {self.status}>"
