"""Which open provider batches hold a session's waiting BatchRequests (the monitor's panel)."""

from __future__ import annotations

from typing import Any

from tarry.engine.elements.batch_request import REASON
from tarry.snapshots.batch_records import BatchRecord


def session_batches(store: Any, session_id: str) -> list[BatchRecord]:
    """The open submissions that hold a key one of the session's BatchRequests waits on,
    oldest first. Reads the session's waits and the keys of the open submissions: for a page
    that shows one session, not for a loop."""
    keys = {
        wait.key
        for wait in store.waits(session_id)
        if wait.key is not None and wait.reason.startswith(REASON)
    }
    if not keys:
        return []
    return [
        record
        for record in store.batches(open=True)
        if keys.intersection(store.batch_keys(record.submission_id))
    ]
