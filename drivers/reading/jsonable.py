"""JSON forms of what tarry stores: for the CLI, the HTTP API, the event stream and exports.

Stored values are msgpack-encodable (bytes, datetimes, tuples, sets, registered attrs classes
and dataclasses, enums); JSON has fewer types, so each is given a plain, documented form:
datetimes as ISO 8601 strings, bytes as `{"$bytes": base64}`, an infinite or NaN float as
`{"$float": "inf"}` (or "-inf", "nan"), tuples and sets as lists,
records as dicts of their fields, enums as their value. The conversion is one way: it is for
people and other programs to read, not for restoring sessions (snapshots do that).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import os
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from typing import IO, Any

import attrs
from tarry.engine.describe import describe
from tarry.engine.state.events import Event

#: Deepest nesting shown; anything deeper becomes DEEP (a JSON writer, and Python's recursion
#: limit, would fail on values that the codec stores).
MAX_DEPTH = 200
DEEP = "<nested too deeply to show>"


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """`value` with every part turned into a JSON type (see the module docstring)."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        # JSON has no infinity or NaN; `json.dumps` would write a bare Infinity, which strict
        # parsers refuse.
        return value if math.isfinite(value) else {"$float": repr(value)}
    if _depth >= MAX_DEPTH:
        return DEEP
    _depth += 1
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, _depth) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=describe) if isinstance(value, set | frozenset) else value
        return [to_jsonable(v, _depth) for v in items]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, _depth)
    if attrs.has(kind):
        return {f.name: to_jsonable(getattr(value, f.name), _depth) for f in attrs.fields(kind)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {f.name: to_jsonable(getattr(value, f.name), _depth) for f in fields}
    for plain in (bool, int, float, str):  # subclasses of the plain types
        if isinstance(value, plain):
            return to_jsonable(plain(value), _depth)
    return describe(value)


def event_to_dict(event: Event) -> dict[str, Any]:
    """One event as a JSON-ready dict: seq, type, session_id, at, path, data."""
    return {
        "seq": event.seq,
        "type": event.type,
        "session_id": event.session_id,
        "at": event.at.isoformat(),
        "path": to_jsonable(event.path),
        "data": to_jsonable(event.data),
    }


def log_to_dict(record: Any) -> dict[str, Any]:
    """One `tarry.LogRecord` as a JSON-ready dict: seq, at, level, levelno, logger, message,
    path."""
    return {
        "seq": record.seq,
        "at": record.at.isoformat(),
        "level": record.level,
        "levelno": record.levelno,
        "logger": record.logger,
        "message": record.message,
        "path": to_jsonable(record.path),
    }


def session_to_dict(view: Any) -> dict[str, Any]:
    """A `SessionView` as a dict (to pass to `dumps`): where it stands and its live token.
    Only for callers who may see the token (the CLI's owner, an authorized API caller)."""
    state = view.state
    return {
        "session_id": view.session_id,
        "flow": view.flow,
        "status": view.status,
        "created_at": view.created_at,
        "updated_at": view.updated_at,
        "meta": view.meta,
        "input": state.input,
        "container_stack": state.container_stack,
        "pause": state.pause,
        "error": state.error,
        "outputs": state.outputs,
        "output": state.output,
        "shared": state.shared,
        "metrics": state.metrics,
        "last_seq": state.last_seq,
        "token": view.outcome.token,
        "parent": view.parent,
        "children": view.children,
        # A deadline and a cleanup (Flow(deadline=, cleanup=)): None when the session has none.
        "deadline": state.deadline,
        "ending": state.ending,
        "cleanup_error": state.cleanup_error,
    }


def dumps(value: Any) -> str:
    """Compact JSON of `to_jsonable(value)`."""
    return json.dumps(to_jsonable(value), separators=(",", ":"), ensure_ascii=False)


def write_events(events: Any, file: IO[str]) -> int:
    """Write `events` as JSON Lines (one event per line) to a text file; returns the count."""
    count = 0
    for event in events:
        file.write(json.dumps(event_to_dict(event), separators=(",", ":"), ensure_ascii=False))
        file.write("\n")
        count += 1
    return count


def export_events(source: Any, file: str | os.PathLike[str] | IO[str]) -> int:
    """Write a session's events as JSON Lines: `source` is a `SessionView` (its whole log) or
    an iterable of events; `file` a path (written anew) or an open text file. Returns the
    number of events written. Each line is `event_to_dict(event)`."""
    events = source.events() if hasattr(source, "events") else source
    if isinstance(file, str | os.PathLike):
        with open(file, "w", encoding="utf-8") as out:
            return write_events(events, out)
    return write_events(events, file)
