"""The OpenAPI 3.1 description of the HTTP API, served at `GET /api/openapi.json`.

Written by hand, as data: the routes, their parameters, bodies, answers and errors. A test
checks that every `/api` route of the app is described here (and nothing else), that the
document validates, and that each documented GET answers in the documented shape.
"""

from __future__ import annotations

import copy
from typing import Any

from tarry.drivers.http.openapi_schemas import (
    _ANY,
    _BOOL,
    _KEY,
    _KEY_TEXT,
    _STR,
    FLOW,
    SCHEMAS,
    SID,
    SINCE,
    STATUS_ENUM,
    UNTIL,
    _error,
    _json,
    _obj,
    _query,
    _ref,
)

_UNAUTHORIZED = _error(
    "no valid token or login cookie (or a non-loopback client of a server without users)"
)
_NOT_FOUND = _error("no such session (UnknownSession) or token (UnknownToken)")
_BAD = _error("a malformed body or parameter (BadRequest, MalformedJSON, InvalidArgument)")
_CONFLICT = _error(
    "the session is not in a state that allows it (SessionNotResumable, "
    "TokenAlreadyUsed, ConcurrentUpdate, FlowMismatch, UnknownFlow)"
)
_REFUSED = _error(
    "the value does not fit what the session waits for (InvalidResumeValue, "
    "NotSerializable); nothing changed"
)
_SSE = {
    "description": "server-sent events: one message per event (`id:` its seq, `data:` the "
    "event as JSON)",
    "content": {"text/event-stream": {"schema": _STR}},
}


def _get(
    summary: str,
    answer: dict[str, Any],
    parameters: list[dict[str, Any]] = (),  # type: ignore[assignment]
    **errors: dict[str, Any],
) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": list(parameters),
            "responses": {"200": answer, "401": _UNAUTHORIZED, **errors},
        }
    }


def _post(
    summary: str,
    body: dict[str, Any] | None,
    responses: dict[str, Any],
    parameters: list[dict[str, Any]] = (),
) -> dict[str, Any]:  # type: ignore[assignment]
    operation: dict[str, Any] = {
        "summary": summary,
        "parameters": list(parameters),
        "responses": {**responses, "401": _UNAUTHORIZED, "403": _error("a cross-origin request")},
    }
    if body is not None:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": body}},
        }
    return {"post": operation}


def _delete(
    summary: str, responses: dict[str, Any], parameters: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "delete": {
            "summary": summary,
            "parameters": parameters,
            "responses": {
                **responses,
                "401": _UNAUTHORIZED,
                "403": _error("a cross-origin request"),
            },
        }
    }


PATHS: dict[str, Any] = {
    "/api/me": _get("The logged-in user", _json(_ref("Me"), "who this request is")),
    "/api/openapi.json": _get("This document", _json({"type": "object"}, "OpenAPI 3.1")),
    "/api/flows": _get(
        "The flows this server can start",
        _json(_ref("FlowList"), "every registered flow and version"),
    ),
    "/api/flows/{name}": _get(
        "One flow's structure, for a diagram",
        _json(_ref("FlowStructure"), "the newest registered version, or the one asked for"),
        [
            {"name": "name", "in": "path", "required": True, "schema": _STR},
            _query("version", _STR, "a registered version of it"),
            _query("fingerprint", _STR, "the version with this fingerprint (a session's own)"),
        ],
        **{"404": _error("no flow of that name (and version) is registered (UnknownFlow)")},
    ),
    "/api/sessions": {
        **_get(
            "Sessions, newest first, a page at a time",
            _json(_ref("SessionsPage"), "one page"),
            [
                _query(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
                    "sessions per page",
                ),
                _query("cursor", _STR, "the next_cursor of the previous page"),
                _query(
                    "offset",
                    {"type": "integer", "minimum": 0},
                    "skip this many (old style; with status and flow only)",
                ),
                _query(
                    "status",
                    {"enum": STATUS_ENUM},
                    "only sessions in this status (stale: running ones whose lease lapsed; "
                    "running: every session stored as running, live or stale); an empty "
                    "value is refused",
                    empty=False,
                ),
                FLOW,
                _query("q", _STR, "a session id prefix or a flow name substring"),
                SINCE,
                UNTIL,
            ],
            **{"400": _BAD},
        ),
        **_post(
            "Start a registered flow; it runs until it pauses or ends",
            _obj(
                ["flow"],
                {
                    "flow": {**_STR, "minLength": 1, "description": "a registered flow's name"},
                    "input": _ANY,
                    "session_id": {
                        **_STR,
                        "minLength": 1,
                        "maxLength": 256,
                        "description": "makes the start idempotent",
                    },
                    "version": {**_STR, "description": "a registered version of the flow"},
                },
                additionalProperties=False,
            ),
            {
                "201": _json(_ref("Outcome"), "started: its outcome"),
                "200": _json(
                    _ref("Session"),
                    "a session with this id was already started "
                    "with the same flow and input: that session",
                ),
                "400": _BAD,
                "404": _error("no such flow is registered (UnknownFlow)"),
                "409": _error(
                    "a session with this id exists with another flow or input (SessionExists)"
                ),
            },
        ),
    },
    "/api/sessions/{sid}": _get(
        "One session: where it stands and what may be done next",
        _json(_ref("Session"), "the session"),
        [SID],
        **{"404": _NOT_FOUND},
    ),
    "/api/sessions/{sid}/events": _get(
        "A page of the session's event log",
        _json(_ref("EventsPage"), "events with seq > after"),
        [
            SID,
            _query("after", {"type": "integer", "minimum": 0}, "the last seq already seen"),
            _query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}, "page size"),
        ],
        **{"404": _NOT_FOUND, "400": _BAD},
    ),
    "/api/sessions/{sid}/logs": _get(
        "A page of the log records captured inside the session's steps",
        _json(_ref("LogsPage"), "records with seq > after"),
        [
            SID,
            _query("level", _STR, "the lowest level shown (DEBUG, INFO, WARNING, ...)"),
            _query("after", {"type": "integer", "minimum": 0}, "the last seq already seen"),
            _query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}, "page size"),
        ],
        **{"404": _NOT_FOUND, "400": _BAD},
    ),
    "/api/sessions/{sid}/batches": _get(
        "The open provider batches (tarry.batches) that hold the session's waiting "
        "BatchRequests: provider id, status, request counts",
        _json(_ref("BatchList"), "oldest first"),
        [SID],
        **{"404": _NOT_FOUND},
    ),
    "/api/sessions/{sid}/events/stream": _get(
        "The session's events, then each new one as it is stored (SSE)",
        _SSE,
        [
            SID,
            _query(
                "after",
                {"type": "integer", "minimum": 0},
                "start after this seq (or the Last-Event-ID header)",
            ),
        ],
        **{"404": _NOT_FOUND, "400": _BAD},
    ),
    "/api/sessions/{sid}/replay": _get(
        "The session's stored events again, paced by their original gaps (SSE; ends with "
        "`event: end`)",
        _SSE,
        [
            SID,
            _query(
                "speed",
                {
                    "anyOf": [
                        {"type": "number", "minimum": 0, "maximum": 1_000_000},
                        {"const": "max"},
                    ],
                    "default": 10,
                },
                "playback speed: gaps are divided by it (each capped at 2 s); 0 or max: no delay",
            ),
            _query("after", {"type": "integer", "minimum": 0}, "start after this seq"),
        ],
        **{"404": _NOT_FOUND, "400": _BAD},
    ),
    "/api/sessions/{sid}/resume": _post(
        "Resume a paused (or failed) session by id; a Gate decision is made by the logged-in "
        "user (`by`)",
        _obj([], {"value": _ANY}, additionalProperties=False),
        {
            "200": _json(_ref("Outcome"), "the outcome once it pauses or ends"),
            "400": _BAD,
            "404": _NOT_FOUND,
            "409": _CONFLICT,
            "422": _REFUSED,
        },
        [SID],
    ),
    "/api/sessions/{sid}/skip": _post(
        "Record a failed session's failed step as done with `output`, and go on",
        _obj([], {"output": _ANY}, additionalProperties=False),
        {
            "200": _json(_ref("Outcome"), "the outcome"),
            "400": _BAD,
            "404": _NOT_FOUND,
            "409": _CONFLICT,
        },
        [SID],
    ),
    "/api/sessions/{sid}/fork": _post(
        "Start a new session from this one's state after event `at_seq` (or just before the "
        "element at path `at` first started) and run it from there; this one is not changed",
        {
            "type": "object",
            "properties": {
                "at_seq": {"type": "integer", "minimum": 1},
                "at": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": ["string", "integer"]},
                    "description": 'an element\'s path, e.g. ["tickets", 3, "triage"]',
                },
                "session_id": {**_STR, "description": "the new session's id (default: a new one)"},
            },
            "oneOf": [{"required": ["at_seq"]}, {"required": ["at"]}],
            "additionalProperties": False,
        },
        {
            "201": _json(_ref("Outcome"), "the new session's outcome once it pauses or ends"),
            "400": _BAD,
            "404": _NOT_FOUND,
            "409": _error(
                "a session with the new id exists (SessionExists), or the session's flow is "
                "not registered here or does not fit (UnknownFlow, FlowMismatch)"
            ),
        },
        [SID],
    ),
    "/api/sessions/{sid}/abort": _post(
        "Stop a running session at its next checkpoint, in whichever process runs it",
        _obj([], {"resumable": {**_BOOL, "default": True}}, additionalProperties=False),
        {"202": _json(_ref("AbortRequested"), "asked"), "400": _BAD, "404": _NOT_FOUND},
        [SID],
    ),
    "/api/sessions/{sid}/cancel": _post(
        "End a paused or failed session as cancelled; a running one is asked to stop",
        None,
        {
            "200": _json(_ref("Outcome"), "its outcome (status running: asked)"),
            "404": _NOT_FOUND,
            "409": _CONFLICT,
        },
        [SID],
    ),
    "/api/sessions/{sid}/recover": _post(
        "Take over a stale session (running, its lease lapsed: its process died)",
        None,
        {
            "200": _json(_ref("Outcome"), "its outcome once recovered"),
            "404": _NOT_FOUND,
            "409": _CONFLICT,
        },
        [SID],
    ),
    "/api/resume": _post(
        "Resume by token",
        _obj(["token"], {"token": _STR, "value": _ANY}, additionalProperties=False),
        {
            "200": _json(_ref("Outcome"), "the outcome"),
            "400": _BAD,
            "404": _NOT_FOUND,
            "409": _CONFLICT,
            "422": _REFUSED,
        },
    ),
    "/api/deliver": _post(
        "Deliver values to keyed waits (or keep them as mail)",
        {"oneOf": [_ref("Delivery"), {"type": "array", "items": _ref("Delivery")}]},
        {
            "200": _json(_ref("Delivered"), "the sessions resumed and the keys kept"),
            "400": _BAD,
            "409": _CONFLICT,
            "422": _REFUSED,
        },
    ),
    "/api/mail": _get(
        "The keys that hold queued messages (deliveries no Wait has taken yet), by key, a "
        "page at a time",
        _json(_ref("MailPage"), "one page"),
        [
            _query("prefix", _KEY_TEXT, "only keys that start with this text (no wildcards)"),
            _query(
                "after", _KEY_TEXT, "only keys after this one: the next_after of the page before"
            ),
            _query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                "keys per page",
            ),
        ],
        **{"400": _BAD},
    ),
    "/api/mail/{key}": _delete(
        "Drop the messages queued on a key (not one a Wait has already claimed)",
        {
            "200": _json(_ref("Discarded"), "how many were dropped (0 for a key without mail)"),
            "400": _error(
                "a key that is empty, longer than 512 characters or holds NUL "
                "(InvalidArgument), or a body other than none or {} (BadRequest)"
            ),
        },
        [
            {
                "name": "key",
                "in": "path",
                "required": True,
                "schema": _KEY,
                "description": "the key, percent-encoded (its slashes may be sent as they are)",
            }
        ],
    ),
    "/api/stats": _get(
        "Sessions by status, nodes, metrics (of a creation period)",
        _json(_ref("Stats"), "the figures"),
        [FLOW, SINCE, UNTIL],
        **{"400": _BAD},
    ),
    "/api/stats/timeline": _get(
        "Sessions created per time bucket, by their current status",
        _json(_ref("Timeline"), "the buckets, oldest first"),
        [
            FLOW,
            SINCE,
            UNTIL,
            _query(
                "buckets",
                {"type": "integer", "minimum": 1, "maximum": 500, "default": 24},
                "how many equal buckets",
            ),
        ],
        **{"400": _BAD},
    ),
    "/api/events/stream": _get(
        "Every session's new events (SSE)",
        _SSE,
        [_query("after", _STR, "the cursor to go on from (or the Last-Event-ID header)")],
    ),
}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (a fresh copy: callers may change it)."""
    return copy.deepcopy(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "tarry HTTP API",
                "version": "1",
                "description": (
                    "Start, watch, resume and stop tarry sessions. See docs/monitor.md. "
                    "An empty query parameter (`?flow=`) is the same as leaving it out, "
                    "except `status=`, which is refused. No string anywhere (path, query, "
                    "body) may hold NUL: 400. Query integers are at most 2^63-1. Every "
                    "path answers OPTIONS with 204 and `Allow`."
                ),
            },
            "servers": [{"url": "/"}],
            "security": [{"bearer": []}, {"cookie": []}],
            "paths": PATHS,
            "components": {
                "schemas": SCHEMAS,
                "securitySchemes": {
                    "bearer": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": "a user's token (--users, or --token: user admin)",
                    },
                    "cookie": {
                        "type": "apiKey",
                        "in": "cookie",
                        "name": "tarry_token",
                        "description": "set by POST /login for the page",
                    },
                },
            },
        }
    )
