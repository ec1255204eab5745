"""SQLiteStore's row conversion: a SessionRecord to a sessions row and back.

Datetimes are integer microseconds since the epoch (UTC): they compare correctly in SQL, which
ISO strings with mixed offsets would not.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.records import _EPOCH, SessionRecord, _micros

#: How `dumps` writes None and an empty map (most records' flow_version and meta).
_NIL, _EMPTY_MAP = b"\xc0", b"\x80"


def _time(at: dt.datetime | None) -> int | None:
    return None if at is None else _micros(at)


def _datetime(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def _maybe_datetime(micros: int | None) -> dt.datetime | None:
    return None if micros is None else _datetime(micros)


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


def _row(record: SessionRecord, *, version: int) -> tuple[Any, ...]:
    """The record as a sessions row, in _NAMES order."""
    return (
        record.session_id,
        record.flow,
        record.status,
        bytes(record.state),
        version,
        record.fingerprint,
        _dumps(record.flow_version),
        record.token,
        _time(record.wake_at),
        record.lease_owner,
        _time(record.lease_until),
        _micros(record.created_at),
        _micros(record.updated_at),
        _dumps(record.meta),
        record.durability,
    )


def _record(row: tuple[Any, ...]) -> SessionRecord:
    (sid, flow, status, state, version, fingerprint, flow_version, token, wake_at,
     lease_owner, lease_until, created_at, updated_at, meta, durability, stop) = row  # fmt: skip
    return SessionRecord(
        session_id=sid,
        flow=flow,
        status=status,
        state=state,
        version=version,
        fingerprint=fingerprint,
        flow_version=_loads(flow_version),
        token=token,
        wake_at=_maybe_datetime(wake_at),
        lease_owner=lease_owner,
        lease_until=_maybe_datetime(lease_until),
        created_at=_datetime(created_at),
        updated_at=_datetime(updated_at),
        meta=_loads(meta),
        durability=durability,
        stop=stop,
    )
