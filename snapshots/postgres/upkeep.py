"""PostgresStore's upkeep: retention (`prune`) and the tallies behind `stats`.

Deleting is plain DELETEs: PostgreSQL's autovacuum makes the space of deleted rows reusable (a
file never shrinks by itself; `VACUUM FULL` gives space back to the system, under a lock).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tarry.snapshots.sql_common import ENDED_ROW, prunable, prune_sql
from tarry.snapshots.tally import Sums, Tally, Totals, add_page

if TYPE_CHECKING:
    import psycopg
    from tarry.snapshots.postgres.store import PostgresStore

log = logging.getLogger("tarry")

#: The schema migration that adds what retention and stats need.
DESCRIPTION = "ended sessions by last update, sessions by flow and status, per-session tallies"
STATEMENTS = (
    f"CREATE INDEX tarry_sessions_ended ON tarry_sessions (updated_at, session_id) WHERE {ENDED_ROW}",
    "CREATE INDEX tarry_sessions_flow_status ON tarry_sessions (flow, status, created_at, session_id)",
    # One row per session `stats` has tallied: the tally (tally.py) up to event `seq`; `final`
    # once the session had ended for good when it was tallied (no event can follow).
    """CREATE TABLE tarry_tallies (
        session_id text COLLATE "C" PRIMARY KEY REFERENCES tarry_sessions ON DELETE CASCADE,
        seq        bigint NOT NULL,
        final      boolean NOT NULL,
        blob       bytea NOT NULL
    )""",
)

#: Sessions read per page by `stats`.
STATS_PAGE = 500


# -- retention ---------------------------------------------------------------------------------


def prune(
    conn: psycopg.Connection[Any],
    before: dt.datetime,
    statuses: Sequence[str],
    now: dt.datetime,
    limit: int,
    dry_run: bool,
) -> int:
    wanted = prunable(statuses)
    if not wanted:
        return 0
    count, batch = prune_sql(
        "tarry_sessions",
        statuses="= ANY(%(statuses)s)",
        before="%(before)s",
        now="%(now)s",
        limit="%(limit)s",
    )
    args = {"statuses": wanted, "before": before, "now": now, "limit": limit}
    if dry_run:
        row = conn.execute(count, args).fetchone()
        return int(row[0]) if row else 0
    # One statement: the batch is locked (rows another transaction holds are skipped, and the
    # condition is checked again on the rows taken), then deleted with their events, values,
    # tokens, waits and tallies (ON DELETE CASCADE). The messages they claimed name them in no
    # foreign key: they are released (queued again) in the same statement.
    row = conn.execute(
        f"WITH doomed AS (DELETE FROM tarry_sessions WHERE session_id IN ({batch} "
        "FOR UPDATE SKIP LOCKED) RETURNING session_id), "
        "released AS (UPDATE tarry_mail SET claimed_by = '' "
        "WHERE claimed_by = ANY(ARRAY(SELECT session_id FROM doomed)) AND claimed_by <> '') "
        "SELECT count(*) FROM doomed",
        args,
    ).fetchone()
    return int(row[0]) if row else 0


# -- stats -------------------------------------------------------------------------------------

# Each session after `after` (by id), its status, its tally, and whether events were written
# since (an index seek; none for a tally that is final).
_TALLIES = """
SELECT s.session_id, s.status, t.seq, t.blob,
       t.final IS NOT TRUE AND EXISTS (
           SELECT 1 FROM tarry_events AS e
           WHERE e.session_id = s.session_id AND e.seq > COALESCE(t.seq, 0)
       ), s.flow
FROM tarry_sessions AS s LEFT JOIN tarry_tallies AS t ON t.session_id = s.session_id
WHERE s.session_id > %(after)s {flow}
ORDER BY s.session_id LIMIT %(limit)s
"""

# Save tallies brought up to date: each only if no other reader saved one since (its seq is
# still the one read), and a new one only for a session that still exists.
_KEEP = """
WITH given AS (
    SELECT * FROM unnest(%(sids)s::text[], %(olds)s::bigint[], %(seqs)s::bigint[],
                         %(finals)s::boolean[], %(blobs)s::bytea[]) AS g(sid, old, seq, final, blob)
), updated AS (
    UPDATE tarry_tallies AS t SET seq = g.seq, final = g.final, blob = g.blob
    FROM given AS g WHERE t.session_id = g.sid AND t.seq = g.old
)
INSERT INTO tarry_tallies (session_id, seq, final, blob)
SELECT g.sid, g.seq, g.final, g.blob FROM given AS g
WHERE g.old IS NULL AND EXISTS (SELECT 1 FROM tarry_sessions AS s WHERE s.session_id = g.sid)
ON CONFLICT (session_id) DO NOTHING
"""


def stats(
    store: PostgresStore, flow: str | None, since: dt.datetime | None, until: dt.datetime | None
) -> Totals:
    where = [
        f"AND s.{clause}"
        for clause, value in (
            ("flow = %(flow)s", flow),
            ("created_at >= %(since)s", since),
            ("created_at < %(until)s", until),
        )
        if value is not None
    ]
    sql = _TALLIES.format(flow=" ".join(where))
    params = {"limit": STATS_PAGE, "flow": flow, "since": since, "until": until}
    sums = Sums()
    after = ""
    while True:
        with store._pool.connection() as conn:
            rows = conn.execute(sql, {**params, "after": after}).fetchall()
        fresh = add_page(sums, rows, store.events)
        if fresh:
            _keep(store, fresh)
        if len(rows) < STATS_PAGE:
            return sums.totals()
        after = rows[-1][0]


def _keep(store: PostgresStore, fresh: list[tuple[str, int | None, Tally, bool]]) -> None:
    """Save the tallies in one statement. A role that may not write, or a session deleted
    meanwhile, only means the next report folds those events again."""
    args = {
        "sids": [sid for sid, _, _, _ in fresh],
        "olds": [old for _, old, _, _ in fresh],
        "seqs": [tally.seq for _, _, tally, _ in fresh],
        "finals": [is_final for _, _, _, is_final in fresh],
        "blobs": [tally.encode() for _, _, tally, _ in fresh],
    }
    from psycopg import errors as pg_errors  # psycopg is loaded: the store runs on it

    try:
        with store._pool.connection() as conn:
            conn.execute(_KEEP, args)
    except (
        pg_errors.IntegrityError,
        pg_errors.InsufficientPrivilege,
        pg_errors.ReadOnlySqlTransaction,
    ) as exc:
        log.info("stats: tallies not saved (%s); the next report folds their events again", exc)
