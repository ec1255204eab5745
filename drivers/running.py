"""The sessions this process is driving, and the aborts asked of them (thread-safe)."""

from __future__ import annotations

import threading


class Running:
    """Which sessions have a drive in this process, and which of those must stop.

    `aborts` (session id -> resumable) is read at every checkpoint, so it is a plain dict: a
    dict look-up is atomic under the GIL, and writes take the lock.
    """

    __slots__ = ("sessions", "aborts", "_lock")

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.aborts: dict[str, bool] = {}
        self._lock = threading.Lock()

    def started(self, session_id: str) -> None:
        self.sessions.add(session_id)

    def request_abort(self, session_id: str, resumable: bool) -> bool:
        """Ask the drive of `session_id` in this process to stop; False when there is none."""
        with self._lock:
            if session_id in self.sessions:
                self.aborts[session_id] = resumable
                return True
        return False

    def ended(self, session_id: str) -> None:
        """A drive of `session_id` is over. It leaves `sessions` and drops any abort asked of it
        in one step under the lock that `request_abort` takes: an abort landing between the two
        would otherwise be kept and stop the session's next run."""
        with self._lock:
            self.sessions.discard(session_id)
            self.aborts.pop(session_id, None)
