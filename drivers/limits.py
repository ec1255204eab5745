"""Limits and argument checks the Runtime's method families share (a leaf: imports no family)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument
from tarry.engine.state.records import STATUSES

if TYPE_CHECKING:
    import logging

DURABILITY = ("pause", "step")
#: Default bounds (bytes, encoded). Generous for real work, such as a ForEach whose 10,000
#: results of a few KiB each become one output, yet far below what a reader accepts.
MAX_VALUE_BYTES = 32 * 1024 * 1024
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024
#: What a failed session's snapshot may hold beyond `max_snapshot_bytes`: its error, whose
#: message and traceback are cut to engine.failure.MAX_ERROR_TEXT characters each.
ERROR_ALLOWANCE = 1024 * 1024
#: Longest caller-chosen session id.
MAX_SESSION_ID = 256


def log() -> logging.Logger:
    """The "tarry" logger; the logging module is loaded when something is first logged."""
    import logging

    return logging.getLogger("tarry")


def valid_session_id(value: Any) -> bool:
    """A str a store can hold as a session id: non-empty, not too long, valid UTF-8."""
    if type(value) is not str or not value or len(value) > MAX_SESSION_ID:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def positive_int(value: Any, name: str) -> int:
    if type(value) is not int or value <= 0:
        msg = f"{name} must be a positive int of bytes (got {value!r})"
        raise InvalidArgument(msg)
    return value


def check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        msg = f"limit must be an int >= 1 (got {describe(limit)})"
        raise InvalidArgument(msg)


def check_filters(status: Any, flow: Any) -> None:
    if status is not None and status not in STATUSES:
        msg = f"status must be one of {STATUSES} (got {describe(status)})"
        raise InvalidArgument(msg)
    if flow is not None and not isinstance(flow, str):
        msg = f"flow must be a flow name or a tarry.Flow (got {describe(flow)})"
        raise InvalidArgument(msg)


#: Longest actor name recorded in an event.
MAX_ACTOR = 256


def check_actor(actor: Any) -> None:
    """`actor=`: who asks (a login name, an OS user), recorded in the event the call causes."""
    if actor is None:
        return
    if type(actor) is not str or not actor.strip() or len(actor) > MAX_ACTOR:
        msg = (
            f"actor must be None or a non-empty str of at most {MAX_ACTOR} characters "
            f"(got {describe(actor)})"
        )
        raise InvalidArgument(msg)


def check_period(since: Any, until: Any) -> None:
    """`since`/`until`: timezone-aware datetimes (or None), since before until."""
    import datetime as dt

    for name, value in (("since", since), ("until", until)):
        if value is not None and (not isinstance(value, dt.datetime) or value.utcoffset() is None):
            msg = f"{name} must be None or a timezone-aware datetime (got {describe(value)})"
            raise InvalidArgument(msg)
    if since is not None and until is not None and until < since:
        msg = (
            f"until must not be before since (got since={since.isoformat()}, "
            f"until={until.isoformat()})"
        )
        raise InvalidArgument(msg)


#: How long a message stays queued on a key nothing takes it from (`Runtime(mail_ttl=)`).
MAIL_TTL = timedelta(days=30)
