"""Listing stale sessions: running ones whose lease lapsed, a status shown and never stored.

The store lists by stored status, so `status="stale"` walks the running sessions newest first
(a keyset page at a time) and keeps those whose lease ended before now. Running sessions are
few next to the others (each is a live drive or a dead one's), so this reads little.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tarry.drivers.reading.views import lapsed
from tarry.snapshots.records import SessionRecord

#: Running sessions read at a time while looking for stale ones.
PAGE = 500


def stale_records(
    store: Any, now: dt.datetime, want: int, *, skip: int = 0, **filters: Any
) -> list[SessionRecord]:
    """Up to `want` stale sessions newest first, after skipping `skip` of them; `filters` are
    the store's `list` filters (flow, before, since, until, search)."""
    found: list[SessionRecord] = []
    before = filters.pop("before", None)
    while len(found) < want:
        rows = store.list(status="running", limit=PAGE, before=before, **filters)
        for row in rows:
            if lapsed(row.status, row.lease_until, now):
                if skip:
                    skip -= 1
                else:
                    found.append(row)
                    if len(found) == want:
                        break
        if len(rows) < PAGE:
            break
        before = (rows[-1].created_at, rows[-1].session_id)
    return found
