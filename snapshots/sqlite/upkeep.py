"""SQLiteStore's upkeep: retention (`prune`, after which the file shrinks), the tallies behind
`stats`, and the one-time conversion of older files to incremental auto-vacuum."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tarry.snapshots.sql_common import ENDED_ROW, prunable, prune_sql
from tarry.snapshots.sqlite.rows import micros
from tarry.snapshots.tally import Sums, Tally, Totals, add_page

if TYPE_CHECKING:
    from tarry.snapshots.sqlite.store import SQLiteStore

log = logging.getLogger("tarry")

#: Indexes and the tally table, created on open (idempotent, so older files get them too).
SCHEMA = (
    # (`list(status=...)` walks sessions_phase_created: see sql.py, schema 7.)
    # `prune`: ended sessions, oldest update first (a paused or running row has no entry).
    f"CREATE INDEX IF NOT EXISTS sessions_ended ON sessions (updated_at, session_id) WHERE {ENDED_ROW}",
    # One row per session `stats` has tallied: the tally (tally.py) up to event `seq`; `final`
    # once the session had ended for good when it was tallied (no event can follow).
    """CREATE TABLE IF NOT EXISTS tallies (
        session_id TEXT PRIMARY KEY,
        seq        INTEGER NOT NULL,
        final      INTEGER NOT NULL,
        blob       BLOB NOT NULL
    )""",
)

#: Sessions read per page by `stats`.
STATS_PAGE = 500
#: How long the checkpoint after a prune may wait for readers, in milliseconds.
CHECKPOINT_WAIT_MS = 1000
_AUTO_VACUUM_NONE = 0


# -- the file ----------------------------------------------------------------------------------


def convert_to_incremental_vacuum(db: sqlite3.Connection, path: str) -> None:
    """Convert a file made before incremental auto-vacuum (whose deletes never shrank it): the
    mode takes effect only through one VACUUM, which rewrites the file. Once per file; a file
    another process holds busy is converted at a later open."""
    (mode,) = db.execute("PRAGMA auto_vacuum").fetchone()
    if mode != _AUTO_VACUUM_NONE:
        return
    log.info("SQLiteStore %s: converting the file to incremental auto-vacuum (one VACUUM)", path)
    try:
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        db.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        log.warning("SQLiteStore %s: not converted to incremental auto-vacuum yet: %s", path, exc)


def _reclaim(store: SQLiteStore) -> None:
    """Give the pages freed by a prune back to the file system, then copy the WAL into the file
    and empty it (the deletes and the vacuum wrote as much WAL as they freed), waiting for
    readers only briefly: a busy checkpoint is left to SQLite's automatic ones."""
    with store._lock:
        # executescript steps the pragma to its end: execute() would free one page (the pragma
        # returns no columns, so the sqlite3 module resets it after its first step).
        store._db.executescript("PRAGMA incremental_vacuum")
        (waited,) = store._db.execute("PRAGMA busy_timeout").fetchone()
        store._db.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            store._db.execute(f"PRAGMA busy_timeout = {int(waited)}")


# -- retention ---------------------------------------------------------------------------------


def prune(
    store: SQLiteStore,
    before: dt.datetime,
    statuses: Sequence[str],
    now: dt.datetime,
    limit: int,
    dry_run: bool,
) -> int:
    wanted = prunable(statuses)
    if not wanted:
        return 0
    # INDEXED BY: the planner, without statistics, would rather take the status index and sort
    # every ended session for each batch.
    count, batch = prune_sql(
        "sessions INDEXED BY sessions_ended",
        statuses=f"IN ({', '.join('?' * len(wanted))})",
        before="?",
        now="?",
        limit="?",
    )
    args = (*wanted, micros(before), micros(now))
    if dry_run:
        with store._lock:
            (found,) = store._cur.execute(count, args).fetchone()
        return int(found)
    with store._write as db:
        ids = [sid for (sid,) in db.execute(batch, (*args, limit)).fetchall()]
        if ids:
            # One statement per table for the whole batch (each id an index range of it).
            doomed = json.dumps(ids)
            for table in ("events", "vals", "tokens", "waits", "logs", "tallies", "sessions"):
                db.execute(
                    f"DELETE FROM {table} WHERE session_id IN (SELECT value FROM json_each(?))",
                    (doomed,),
                )
            db.execute(  # the lists of their children (a child stays: it is listed once)
                "DELETE FROM children WHERE parent IN (SELECT value FROM json_each(?))", (doomed,)
            )
            db.execute(  # a claim is not a consumption: their claims are queued again
                "UPDATE mail SET claimed_by = '' "
                "WHERE claimed_by IN (SELECT value FROM json_each(?))",
                (doomed,),
            )
    if ids:
        _reclaim(store)
    return len(ids)


# -- stats -------------------------------------------------------------------------------------

# Each session after `?1` (by id), its status, its tally, and whether events were written since
# (an index seek; none for a tally that is final).
_TALLIES = """
SELECT s.session_id, s.status, t.seq, t.blob,
       t.final IS NOT 1 AND EXISTS (
           SELECT 1 FROM events AS e WHERE e.session_id = s.session_id AND e.seq > COALESCE(t.seq, 0)
       ), s.flow
FROM sessions AS s LEFT JOIN tallies AS t ON t.session_id = s.session_id
WHERE s.session_id > ?1 {flow}
ORDER BY s.session_id LIMIT ?2
"""


def stats(
    store: SQLiteStore, flow: str | None, since: dt.datetime | None, until: dt.datetime | None
) -> Totals:
    # Only the filters given go into the WHERE clause (numbered: ?1 and ?2 are the page).
    where, named = [], {}
    for column, test, value in (
        ("flow", "=", flow),
        ("created_at", ">=", since),
        ("created_at", "<", until),
    ):
        if value is not None:
            where.append(f"AND s.{column} {test} ?{3 + len(named)}")
            named[len(named)] = value if isinstance(value, str) else micros(value)
    sql = _TALLIES.format(flow=" ".join(where))
    sums = Sums()
    after = ""
    while True:
        args: tuple[Any, ...] = (after, STATS_PAGE, *named.values())
        with store._lock:
            rows = store._cur.execute(sql, args).fetchall()
        fresh = add_page(sums, rows, store.events)
        if fresh:
            _keep(store, fresh)
        if len(rows) < STATS_PAGE:
            return sums.totals()
        after = rows[-1][0]


def _keep(store: SQLiteStore, fresh: list[tuple[str, int | None, Tally, bool]]) -> None:
    """Save the tallies brought up to date, each only if no other reader saved one since (its
    seq is still the one read) and its session still exists. A file this process may not
    write to (or that stays busy) only means the next report folds those events again."""
    try:
        with store._write as db:
            for sid, old, tally, is_final in fresh:
                if old is None:
                    db.execute(
                        "INSERT OR IGNORE INTO tallies (session_id, seq, final, blob) "
                        "SELECT ?1, ?2, ?3, ?4 WHERE EXISTS "
                        "(SELECT 1 FROM sessions WHERE session_id = ?1)",
                        (sid, tally.seq, is_final, tally.encode()),
                    )
                else:
                    db.execute(
                        "UPDATE tallies SET seq = ?2, final = ?3, blob = ?4 "
                        "WHERE session_id = ?1 AND seq = ?5",
                        (sid, tally.seq, is_final, tally.encode(), old),
                    )
    except sqlite3.OperationalError as exc:
        log.info("stats: tallies not saved (%s); the next report folds their events again", exc)
