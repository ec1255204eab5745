"""What a drive records when its run pauses: a `run.paused` event and a wait (a token of its
own, a row for polls and deliveries) for each wait that began."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tarry.drivers.drive.outcome import all_pauses
from tarry.engine.errors import NotSerializable
from tarry.engine.failure import fail
from tarry.engine.signals import Pause
from tarry.engine.state import events as ev
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.records import WaitRecord

if TYPE_CHECKING:
    from tarry.drivers.drive.drive import Drive


def old_token(drive: Drive) -> str:
    """The token the session keeps when it pauses again on waits of an earlier drive
    only: the first of theirs (or a new one for a run that failed instead)."""
    if drive.ex.state.status == "paused":
        for wait in drive.core.store.waits(drive.ex.session_id):
            return wait.token
    return drive.core.tokens.new_key()


def record_pauses(drive: Drive, signals: tuple[Pause, ...]) -> list[WaitRecord]:
    """Record each wait that began (`run.paused`), each with a token of its own; with none
    (the waits left began in an earlier drive), the session pauses again on its first.
    A payload that cannot be stored fails the run there: no wait is then recorded."""
    ex = drive.ex
    core = drive.core
    waits = []
    for signal in signals:
        data: dict[str, Any] = {"kind": signal.kind, "reason": signal.reason}
        if signal.payload is not None:
            data["payload"] = signal.payload
        if signal.wake_at is not None:
            data["wake_at"] = signal.wake_at
        if signal.expires_at is not None:
            data["expires_at"] = signal.expires_at
        if not signal.awaits_value:
            data["awaits_value"] = False
        if signal.key is not None:
            data["key"] = signal.key
        if signal.on_timeout is not None:
            data["on_timeout"] = signal.on_timeout
        try:
            core.check(signal.payload, "/".join(map(str, signal.path)) + ".payload")
        except NotSerializable as exc:
            drive._fail(fail(ex, signal.path, exc).error)
            return []
        ex.emit(ev.RUN_PAUSED, signal.path, data)
        waits.append(
            WaitRecord(
                token=core.tokens.new_key(),
                session_id=ex.session_id,
                path=signal.path,
                kind=signal.kind,
                key=signal.key,
                wake_at=signal.wake_at or signal.expires_at,
                reason=signal.reason,
                payload=b"" if signal.payload is None else dumps(signal.payload),
            )
        )
    if not signals:
        first = all_pauses(ex.state)[0]
        data = {"kind": first.kind, "reason": first.reason}
        for name in ("payload", "wake_at", "expires_at", "key", "on_timeout"):
            if getattr(first, name) is not None:
                data[name] = getattr(first, name)
        if not first.awaits_value:
            data["awaits_value"] = False
        ex.emit(ev.RUN_PAUSED, first.path, data)
    return waits
