"""JSON in and out of the HTTP API: request bodies and query parameters read strictly, answers
and errors written as JSON, and the HTTP status of each error by what the caller can do."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from tarry.drivers.reading.jsonable import dumps, session_to_dict
from tarry.drivers.reading.views import STALE, SessionView
from tarry.engine.errors import (
    ConcurrentUpdate,
    FlowMismatch,
    InvalidResumeValue,
    NotSerializable,
    SessionExists,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownSession,
    UnknownToken,
)

#: The largest request body read (a resume value or a skip output), in bytes.
MAX_BODY = 1 << 20
#: The largest integer a query parameter takes (PostgreSQL's and SQLite's bigint).
MAX_QUERY_INT = 2**63 - 1

#: HTTP status by what the caller can do about the error.
STATUS: list[tuple[tuple[type[Exception], ...], int]] = [
    ((UnknownSession, UnknownToken), 404),
    (
        (
            TokenAlreadyUsed,
            SessionNotResumable,
            ConcurrentUpdate,
            SessionExists,
            FlowMismatch,
            UnknownFlow,
        ),
        409,
    ),
    ((InvalidResumeValue, NotSerializable), 422),
    ((ValueError,), 400),  # InvalidArgument, and any other value a method refused
]


class BadRequest(Exception):
    """The request itself is malformed: 400 with `error` as the type."""

    def __init__(self, error: str, message: str) -> None:
        self.error = error
        self.message = message
        super().__init__(message)


# --- JSON in and out ---------------------------------------------------------------------------


def session_json(view: SessionView, now: datetime | None = None) -> dict[str, Any]:
    """A session for the API: where it stands, and what may be done with it next. The token is
    included: only callers who passed the guard get here. At `now`, a running session whose
    lease lapsed shows as "stale" (its process died; `recover` takes it over)."""
    data = session_to_dict(view)
    data["lease_until"] = view.lease_until
    stale = now is not None and view.stale(now)
    if stale:
        data["status"] = STALE
    token, status = data["token"], data["status"]
    # A failed session whose cleanup ran is over: its body does not run again.
    cleaned = status == "failed" and data["ending"] is not None
    data["actions"] = {
        "resume": token is not None and status in ("paused", "failed") and not cleaned,
        "cancel": status in ("paused", "failed", "running", STALE),
        "abort": status in ("running", STALE),
        "recover": stale,
        "skip": token is not None and status == "failed" and not cleaned,
    }
    data["children"] = children_json(view, data["children"])
    # The diagram of the very version it runs (GET it: 404 when this server lacks it).
    data["flow_structure_url"] = (
        f"/api/flows/{quote(view.flow, safe='')}?fingerprint={quote(view.fingerprint, safe='')}"
    )
    return data


#: Children listed one by one in a session's JSON (all are counted by status).
CHILDREN_LISTED = 100

#: Children read from the store at a time to count them by status.
_CHILDREN_PAGE = 500


def children_json(view: SessionView, ids: list[str]) -> dict[str, Any]:
    """A session's children for the API: how many, how many of each status, and the first
    CHILDREN_LISTED with their status (in the order the session started them)."""
    store = view._store  # noqa: SLF001 - the view's own store
    statuses: dict[str, str] = {}
    for start in range(0, len(ids), _CHILDREN_PAGE):
        chunk = ids[start : start + _CHILDREN_PAGE]
        found = store.load_many(chunk)
        statuses.update({cid: found[cid].status for cid in chunk if cid in found})
    by_status: dict[str, int] = {}
    for status in statuses.values():
        by_status[status] = by_status.get(status, 0) + 1
    listed = [
        {"session_id": cid, "status": statuses.get(cid, "pruned")} for cid in ids[:CHILDREN_LISTED]
    ]
    return {"total": len(ids), "by_status": by_status, "listed": listed}


async def read_body(request: Request, fields: set[str]) -> dict[str, Any]:
    """The JSON object in the body (an empty body is `{}`), with only the `fields` named."""
    data = await read_json(request)
    return body_object({} if data is None else data, fields)


def body_object(data: Any, fields: set[str], where: str = "the request body") -> dict[str, Any]:
    """`data` if it is a JSON object with only the `fields` named; else BadRequest."""
    if not isinstance(data, dict):
        example = ", ".join(f'"{f}": ...' for f in sorted(fields)) or ""
        raise BadRequest(
            "BadRequest", f"{where} must be a JSON object {{{example}}} (got {type(data).__name__})"
        )
    unknown = sorted(set(data) - fields)
    if unknown:
        expected = ", ".join(sorted(fields)) or "nothing"
        raise BadRequest(
            "BadRequest", f"unknown field {unknown[0]!r} in {where} (expected: {expected})"
        )
    return data


async def read_json(request: Request) -> Any:
    """The JSON value in the body, read strictly (None for an empty body)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest("BadRequest", f"the request body is larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except RecursionError as exc:
        raise BadRequest(
            "MalformedJSON",
            "the request body nests arrays or objects too deeply "
            f"(at most about {sys.getrecursionlimit()} levels)",
        ) from exc
    except UnicodeDecodeError as exc:
        raise BadRequest(
            "MalformedJSON",
            f"the request body is not valid JSON: it is not UTF-8 "
            f"({exc.reason} at byte {exc.start})",
        ) from exc
    except json.JSONDecodeError as exc:
        raise BadRequest(
            "MalformedJSON",
            f"the request body is not valid JSON: {exc.msg} at "
            f"line {exc.lineno} column {exc.colno}",
        ) from exc
    except ValueError as exc:
        raise BadRequest("MalformedJSON", f"the request body is not valid JSON: {exc}") from exc
    where = _nul_at(value)
    if where is not None:
        raise BadRequest(
            "BadRequest",
            f"the request body holds a NUL character (\\u0000) in a string at {where}: "
            f"refused (no session id, flow, key or stored text may hold one)",
        )
    return value


def _nul_at(value: Any) -> str | None:
    """Where in a decoded JSON value a string (or an object's key) holds NUL, as a JSON
    pointer; None when none does. Iterative: a body nests as deep as json allows."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, at = stack.pop()
        kind = type(item)
        if kind is str:
            if "\x00" in item:
                return at or "/"
        elif kind is list:
            stack.extend((v, f"{at}/{i}") for i, v in enumerate(item))
        elif kind is dict:
            for k, v in item.items():
                if "\x00" in k:
                    return f"{at}/{k!r}"
                stack.append((v, f"{at}/{k}"))
    return None


def _no_constant(name: str) -> Any:
    msg = f"{name} is not a JSON number"
    raise ValueError(msg)


def _finite(text: str) -> float:
    # 1e400 parses as inf, which no JSON answer could hold: refused like Infinity itself.
    value = float(text)
    if not math.isfinite(value):
        msg = f"{text[:40]} is too large for a JSON number"
        raise ValueError(msg)
    return value


def int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    """`?name=` as an int from `low` to `high` (or to MAX_QUERY_INT): ASCII digits with an
    optional sign, nothing else (no `²`, no `1_0`, no spaces); `default` when absent or empty."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    high_ = MAX_QUERY_INT if high is None else high
    digits = text[1:] if text[:1] in "+-" else text
    value = int(text) if digits.isascii() and digits.isdigit() and len(digits) <= 19 else None
    if value is None or value < low or value > high_:
        bounds = f"from {low} to {high_}"
        raise BadRequest("BadRequest", f"?{name}= must be an int {bounds} (got {text!r})")
    return value


def text_param(request: Request, name: str, max_chars: int) -> str | None:
    """A text query parameter (a key, a prefix of keys): None when absent or empty; else at
    most `max_chars` characters without NUL (which no store column holds), or BadRequest."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if len(text) > max_chars or "\x00" in text:
        shown = repr(text) if len(text) <= 80 else f"{len(text)} characters"
        raise BadRequest(
            "BadRequest",
            f"?{name}= must be text of at most {max_chars} characters, without NUL (got {shown})",
        )
    return text


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(value), status, headers, media_type="application/json")


def error_response(
    status: int, error: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    return json_response({"error": error, "message": message}, status, headers)


async def on_error(request: Request, exc: Exception) -> Response:
    status = next((code for kinds, code in STATUS if isinstance(exc, kinds)), 500)
    return error_response(status, type(exc).__name__, str(exc))


async def on_crash(request: Request, exc: Exception) -> Response:
    """Anything no other handler took: a JSON 500 (the server logs the traceback), never a
    plain-text page. A database's refusal of a value (psycopg's DataError: a value out of a
    column's range) is the caller's: 400."""
    if any(cls.__name__ == "DataError" for cls in type(exc).__mro__):
        return error_response(400, "BadRequest", f"the store refused a value: {exc}")
    return error_response(500, "InternalError", f"{type(exc).__name__}: the server failed")


async def on_bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    return error_response(400, exc.error, exc.message)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    names = {404: "NotFound", 405: "MethodNotAllowed"}
    error = names.get(exc.status_code, "HTTPError")
    message = (
        f"no route {request.method} {request.url.path}"
        if exc.status_code in names
        else str(exc.detail)
    )
    return error_response(exc.status_code, error, message, dict(exc.headers or {}))
