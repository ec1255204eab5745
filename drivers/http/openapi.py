"""The OpenAPI 3.1 description of the HTTP API, served at `GET /api/openapi.json`.

Written by hand, as data: the routes, their parameters, bodies, answers and errors. A test
checks that every `/api` route of the app is described here (and nothing else), that the
document validates, and that each documented GET answers in the documented shape.
"""

from __future__ import annotations

import copy
from typing import Any

# --- building blocks -----------------------------------------------------------------------------


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _obj(required: list[str], properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties, **more}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_ANY: dict[str, Any] = {}
_TIME = {"type": "string", "format": "date-time"}
_NULLABLE_STR = {"type": ["string", "null"]}
_PATH = {"type": "array", "items": {"type": ["string", "integer"]}}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}

SID = {
    "name": "sid",
    "in": "path",
    "required": True,
    "schema": _STR,
    "description": "the session id",
}
TIME_PARAM = {"type": "string", "description": "ISO 8601 (no offset: UTC) or epoch seconds"}
SINCE = _query("since", TIME_PARAM, "only sessions created at this time or later")
UNTIL = _query("until", TIME_PARAM, "only sessions created before this time")
FLOW = _query("flow", _STR, "only sessions of this flow (its name)")
STATUS_ENUM = ["running", "paused", "completed", "failed", "cancelled"]

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        ["error", "message"],
        {
            "error": {**_STR, "description": "the error's type, e.g. UnknownSession"},
            "message": {**_STR, "description": "what was expected and what was found"},
        },
    ),
    "Pause": _obj(
        ["kind", "reason", "path"],
        {
            "kind": {"enum": ["human", "external", "system"]},
            "reason": _STR,
            "path": _PATH,
            "payload": _ANY,
            "partial": {"type": "object"},
            "wake_at": {"type": ["string", "null"]},
            "expires_at": {"type": ["string", "null"]},
            "token": _NULLABLE_STR,
        },
    ),
    "ErrorInfo": _obj(
        ["type", "message"],
        {
            "type": _STR,
            "message": _STR,
            "path": _PATH,
            "retryable": _BOOL,
            "attempts": _INT,
            "traceback": _NULLABLE_STR,
        },
    ),
    "Outcome": _obj(
        ["status", "session_id"],
        {
            "status": {"enum": ["ok", "paused", "error", "running"]},
            "session_id": _STR,
            "output": _ANY,
            "token": {**_NULLABLE_STR, "description": "the single-use token (paused, or failed)"},
            "pause": {"oneOf": [_ref("Pause"), {"type": "null"}]},
            "pauses": {"type": "array", "items": _ref("Pause")},
            "error": {"oneOf": [_ref("ErrorInfo"), {"type": "null"}]},
            "meta": {"type": "object"},
        },
    ),
    "SessionSummary": _obj(
        ["session_id", "flow", "status", "created_at", "updated_at"],
        {
            "session_id": _STR,
            "flow": _STR,
            "status": {"enum": STATUS_ENUM},
            "created_at": _TIME,
            "updated_at": _TIME,
            "wake_at": {"type": ["string", "null"]},
        },
    ),
    "SessionsPage": _obj(
        ["sessions", "next_cursor", "limit"],
        {
            "sessions": {"type": "array", "items": _ref("SessionSummary")},
            "next_cursor": {**_NULLABLE_STR, "description": "pass as ?cursor= for the next page"},
            "limit": _INT,
            "offset": _INT,
        },
    ),
    "Session": _obj(
        ["session_id", "flow", "status", "last_seq", "token", "actions", "flow_structure_url"],
        {
            "session_id": _STR,
            "flow": _STR,
            "status": {"enum": STATUS_ENUM},
            "created_at": _TIME,
            "updated_at": _TIME,
            "meta": {"type": "object"},
            "input": _ANY,
            "container_stack": {"type": "array"},
            "pause": _ANY,
            "error": _ANY,
            "outputs": {"type": "object"},
            "output": _ANY,
            "shared": {"type": "object"},
            "metrics": {"type": "object"},
            "last_seq": _INT,
            "token": _NULLABLE_STR,
            "actions": _obj(
                ["resume", "cancel", "abort", "skip"],
                {
                    "resume": _BOOL,
                    "cancel": _BOOL,
                    "abort": _BOOL,
                    "skip": _BOOL,
                },
            ),
            "flow_structure_url": {
                **_STR,
                "description": "GET it for the diagram of the flow version this session runs",
            },
        },
    ),
    "Event": _obj(
        ["seq", "type", "session_id", "at", "path", "data"],
        {
            "seq": _INT,
            "type": _STR,
            "session_id": _STR,
            "at": _TIME,
            "path": _PATH,
            "data": {"type": "object", "description": "control events carry `actor`: who did it"},
        },
    ),
    "EventsPage": _obj(
        ["session_id", "events", "last_seq", "more"],
        {
            "session_id": _STR,
            "events": {"type": "array", "items": _ref("Event")},
            "last_seq": _INT,
            "more": _BOOL,
        },
    ),
    "LogRecord": _obj(
        ["seq", "at", "level", "levelno", "logger", "message", "path"],
        {
            "seq": _INT,
            "at": _TIME,
            "level": _STR,
            "levelno": _INT,
            "logger": _STR,
            "message": _STR,
            "path": _PATH,
        },
    ),
    "LogsPage": _obj(
        ["session_id", "logs", "last_seq", "more", "dropped"],
        {
            "session_id": _STR,
            "logs": {"type": "array", "items": _ref("LogRecord")},
            "last_seq": _INT,
            "more": _BOOL,
            "dropped": _INT,
        },
    ),
    "NodeStats": _obj(
        ["executions", "failures", "mean_seconds"],
        {
            "executions": _INT,
            "failures": _INT,
            "mean_seconds": _NUM,
            "metrics": {"type": "object", "additionalProperties": _NUM},
        },
    ),
    "Stats": _obj(
        ["sessions", "by_status", "nodes", "metrics"],
        {
            "sessions": _INT,
            "by_status": _COUNTS,
            "nodes": {"type": "object", "additionalProperties": _ref("NodeStats")},
            "metrics": {
                "type": "object",
                "additionalProperties": _NUM,
                "description": "sums of ctx.metric, e.g. tokens and cost",
            },
        },
    ),
    "Timeline": _obj(
        ["since", "until", "buckets"],
        {
            "since": _TIME,
            "until": _TIME,
            "buckets": {
                "type": "array",
                "items": _obj(
                    ["start", "end", "by_status"],
                    {
                        "start": _TIME,
                        "end": _TIME,
                        "by_status": _COUNTS,
                    },
                ),
            },
        },
    ),
    "FlowSummary": _obj(
        ["name", "version", "fingerprint"],
        {
            "name": _STR,
            "version": _ANY,
            "fingerprint": _STR,
        },
    ),
    "FlowList": _obj(["flows"], {"flows": {"type": "array", "items": _ref("FlowSummary")}}),
    "Node": _obj(
        ["name", "kind", "path", "children"],
        {
            "name": _STR,
            "kind": {
                "enum": [
                    "flow",
                    "step",
                    "foreach",
                    "loop",
                    "branch",
                    "graph",
                    "parallel",
                    "gate",
                    "wait",
                    "sleep",
                ]
            },
            "path": {"type": "array", "items": _STR},
            "children": {"type": "array", "items": _ref("Node")},
            "start": {**_STR, "description": "a graph's first node"},
            "routes": {
                "type": "array",
                "items": _obj(
                    ["from", "to", "when"],
                    {
                        "from": _STR,
                        "to": _NULLABLE_STR,
                        "when": {**_STR, "description": "the action"},
                    },
                ),
            },
            "sides": _obj(
                ["then", "otherwise"],
                {
                    "then": {"type": "array", "items": _STR},
                    "otherwise": {"type": "array", "items": _STR},
                },
            ),
            "branches": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": _STR},
            },
        },
    ),
    "FlowStructure": _obj(
        ["name", "version", "fingerprint", "structure"],
        {
            "name": _STR,
            "version": _ANY,
            "fingerprint": _STR,
            "structure": _ref("Node"),
        },
    ),
    "Me": _obj(["user"], {"user": {**_NULLABLE_STR, "description": "null without users"}}),
    "Delivered": _obj(
        ["outcomes", "kept"],
        {
            "outcomes": {"type": "array", "items": _ref("Outcome")},
            "kept": {"type": "array", "items": _STR, "description": "keys kept as mail"},
        },
    ),
    "AbortRequested": _obj(
        ["session_id", "requested", "status"],
        {
            "session_id": _STR,
            "requested": {"enum": ["abort", "cancel"]},
            "status": _STR,
        },
    ),
    "Delivery": _obj(["key"], {"key": _STR, "value": _ANY}, additionalProperties=False),
}

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
                _query("status", {"enum": STATUS_ENUM}, "only sessions in this status"),
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
                    "flow": {**_STR, "description": "a registered flow's name"},
                    "input": _ANY,
                    "session_id": {**_STR, "description": "makes the start idempotent"},
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
            _query("limit", {"type": "integer", "minimum": 1}, "page size"),
        ],
        **{"404": _NOT_FOUND, "400": _BAD},
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
                {"type": "string", "default": "10"},
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
                "description": "Start, watch, resume and stop tarry sessions. See docs/monitor.md.",
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
