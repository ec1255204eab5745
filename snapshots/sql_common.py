"""What SQLiteStore and PostgresStore share, written once: rows, `list`, `prune`, token checks.

The columns of a session and the conversion of its row to and from a SessionRecord (and of wait
and message rows to their records), the statement of `list`, the selection of `prune`, and what
`consume_tokens` makes of the tokens it found. Each store keeps its own statements where they
differ on purpose (SQLite's numbered parameters and index hints, PostgreSQL's one-statement
writes); what is here takes the few differences as arguments: the placeholder, the table, and
how a time is kept (SQLite: integer microseconds since the epoch, UTC; PostgreSQL: timestamptz).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.mail import MailRecord
from tarry.snapshots.records import SessionRecord, WaitRecord, decode_path
from tarry.snapshots.store import ENDED, refusals

# -- rows ----------------------------------------------------------------------------------------

#: The columns a record writes, in row order. `stop` is read with every record (last, after
#: these) but written only by request_stop (and cleared by a save that ends the run, or a
#: token's use): a record's own `stop` is never written.
NAMES = (
    "session_id", "flow", "status", "state", "version", "fingerprint", "flow_version", "token",
    "wake_at", "lease_owner", "lease_until", "created_at", "updated_at", "meta", "durability",
)  # fmt: skip
COLUMNS = ", ".join(NAMES)
#: The columns of a wait and of a message, in the order `Rows.wait` and `Rows.message` read them.
WAIT_COLUMNS = "token, session_id, path, kind, key, wake_at, reason, payload"
MAIL_COLUMNS = "id, key, value, at, target"


def select_sessions(table: str, *, state: str = "state") -> str:
    """The SELECT of whole records from `table`; `state`: what stands in the state's place (a
    listing reads no state: an empty blob there)."""
    return (
        "SELECT " + ", ".join(state if n == "state" else n for n in NAMES) + f", stop FROM {table}"
    )


#: How `dumps` writes None and an empty map (most records' flow_version and meta).
_NIL, _EMPTY_MAP = b"\xc0", b"\x80"


def _dumps(value: Any) -> bytes:
    # Most records have no flow version and no meta: those need no encoder call.
    if value is None:
        return _NIL
    if type(value) is dict and not value:
        return _EMPTY_MAP
    return dumps(value)


def _loads(blob: bytes) -> Any:
    if blob == _NIL:
        return None
    if blob == _EMPTY_MAP:
        return {}
    return loads(blob)


@attrs.frozen
class Rows:
    """A SessionRecord as a sessions row (NAMES order) and back, and the records of wait and
    message rows, for a store that keeps a time as `time(at)` gives it and reads it back with
    `datetime(kept)`."""

    time: Callable[[dt.datetime], Any]
    datetime: Callable[[Any], dt.datetime]

    def session_row(self, record: SessionRecord, *, version: int) -> tuple[Any, ...]:
        time = self.time
        wake_at, lease_until = record.wake_at, record.lease_until
        return (
            record.session_id,
            record.flow,
            record.status,
            bytes(record.state),
            version,
            record.fingerprint,
            _dumps(record.flow_version),
            record.token,
            None if wake_at is None else time(wake_at),
            record.lease_owner,
            None if lease_until is None else time(lease_until),
            time(record.created_at),
            time(record.updated_at),
            _dumps(record.meta),
            record.durability,
        )

    def session(self, row: Sequence[Any]) -> SessionRecord:
        """The record of a row read with `select_sessions`: NAMES, then `stop`."""
        (sid, flow, status, state, version, fingerprint, flow_version, token, wake_at,
         lease_owner, lease_until, created_at, updated_at, meta, durability,
         stop) = row  # fmt: skip
        datetime = self.datetime
        return SessionRecord(
            session_id=sid,
            flow=flow,
            status=status,
            state=bytes(state),
            version=version,
            fingerprint=fingerprint,
            flow_version=_loads(flow_version),
            token=token,
            wake_at=None if wake_at is None else datetime(wake_at),
            lease_owner=lease_owner,
            lease_until=None if lease_until is None else datetime(lease_until),
            created_at=datetime(created_at),
            updated_at=datetime(updated_at),
            meta=_loads(meta),
            durability=durability,
            stop=stop,
        )

    def wait(self, row: Sequence[Any]) -> WaitRecord:
        """The record of a row of WAIT_COLUMNS (records.wait_records reads a page of them)."""
        token, sid, path, kind, key, wake_at, reason, payload = row
        wake_at = None if wake_at is None else self.datetime(wake_at)
        return WaitRecord(
            token, sid, decode_path(bytes(path)), kind, key, wake_at, reason, bytes(payload)
        )

    def message(self, row: Sequence[Any]) -> MailRecord:
        """The record of a row of MAIL_COLUMNS."""
        mid, key, value, at, target = row
        return MailRecord(int(mid), key, bytes(value), self.datetime(at), target)


# -- list ----------------------------------------------------------------------------------------


@attrs.frozen
class Listing:
    """How a SQL store answers `list`: `select`, its SELECT of records without their state;
    `mark`, its placeholder; `time(at)`, a time as it keeps it; `search`, its test of a session
    id prefix or a flow substring, each of whose placeholders takes the `search` argument."""

    select: str
    mark: str
    time: Callable[[dt.datetime], Any]
    search: str

    def sql(
        self,
        *,
        status: str | None,
        flow: str | None,
        limit: int,
        offset: int,
        before: tuple[dt.datetime, str] | None,
        since: dt.datetime | None,
        until: dt.datetime | None,
        search: str | None,
    ) -> tuple[str, list[Any]]:
        """The statement and its arguments, newest first (by `created_at`, then id). Only the
        filters given go into the WHERE clause, so the database can use its index."""
        mark, time = self.mark, self.time
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            where.append(f"status = {mark}")
            args.append(status)
        if flow is not None:
            where.append(f"flow = {mark}")
            args.append(flow)
        if before is not None:
            where.append(f"(created_at, session_id) < ({mark}, {mark})")
            args += (time(before[0]), before[1])
        if since is not None:
            where.append(f"created_at >= {mark}")
            args.append(time(since))
        if until is not None:
            where.append(f"created_at < {mark}")
            args.append(time(until))
        if search is not None:
            where.append(self.search)
            args += (search,) * self.search.count(mark)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        sql = (
            f"{self.select} {clause}ORDER BY created_at DESC, session_id DESC "
            f"LIMIT {mark} OFFSET {mark}"
        )
        return sql, [*args, limit, offset]


# -- prune ---------------------------------------------------------------------------------------

#: A row of an ended session: the condition of the partial index of ended sessions (by last
#: update) that `prune` walks, in both stores. Neither running nor paused, rather than an IN
#: list: SQLite tests a partial index's condition on every UPDATE of the row (every save), and
#: an IN list costs a temporary table each time; this costs two comparisons.
ENDED_ROW = "status <> 'running' AND status <> 'paused'"


def prunable(statuses: Sequence[str]) -> list[str]:
    """The ended statuses among `statuses` (none: there is nothing to prune)."""
    return [s for s in ENDED if s in statuses]


def prune_sql(table: str, *, statuses: str, before: str, now: str, limit: str) -> tuple[str, str]:
    """The count of the sessions `prune` may delete (see SessionStore.prune), and the ids of
    its next batch, oldest update first. `table`: the FROM clause's sessions table; the others
    the SQL of the status test (of `prunable` statuses) and of the placeholders."""
    where = (
        f"{ENDED_ROW} AND status {statuses} AND updated_at < {before} "
        f"AND (lease_until IS NULL OR lease_until <= {now})"
    )
    return (
        f"SELECT count(*) FROM {table} WHERE {where}",
        f"SELECT session_id FROM {table} WHERE {where} ORDER BY updated_at, session_id "
        f"LIMIT {limit}",
    )


# -- consume_tokens ------------------------------------------------------------------------------


def check_tokens(
    tokens: Sequence[str], found: Iterable[Sequence[Any]]
) -> tuple[dict[str, str], list[str]]:
    """What `consume_tokens` makes of the rows (token, session id, used) a store found of
    `tokens`: the tokens it refuses and why (see store.refusals), and when it refuses none, the
    sessions they belong to, each once, in the order of `tokens`."""
    sessions: dict[str, str] = {}
    used: dict[str, bool] = {}
    for token, sid, flag in found:
        sessions[token] = sid
        used[token] = bool(flag)
    refused = refusals(tokens, used)
    if refused:
        return refused, []
    return {}, list(dict.fromkeys(sessions[token] for token in tokens))
