"""The lease keeper: renews the leases of this process's drives that are inside a long step.

A drive renews its own lease at its checkpoints (drive.py), which come between steps. A step
that lasts longer than the lease (a model call of a minute, a sync step of a batch job) has
no checkpoint for that long, and without help its lease would lapse while its process is
alive: another process's `recover()` would run the session a second time. So that leases can
be short — a dead process's sessions are recoverable within `Runtime(lease=10.0)` seconds —
one daemon thread per Runtime renews, once a third of a lease, the lease of every drive of
this process that has not renewed it itself for that long. A drive between checkpoints costs
the keeper nothing: it renews its own lease at them and the keeper skips it. The thread lives
while drives do and ends when the last one ends (it starts again with the next).

Each renewal is the store's `claim` (one UPDATE of the session's lease columns); a renewal
that finds the lease taken marks the drive as lost, and it stops at its next checkpoint
without writing (`lease_lost`), as when it finds that itself.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tarry.drivers.limits import log


class LeaseKeeper:
    """The drives of one Runtime and the thread that keeps their leases while they run."""

    __slots__ = ("period", "drives", "_lock", "_wake", "_thread")

    def __init__(self, lease: float) -> None:
        #: Seconds between the keeper's rounds: a third of the lease, as a drive renews.
        self.period = lease / 3
        #: The drives running in this process (identity -> Drive).
        self.drives: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, drive: Any) -> None:
        """`drive` began: keep its lease from now on (starting the thread if none runs)."""
        with self._lock:
            self.drives[id(drive)] = drive
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tarry-lease-keeper", daemon=True
                )
                self._thread.start()

    def discard(self, drive: Any) -> None:
        """`drive` is ending: its lease is no longer kept. Called before its last write, and
        returns only once no renewal of it is under way."""
        with self._lock:
            self.drives.pop(id(drive), None)

    def renew_due(self, mono: float | None = None) -> int:
        """Renew the lease of every drive that has not renewed it for a third of a lease (by
        the monotonic clock, or at `mono`); the number renewed. One round of the thread."""
        mono = time.monotonic() if mono is None else mono
        # Under the lock: `discard` waits for a round in progress, so no renewal lands after
        # the drive's last write (which ends its lease) once it has discarded itself.
        with self._lock:
            due = [d for d in self.drives.values() if mono >= d.renew_at and not d.lost]
            for drive in due:
                try:
                    drive.keep_lease()
                except Exception as exc:
                    # The store failed, or was closed under a drive that never ended (a test
                    # that dropped it, a process going down): the drive is no longer kept
                    # (its own checkpoints still renew it, and its last write says the rest).
                    self.drives.pop(id(drive), None)
                    log().warning(
                        "renewing the lease of session %s failed, no longer kept: %s: %s",
                        drive.ex.session_id,
                        type(exc).__name__,
                        exc,
                    )
        return len(due)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.period)
            with self._lock:
                if not self.drives:
                    self._thread = None  # the next drive starts another
                    return
            try:
                self.renew_due()
            except Exception:  # a store that failed this once: the drive's own check remains
                import logging

                logging.getLogger("tarry").warning("renewing leases failed", exc_info=True)
