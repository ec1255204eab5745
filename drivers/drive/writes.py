"""What a drive writes: the session's next record, and the error of a snapshot too large."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from tarry.engine.errors import SnapshotTooLarge
from tarry.engine.state.records import ErrorInfo, SessionState
from tarry.snapshots.records import SessionRecord

if TYPE_CHECKING:
    from tarry.drivers.drive.drive import Drive


def next_record(
    drive: Drive,
    blob: bytes,
    token: str | None,
    wake: datetime | None,
    owner: str | None,
    until: datetime | None,
) -> SessionRecord:
    """The session's record as its next write leaves it: the state `blob`, the `token`
    it keeps, when it wakes, and its lease (an owner while it runs, none once it stops)."""
    rec = drive.record
    return SessionRecord(
        session_id=rec.session_id,
        flow=rec.flow,
        status=drive.ex.state.status,
        state=blob,
        version=rec.version,
        fingerprint=drive.flow.fingerprint,
        flow_version=drive.flow.version,
        token=token,
        wake_at=wake,
        lease_owner=owner,
        lease_until=until,
        created_at=rec.created_at,
        updated_at=drive.core.clock.now(),
        meta=rec.meta,
        durability=rec.durability,
    )


def too_large(state: SessionState, size: int, limit: int) -> ErrorInfo:
    """The failure of a session whose snapshot (`size` bytes) is over `limit`."""
    error = SnapshotTooLarge(state.session_id, size, limit)
    path = state.pause.path if state.pause is not None else ()
    return ErrorInfo(type="SnapshotTooLarge", message=str(error), path=path, retryable=False)
