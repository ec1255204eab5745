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
    """A session as stored: status, state, full event log, latest outcome."""

    def __init__(self, store: SessionStore, record: SessionRecord, tokens: Tokens) -> None:
        self._store = store
        self._record = record
        self._tokens = tokens
        self._state: SessionState | None = None

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
        return self._store.events(self._record.session_id, after_seq)

    def derive_state(self) -> SessionState:
        """A pure fold of `events()`: always equal to `state`."""
        initial = SessionState(session_id=self._record.session_id)
        return derive_state(self.events(), initial)

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


