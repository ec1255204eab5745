"""The sessions this process is driving, and the aborts asked of them (thread-safe)."""

from __future__ import annotations

import threading
from typing import Any


class Running:
    """Which sessions have a drive in this process (with its Execution, for the live view),
    and which of those must stop.

    `aborts` (session id -> resumable) is read at every checkpoint, so it is a plain dict: a
    dict look-up is atomic under the GIL, and writes take the lock.
    """

    __slots__ = ("sessions", "aborts", "actors", "mail_noted", "_lock")

    def __init__(self) -> None:
        #: session id -> the Execution of its drive in this process.
        self.sessions: dict[str, Any] = {}
        self.aborts: dict[str, bool] = {}
        #: session id -> who asked for its abort (recorded in the event the stop causes).
        self.actors: dict[str, str] = {}
        #: Sessions a delivery found running here and left a message for (`note_mail`).
        self.mail_noted: set[str] = set()
        self._lock = threading.Lock()

    def note_mail(self, session_id: str) -> None:
        """A delivery found `session_id` running and queued its message for it: the drive
        looks for it when it pauses (starting.late_mail)."""
        with self._lock:
            self.mail_noted.add(session_id)

    def take_mail_note(self, session_id: str) -> bool:
        """Whether a delivery noted mail for `session_id`, forgetting the note."""
        if session_id not in self.mail_noted:
            return False
        with self._lock:
            if session_id in self.mail_noted:
                self.mail_noted.discard(session_id)
                return True
            return False

    def started(self, session_id: str, execution: Any) -> None:
        """A drive of `session_id` begins. An abort asked before it began was meant for an
        earlier drive of the session (one ending as this one starts, in another thread)."""
        with self._lock:
            self.sessions[session_id] = execution
            self.aborts.pop(session_id, None)
            self.actors.pop(session_id, None)

    def request_abort(self, session_id: str, resumable: bool, actor: str | None = None) -> bool:
        """Ask the drive of `session_id` in this process to stop; False when there is none."""
        with self._lock:
            execution = self.sessions.get(session_id)
            if execution is not None:
                self.aborts[session_id] = resumable
                # Its engine asks the drive at every checkpoint from now on.
                execution.watch = True
                if actor is not None:
                    self.actors[session_id] = actor
                return True
        return False

    def forget_abort(self, session_id: str, execution: Any) -> None:
        """The drive of `session_id` with `execution` honoured the abort asked of it, and goes
        on (its flow's cleanup runs): its checkpoints no longer stop for that abort."""
        with self._lock:
            if self.sessions.get(session_id) is execution:
                self.aborts.pop(session_id, None)

    def ended(self, session_id: str, execution: Any) -> None:
        """The drive of `session_id` with `execution` is over. It leaves `sessions` and drops
        any abort asked of it in one step under the lock that `request_abort` takes: an abort
        landing between the two would otherwise be kept and stop the session's next run. If a
        newer drive of the session already began (the token this one wrote was used at once),
        the session and its aborts are that drive's: left alone."""
        with self._lock:
            if self.sessions.get(session_id) is execution:
                self.sessions.pop(session_id, None)
                self.aborts.pop(session_id, None)
                self.actors.pop(session_id, None)
