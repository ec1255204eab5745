"""Times in query strings: `?since=` and `?until=` as ISO 8601 or epoch seconds."""

from __future__ import annotations

import datetime as dt
import math

from starlette.requests import Request
from tarry.drivers.http.bodies import BadRequest

#: The latest epoch second taken: 9999-12-31T23:59:59Z, the last second a datetime holds.
MAX_EPOCH = 253402300799


def time_param(request: Request, name: str) -> dt.datetime | None:
    """`?name=` as an aware datetime: ISO 8601 (`2026-11-24T08:00:00Z`; no offset = UTC) or
    seconds since the epoch (`1795000000`, `1795000000.5`). None when absent; BadRequest naming
    the parameter otherwise."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    try:
        if seconds is not None:
            if not (math.isfinite(seconds) and 0 <= seconds <= MAX_EPOCH):
                raise ValueError(text)
            return dt.datetime.fromtimestamp(seconds, dt.UTC)
        # RFC 3339 allows a lowercase `t` and `z`, which fromisoformat does not take.
        value = dt.datetime.fromisoformat(text.upper())
    except (ValueError, OverflowError, OSError):
        raise BadRequest(
            "BadRequest",
            f"?{name}= must be an ISO 8601 time "
            f"(2026-11-24T08:00:00Z) or epoch seconds "
            f"(got {text[:60]!r})",
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def period(request: Request) -> tuple[dt.datetime | None, dt.datetime | None]:
    since, until = time_param(request, "since"), time_param(request, "until")
    if since is not None and until is not None and until < since:
        raise BadRequest(
            "BadRequest",
            f"?until= must not be before ?since= (got since="
            f"{since.isoformat()}, until={until.isoformat()})",
        )
    return since, until
