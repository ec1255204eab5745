"""Read-only views of stored sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs
from tarry.engine.events import Event
from tarry.engine.reducer import derive_state
from tarry.engine.state import SessionState
from tarry.snapshots.records import SessionRecord, decode_state
from tarry.snapshots.store import SessionStore

from .outcome import Outcome, outcome_of
from .tokens import Tokens


def state_of(record: SessionRecord) -> SessionState:
    """The state a record holds (a session that never wrote one has the initial state)."""
    if not record.state:
        return SessionState(session_id=record.session_id, flow=record.flow)
    return decode_state(record.state)


@attrs.frozen
class SessionSummary:
    """One row of `Runtime.sessions()`."""

    session_id: str
    flow: str
    status: str
    created_at: datetime
    updated_at: datetime
    wake_at: datetime | None = None

    @classmethod
    def of(cls, record: SessionRecord) -> SessionSummary:
        return cls(
            record.session_id,
            record.flow,
            record.status,
            record.created_at,
            record.updated_at,
            record.wake_at,
        )


class SessionView:
    """A session as stored: status, state, full event log, latest outcome.

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
        self._tail = tail or []

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
    def durability(self) -> str:
        """The session's own durability ("pause" or "step"), kept by whoever continues it."""
        return self._record.durability

    @property
    def meta(self) -> dict[str, Any]:
        """The dict given to `Runtime.run(meta=...)`."""
        return dict(self._record.meta)

    @property
    def created_at(self) -> datetime:
        return self._record.created_at

    @property
    def updated_at(self) -> datetime:
        return self._record.updated_at

    @property
    def state(self) -> SessionState:
        if self._state is None:
            self._state = state_of(self._record)
        return self._state

    def events(self, after_seq: int = 0) -> list[Event]:
        """The session's ordered event log (seq 1, 2, 3 ...)."""
        stored = self._store.events(self._record.session_id, after_seq)
        if self._tail:
            last = stored[-1].seq if stored else after_seq
            stored += [e for e in self._tail if e.seq > last]
        return stored

    def derive_state(self) -> SessionState:
        """A pure fold of `events()` up to the last event `state` has seen (a running session
        may have written more since this view read it): always equal to `state`."""
        initial = SessionState(session_id=self._record.session_id)
        last = self.state.last_seq
        return derive_state((e for e in self.events() if e.seq <= last), initial)

    @property
    def outcome(self) -> Outcome:
        key = self._record.token
        token = None
        if key is not None:
            info = self._store.find_token(key)
            if info is not None and not info.used:
                token = self._tokens.token(key)
        return outcome_of(self.state, token)

    def __repr__(self) -> str:
        return f"<SessionView {self.session_id} {self.flow} {self.status}>"


