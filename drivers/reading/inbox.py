"""The inbox: the Gates waiting for a person, of every session, filtered by assignee.

A waiting Gate is a wait row of kind "human" whose payload holds its `message` and `assignee`
(engine/elements/waits.py). The inbox reads those rows through the store's kind index
(`SessionStore.waiting(kind="human")`), a page at a time, reading no snapshot, and stops after
`scan` of them: it costs at most that many rows, however many sessions the store holds.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import attrs
from tarry.engine.errors import InvalidArgument, SnapshotError
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.store import SessionStore

#: Wait rows read at a time, and at most in all (by default).
SCAN_PAGE = 500
SCAN_MAX = 10_000


@attrs.frozen
class InboxPage:
    """`gates`: the first `limit` waiting Gates that match (`{"session_id", "flow", "path",
    "message", "assignee", "reason", "expires_at", "since"}`), the one waiting longest first
    (by its session's last update); `more`: more matched; `assignees`: how many waiting Gates
    each assignee has among those read ("" for unassigned ones); `scanned`: how many were read;
    `complete`: whether that was all of them (else the scan stopped at its bound)."""

    gates: list[dict[str, Any]]
    more: bool
    assignees: dict[str, int]
    scanned: int
    complete: bool


def _payload(blob: bytes) -> dict[str, Any]:
    if not blob:
        return {}
    try:
        value = loads(blob)
    except (SnapshotError, ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def inbox(
    store: SessionStore,
    *,
    assignees: set[str] | None = None,
    limit: int = 100,
    scan: int = SCAN_MAX,
) -> InboxPage:
    """The waiting Gates of the `assignees` (every one when None; "" stands for the unassigned
    ones), at most `limit`. InvalidArgument for a limit or scan < 1."""
    if type(limit) is not int or limit < 1 or type(scan) is not int or scan < 1:
        raise InvalidArgument("limit and scan must be ints >= 1")
    found: list[tuple[Any, dict[str, Any]]] = []
    counts: Counter[str] = Counter()
    after: str | None = None
    scanned, more, complete = 0, False, False
    while scanned < scan:
        page = min(SCAN_PAGE, scan - scanned)
        rows = store.waiting(kind="human", after=after, limit=page)
        scanned += len(rows)
        for wait in rows:
            payload = _payload(wait.payload)
            who = payload.get("assignee")
            who = who if isinstance(who, str) else ""
            counts[who] += 1
            if assignees is None or who in assignees:
                if len(found) < limit:
                    found.append((wait, payload))
                else:
                    more = True
        if len(rows) < page:
            complete = True
            break
        after = rows[-1].token
    if not complete and scanned == scan:
        # The bound: one more row tells whether there is anything past it.
        complete = not store.waiting(kind="human", after=after, limit=1)
    records = store.load_many([w.session_id for w, _ in found])
    far = dt.datetime.max.replace(tzinfo=dt.UTC)
    gates = []
    for wait, payload in found:
        record = records.get(wait.session_id)
        message = payload.get("message")
        who = payload.get("assignee")
        gates.append(
            {
                "session_id": wait.session_id,
                "flow": record.flow if record else None,
                "path": list(wait.path),
                "message": message if isinstance(message, str) else "",
                "assignee": who if isinstance(who, str) else None,
                "reason": wait.reason,
                "expires_at": wait.wake_at,
                "since": record.updated_at if record else None,
            }
        )
    gates.sort(key=lambda g: (g["since"] or far, g["session_id"]))
    return InboxPage(
        gates=gates, more=more, assignees=dict(counts), scanned=scanned, complete=complete
    )
