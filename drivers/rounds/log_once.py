"""Which sessions' troubles a Runtime has logged, so that each is logged once, not every round."""

from __future__ import annotations

import threading
from collections import OrderedDict

#: Sessions remembered at most; the least recently reported are forgotten first (and would be
#: logged once more if they came back).
MAX_REPORTED = 10_000


class Reported:
    """Session id -> the kind of trouble last logged for it (bounded, thread-safe)."""

    __slots__ = ("_seen", "_lock", "max_size")

    def __init__(self, max_size: int = MAX_REPORTED) -> None:
        self._seen: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.max_size = max_size

    def __len__(self) -> int:
        return len(self._seen)

    def first(self, session_id: str, kind: str) -> bool:
        """True the first time `kind` of trouble is reported for `session_id` (and then
        remembered); False while it is the kind last reported for it."""
        with self._lock:
            if self._seen.get(session_id) == kind:
                self._seen.move_to_end(session_id)
                return False
            self._seen[session_id] = kind
            self._seen.move_to_end(session_id)
            if len(self._seen) > self.max_size:
                self._seen.popitem(last=False)
            return True

    def forget(self, session_id: str) -> None:
        """The session went well: a later trouble of it is news again."""
        if self._seen:  # the usual case: nothing was ever reported, and no lock is taken
            with self._lock:
                self._seen.pop(session_id, None)
