"""MemoryStore's upkeep: retention (`prune`) and the tallies behind `stats`."""

from __future__ import annotations

import datetime as dt
import functools
import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tarry.snapshots.records import SessionRecord
from tarry.snapshots.store import ENDED
from tarry.snapshots.tally import FOLD_ERRORS, Sums, Totals, caught_up, skipped

if TYPE_CHECKING:
    from tarry.snapshots.memory.store import MemoryStore


def prune(
    store: MemoryStore,
    before: dt.datetime,
    statuses: Sequence[str],
    now: dt.datetime,
    limit: int,
    dry_run: bool,
) -> int:
    wanted = set(ENDED).intersection(statuses)
    with store._lock:
        doomed = [
            e.record
            for e in store._sessions.values()
            if e.record.status in wanted
            and e.record.updated_at < before
            and (e.record.lease_until is None or e.record.lease_until <= now)
        ]
        if dry_run:
            return len(doomed)
        for record in heapq.nsmallest(limit, doomed, key=_oldest):
            store.delete(record.session_id)
        return min(limit, len(doomed))


def stats(
    store: MemoryStore, flow: str | None, since: dt.datetime | None, until: dt.datetime | None
) -> Totals:
    """Each session's tally (kept on its entry) brought up to date from the events written
    since, outside the lock, then added up."""
    with store._lock:
        rows = [
            (sid, e, e.record.status, e.tally, e.last_seq, e.record.flow)
            for sid, e in store._sessions.items()
            if (flow is None or e.record.flow == flow)
            and (since is None or e.record.created_at >= since)
            and (until is None or e.record.created_at < until)
        ]
    sums = Sums()
    for sid, entry, status, tally, last_seq, flow in rows:
        sums.count(status)
        if tally is None or tally.seq < last_seq:
            try:
                fresh = caught_up(tally, functools.partial(store.events, sid))
            except FOLD_ERRORS as exc:
                skipped(sid, exc)
                continue
            with store._lock:
                if entry.tally is tally:  # nobody brought it further meanwhile
                    entry.tally = fresh
            tally = fresh
        sums.add(tally, flow)
    return sums.totals()


def _oldest(record: SessionRecord) -> tuple[dt.datetime, str]:
    return (record.updated_at, record.session_id)
