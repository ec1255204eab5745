"""Subscribers to a Runtime's events: who is told of each event, and how."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from tarry.drivers.limits import log
from tarry.engine.state.events import Event


class Subscribers:
    """Callbacks of every session's events, or of one session's."""

    __slots__ = ("entries", "_lock")

    def __init__(self) -> None:
        #: Replaced, never changed in place: a drive reads it without the lock.
        self.entries: list[tuple[Callable[[Event], Any], str | None]] = []
        self._lock = threading.Lock()

    def subscribe(
        self, callback: Callable[[Event], Any], session_id: str | None = None
    ) -> Callable[[], None]:
        entry = (callback, session_id)
        with self._lock:
            self.entries = self.entries + [entry]

        def unsubscribe() -> None:
            with self._lock:
                self.entries = [s for s in self.entries if s is not entry]

        return unsubscribe

    def announce(self, written: Iterable[Event]) -> None:
        """Tell the subscribers of events written outside a drive (start, resume)."""
        if self.entries:
            for event in written:
                self.notify(event)

    def notify(self, event: Event) -> None:
        for callback, sid in self.entries:
            if sid is None or sid == event.session_id:
                try:
                    callback(event)
                except Exception:
                    log().exception("tarry subscriber %r failed on event %s", callback, event.seq)
