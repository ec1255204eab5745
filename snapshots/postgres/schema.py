"""PostgresStore's schema: the migrations, and how a database is brought up to date."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from tarry.engine.errors import SnapshotError
from tarry.snapshots.postgres import batches as batches_
from tarry.snapshots.postgres import logs as logs_
from tarry.snapshots.postgres import upkeep as upkeep
from tarry.snapshots.postgres import waits as waits_

if TYPE_CHECKING:
    import psycopg

# -- the schema --------------------------------------------------------------------------------


@attrs.frozen
class Migration:
    """One step of the schema: applied once, in order, and recorded in `tarry_schema`."""

    version: int
    description: str
    statements: tuple[str, ...]
    #: Run after the statements, in the same transaction: what SQL alone cannot do.
    then: Callable[[psycopg.Connection[Any]], None] | None = None


# Datetimes are timestamptz (microseconds, like Python's): they compare as instants in SQL
# and come back as the same instant, converted to UTC. Ids are COLLATE "C" so that ordering
# is by code point, as in the other stores (and their indexes are cheaper to compare).
#: Every migration, oldest first. Never edit one that has shipped: add the next version.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, events, out-of-line values and tokens",
        (
            """CREATE TABLE tarry_sessions (
                session_id   text COLLATE "C" PRIMARY KEY,
                flow         text COLLATE "C" NOT NULL,
                status       text COLLATE "C" NOT NULL,
                state        bytea NOT NULL,
                version      bigint NOT NULL,
                fingerprint  text NOT NULL,
                flow_version bytea NOT NULL,
                token        text COLLATE "C",
                wake_at      timestamptz,
                lease_owner  text COLLATE "C",
                lease_until  timestamptz,
                created_at   timestamptz NOT NULL,
                updated_at   timestamptz NOT NULL,
                meta         bytea NOT NULL
            )""",
            "CREATE INDEX tarry_sessions_created ON tarry_sessions (created_at, session_id)",
            "CREATE INDEX tarry_sessions_status ON tarry_sessions (status, created_at, session_id)",
            "CREATE INDEX tarry_sessions_flow ON tarry_sessions (flow, created_at, session_id)",
            # Partial indexes: the timer and lease scans read only the rows they can return.
            "CREATE INDEX tarry_sessions_due ON tarry_sessions (wake_at, session_id) "
            "WHERE status = 'paused' AND wake_at IS NOT NULL",
            "CREATE INDEX tarry_sessions_leases ON tarry_sessions (lease_until, session_id) "
            "WHERE lease_until IS NOT NULL",
            # Append-only: a row is never updated; the primary key refuses a second writer
            # of the same seq. The foreign keys make delete one statement and refuse rows
            # for a session that does not exist (or was deleted meanwhile).
            """CREATE TABLE tarry_events (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES tarry_sessions ON DELETE CASCADE,
                seq        bigint NOT NULL,
                type       text NOT NULL,
                blob       bytea NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE tarry_values (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES tarry_sessions ON DELETE CASCADE,
                key        text COLLATE "C" NOT NULL,
                idx        bigint NOT NULL,
                blob       bytea NOT NULL,
                PRIMARY KEY (session_id, key, idx)
            )""",
            """CREATE TABLE tarry_tokens (
                token      text COLLATE "C" PRIMARY KEY,
                session_id text COLLATE "C" NOT NULL
                           REFERENCES tarry_sessions ON DELETE CASCADE,
                used       boolean NOT NULL DEFAULT false
            )""",
            "CREATE INDEX tarry_tokens_session ON tarry_tokens (session_id)",
        ),
    ),
    Migration(
        2,
        "a session's own durability, and stop requests from any process",
        (
            "ALTER TABLE tarry_sessions ADD COLUMN durability text NOT NULL DEFAULT 'pause'",
            "ALTER TABLE tarry_sessions ADD COLUMN stop text",
        ),
    ),
    Migration(3, upkeep.DESCRIPTION, upkeep.STATEMENTS),
    Migration(
        4,
        "store-wide marks",
        (
            """CREATE TABLE tarry_marks (
                name      text COLLATE "C" PRIMARY KEY,
                marked_at timestamptz NOT NULL DEFAULT now()
            )""",
        ),
    ),
    # Sessions paused before it get a wait for their one live token (waits.backfill).
    Migration(5, waits_.DESCRIPTION, waits_.STATEMENTS, waits_.backfill),
    Migration(6, logs_.DESCRIPTION, logs_.STATEMENTS),
    # The rows of the mailbox of migration 5 become one message each (postgres/waits.py).
    Migration(7, waits_.QUEUE_DESCRIPTION, waits_.QUEUE_STATEMENTS),
    # Each wait's place in the order waits were registered (postgres/waits.py).
    Migration(8, waits_.ORDER_DESCRIPTION, waits_.ORDER_STATEMENTS),
    # Parked lanes in wait rows, and waits by session and time (postgres/waits.py).
    Migration(9, waits_.LANE_DESCRIPTION, waits_.LANE_STATEMENTS),
    # Provider batch submissions (tarry.batches; postgres/batches.py).
    Migration(10, batches_.DESCRIPTION, batches_.STATEMENTS),
    # Each session a Child element started, by its parent (SessionStore.children): written
    # with the child; a pruned parent's list goes with it.
    Migration(
        11,
        "the children of each session, by parent",
        (
            """CREATE TABLE tarry_children (
                id     bigserial PRIMARY KEY,
                parent text COLLATE "C" NOT NULL
                    REFERENCES tarry_sessions (session_id) ON DELETE CASCADE,
                child  text COLLATE "C" NOT NULL
            )""",
            "CREATE INDEX tarry_children_parent ON tarry_children (parent, id)",
        ),
    ),
)

# Migrations of one schema are serialised by a transaction-level advisory lock on this
# class id (b"ta") and a hash of the schema's name.
_LOCK_CLASS = 0x7461


def latest(migrations: Sequence[Migration]) -> int:
    """The schema version `migrations` write."""
    return migrations[-1].version if migrations else 0


def version(conn: psycopg.Connection[Any]) -> int:
    """The version of the schema in the database (0 before the first migration)."""
    found = conn.execute("SELECT to_regclass('tarry_schema') IS NOT NULL").fetchone()
    if not (found and found[0]):
        return 0
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM tarry_schema").fetchone()
    return int(row[0]) if row else 0


def check_not_newer(found: int, migrations: Sequence[Migration]) -> None:
    if found > latest(migrations):
        msg = (
            f"the database has tarry schema version {found}; "
            f"this tarry reads versions up to {latest(migrations)}"
        )
        raise SnapshotError(msg)


def upgrade(
    conn: psycopg.Connection[Any], schema: str | None, migrations: Sequence[Migration]
) -> builtins.list[int]:
    """Apply the `migrations` the database lacks (see PostgresStore.upgrade)."""
    found = version(conn)
    check_not_newer(found, migrations)
    if found == latest(migrations):
        # The usual case: no lock and no DDL, so a role that may not create tables can open
        # a database migrated by another one.
        return []
    applied: list[int] = []
    with conn.transaction():
        if schema is None:
            row = conn.execute("SELECT current_schema()").fetchone()
            target = row[0] if row else None
            if target is None:
                msg = (
                    "no schema to create tarry's tables in: the search_path names none that exists"
                )
                raise SnapshotError(msg)
        else:
            target = schema
        # Held until commit: a second upgrader waits here, then finds the work done.
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s::integer, hashtext(%s))", (_LOCK_CLASS, target)
        )
        if schema is not None:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tarry_schema ("
            "version integer PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        found = version(conn)  # again: another upgrader may have got the lock first
        check_not_newer(found, migrations)
        for migration in sorted(migrations, key=lambda m: m.version):
            if migration.version <= found:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            if migration.then is not None:
                migration.then(conn)
            conn.execute(
                "INSERT INTO tarry_schema (version, description) VALUES (%s, %s)",
                (migration.version, migration.description),
            )
            applied.append(migration.version)
    return applied
