"""Clocks: where every timestamp and deadline comes from."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol


class Clock(Protocol):
    """What a Runtime reads the time from. `sleep(seconds)` and `async asleep(seconds)` are
    optional: a clock without them waits on the machine's time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""


class SystemClock:
    """The machine's clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        import asyncio  # imported when first needed: it costs tens of ms at `import tarry`

        await asyncio.sleep(seconds)


def clock_ns(clock: Any) -> Callable[[], int]:
    """`clock.now()` in nanoseconds since the epoch (whole microseconds, as events keep it)."""
    if type(clock) is SystemClock:
        return time.time_ns  # the stores and `Event.at` keep it to the microsecond
    from tarry.engine.state.events import ns_of

    return lambda: ns_of(clock.now())


def sleepers(clock: Any) -> tuple[Callable[[float], None], Callable[[float], Awaitable[None]]]:
    """The clock's (sleep, asleep), falling back to the machine's for a clock without them."""
    return getattr(clock, "sleep", time.sleep), getattr(clock, "asleep", _asleep)


async def _asleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


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

    def sleep(self, seconds: float) -> None:
        """Waiting on a manual clock moves it: a back-off of 4 s advances it by 4 s at once."""
        self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.advance(seconds)
        import asyncio

        await asyncio.sleep(0)

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            msg = f"ManualClock.set takes a timezone-aware datetime (got {when!r})"
            raise ValueError(msg)
        with self._lock:
            self._now = when
