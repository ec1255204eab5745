"""Clocks: where every timestamp and deadline comes from."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""


class SystemClock:
    """The machine's clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to: for deterministic tests of timers and back-off."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            msg = f"ManualClock start must be timezone-aware (got {start!r})"
            raise ValueError(msg)
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by `seconds` and return the new time."""
        if seconds < 0:
            msg = f"ManualClock.advance takes seconds >= 0 (got {seconds!r})"
            raise ValueError(msg)
        with self._lock:
            self._now = self._now + timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            msg = f"ManualClock.set takes a timezone-aware datetime (got {when!r})"
            raise ValueError(msg)
        with self._lock:
            self._now = when
