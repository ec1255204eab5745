"""Outcomes: what `run` and `resume` return."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs
from tarry.engine.state import ErrorInfo, SessionState

OK, PAUSED, ERROR = "ok", "paused", "error"


@attrs.frozen
class PauseInfo:
    """Why a run waits. `partial` holds the outputs of the flow's completed top-level elements."""

    kind: str
    reason: str
    path: tuple[Any, ...]
    payload: Any = None
    partial: dict[str, Any] = attrs.field(factory=dict)
    wake_at: datetime | None = None
    expires_at: datetime | None = None


@attrs.frozen
class Outcome:
    """`ok` (with `output`), `paused` (with `token` and `pause`) or `error` (with `error`, and a
    `token` when resuming may help). A cancelled session's outcome is an error of type
    `"cancelled"`."""

    status: str
    session_id: str
    output: Any = None
    token: str | None = None
    pause: PauseInfo | None = None
    error: ErrorInfo | None = None
    meta: dict[str, Any] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def paused(self) -> bool:
        return self.status == PAUSED

    @property
    def failed(self) -> bool:
        return self.status == ERROR


CANCELLED = ErrorInfo(type="cancelled", message="the session was cancelled", retryable=False)


def outcome_of(
    state: SessionState, token: str | None, meta: dict[str, Any] | None = None
) -> Outcome:
    """The outcome a session's state stands for; `meta` says how its drive began (a paused
    outcome's own `pause_kind` takes precedence over the kind it resumed)."""
    status = state.status
    sid = state.session_id
    meta = dict(meta or {})
    if status == "completed":
        return Outcome(OK, sid, output=state.output, meta=meta)
    if status == "paused" and state.pause is not None:
        p = state.pause
        info = PauseInfo(
            kind=p.kind,
            reason=p.reason,
            path=p.path,
            payload=p.payload,
            partial=dict(state.outputs),
            wake_at=p.wake_at,
            expires_at=p.expires_at,
        )
        meta["pause_kind"] = p.kind
        return Outcome(PAUSED, sid, token=token, pause=info, meta=meta)
    if status == "failed" and state.error is not None:
        return Outcome(ERROR, sid, token=token, error=state.error, meta=meta)
    if status == "cancelled":
        return Outcome(ERROR, sid, error=CANCELLED, meta=meta)
    return Outcome(status, sid, meta=meta)
