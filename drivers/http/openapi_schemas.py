"""Building blocks and component schemas of the OpenAPI description (see openapi.py)."""

from __future__ import annotations

from typing import Any

# --- building blocks -----------------------------------------------------------------------------


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _obj(required: list[str], properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties, **more}


def _query(
    name: str, schema: dict[str, Any], description: str, *, empty: bool = True
) -> dict[str, Any]:
    """A query parameter. `empty`: an empty value (`?name=`) is taken as leaving it out."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
        **({"allowEmptyValue": True} if empty else {}),
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
_KEY = {"type": "string", "minLength": 1, "maxLength": 512}
#: A key or a prefix of keys in a query string (empty: not given).
_KEY_TEXT = {"type": "string", "maxLength": 512}

SID = {
    "name": "sid",
    "in": "path",
    "required": True,
    "schema": _STR,
    "description": "the session id",
}
TIME_PARAM = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "date"},
        {"type": "number", "minimum": 0, "maximum": 253402300799},
    ],
    "description": "an RFC 3339 time, a date (midnight UTC), ISO 8601 without an offset (UTC), "
    "or epoch seconds",
}
SINCE = _query("since", TIME_PARAM, "only sessions created at this time or later")
UNTIL = _query("until", TIME_PARAM, "only sessions created before this time")
FLOW = _query("flow", {"type": "string", "maxLength": 512}, "only sessions of this flow (its name)")
#: "stale" is shown, never stored: a running session whose lease lapsed (its process died).
STATUS_ENUM = ["running", "paused", "completed", "failed", "cancelled", "stale"]

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
            "lease_until": {
                "type": ["string", "null"],
                "description": "when the lease of a running session ends (stale after it)",
            },
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
            "lease_until": {"type": ["string", "null"]},
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
            "deadline": {
                "type": ["string", "null"],
                "description": "when it fails with deadline_exceeded if still not ended",
            },
            "ending": {
                **_NULLABLE_STR,
                "description": "how its flow's body ended, once its cleanup began",
            },
            "cleanup_error": {**_ANY, "description": "what its flow's cleanup failed with"},
            "actions": _obj(
                ["resume", "cancel", "abort", "skip"],
                {
                    "resume": _BOOL,
                    "cancel": _BOOL,
                    "abort": _BOOL,
                    "recover": _BOOL,
                    "skip": _BOOL,
                },
            ),
            "flow_structure_url": {
                **_STR,
                "description": "GET it for the diagram of the flow version this session runs",
            },
            "parent": {
                **_NULLABLE_STR,
                "description": "the session whose Child element started this one",
            },
            "children": _obj(
                ["total", "by_status", "listed"],
                {
                    "total": _INT,
                    "by_status": {"type": "object", "additionalProperties": _INT},
                    "listed": {
                        "type": "array",
                        "description": "the first 100 children, in the order they started",
                        "items": _obj(
                            ["session_id", "status"], {"session_id": _STR, "status": _STR}
                        ),
                    },
                },
            ),
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
    "Inbox": _obj(
        ["gates", "more", "assignees", "scanned", "complete"],
        {
            "gates": {
                "type": "array",
                "items": _obj(
                    [
                        "session_id",
                        "flow",
                        "path",
                        "message",
                        "assignee",
                        "reason",
                        "expires_at",
                        "since",
                    ],
                    {
                        "session_id": _STR,
                        "flow": _NULLABLE_STR,
                        "path": _PATH,
                        "message": _STR,
                        "assignee": _NULLABLE_STR,
                        "reason": _STR,
                        "expires_at": _NULLABLE_STR,
                        "since": _NULLABLE_STR,
                    },
                ),
            },
            "more": _BOOL,
            "assignees": {"type": "object", "additionalProperties": _INT},
            "scanned": _INT,
            "complete": _BOOL,
        },
    ),
    "ItemsPage": _obj(
        ["session_id", "path", "size", "offset", "limit", "counts", "items"],
        {
            "session_id": _STR,
            "path": _STR,
            "size": {"type": ["integer", "null"]},
            "offset": _INT,
            "limit": _INT,
            "counts": _obj(
                ["done", "running", "waiting", "failed", "not_started"],
                {s: _INT for s in ("done", "running", "waiting", "failed", "not_started")},
            ),
            "items": {
                "type": "array",
                "items": _obj(
                    ["index", "status"],
                    {
                        "index": _INT,
                        "status": {"enum": ["done", "running", "waiting", "failed", "not_started"]},
                    },
                ),
            },
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
            "waits": _INT,
            "waiting_seconds": _NUM,
            "mean_waiting_seconds": _NUM,
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
            "flows": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": _ref("NodeStats"),
                },
                "description": "nodes by flow, then by path (names joined by '/')",
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
        ["outcomes", "applied", "queued", "kept"],
        {
            "outcomes": {"type": "array", "items": _ref("Outcome")},
            "applied": {
                "type": "object",
                "additionalProperties": _STR,
                "description": "key -> the session whose wait took its message",
            },
            "queued": {
                "type": "array",
                "items": _STR,
                "description": "keys whose messages stay queued",
            },
            "kept": {
                "type": "array",
                "items": _STR,
                "description": "the same as queued (older name)",
            },
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
    "Delivery": _obj(["key"], {"key": _KEY, "value": _ANY}, additionalProperties=False),
    "MailInfo": _obj(
        ["key", "count", "oldest_at"],
        {
            "key": _KEY,
            "count": {**_INT, "minimum": 1, "description": "messages queued on it"},
            "oldest_at": {**_TIME, "description": "when its oldest message was delivered"},
        },
    ),
    "MailPage": _obj(
        ["mail", "next_after"],
        {
            "mail": {"type": "array", "items": _ref("MailInfo")},
            "next_after": {
                **_NULLABLE_STR,
                "description": "pass as ?after= for the next page; null on the last page",
            },
        },
    ),
    "Discarded": _obj(["discarded"], {"discarded": {**_INT, "minimum": 0}}),
    "BatchInfo": _obj(
        ["submission_id", "via", "provider_id", "status", "total", "counts", "created_at"],
        {
            "submission_id": {**_STR, "description": "tarry's id, in the batch's metadata"},
            "via": {**_STR, "description": "the adapter's name in Runtime(batches=...)"},
            "provider_id": {**_NULLABLE_STR, "description": "null until recorded"},
            "status": {**_STR, "description": "the provider's, as last seen"},
            "total": {**_INT, "minimum": 0, "description": "requests in the batch"},
            "counts": {
                "type": "object",
                "additionalProperties": _INT,
                "description": "the provider's request counts, as last seen",
            },
            "created_at": _TIME,
            "updated_at": _TIME,
            "ended_at": {"anyOf": [_TIME, {"type": "null"}]},
        },
    ),
    "BatchList": _obj(["batches"], {"batches": {"type": "array", "items": _ref("BatchInfo")}}),
}
