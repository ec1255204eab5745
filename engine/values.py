"""Values in the log are the log's own: what tarry keeps, no caller holds, and what a caller reads,
tarry no longer holds.

A value enters a session (a step's output, a `ctx.state` assignment, a ForEach's items, a Wait's
value, the flow's input) as a private copy that the driver makes while it checks the value
(`Execution.take`; the input when the run starts), and leaves it (`ctx.prev`,
`ctx.outputs[...]`, `ctx.state[...]`, `ctx.item`, `ctx.input`, an interrupt's value) as a
fresh copy (`Execution.copy`), or, for a large value a step may only read, as a read-only view
that refuses to change (read_only_views.py); a run copies the resume values it starts with
(`reducer.own`).
So a step that changes in place a value it read, or one it returned and kept, and a caller who
changes the input or a resume value after handing it over, change nothing a later step, a
resume or a recovery sees: they all see what the log holds. The driver copies through the
snapshot codec, so a normal run reads values exactly as a recovered run decodes them.

Values that cannot change are never copied: None, bools, numbers, text, bytes, dates and times,
and tuples and frozensets of them. For the scalars that costs one type check.
"""

from __future__ import annotations

import copy as _copy
import datetime as _dt
import uuid as _uuid
from typing import Any

#: Types whose values cannot change: read and kept as they are.
IMMUTABLE = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        str,
        bytes,
        _dt.datetime,
        _dt.date,
        _dt.time,
        _dt.timedelta,
        _uuid.UUID,
    }
)


def immutable(value: Any) -> bool:
    """Whether `value` can never change: an IMMUTABLE scalar, or a tuple or frozenset of such
    (nested too)."""
    kind = type(value)
    if kind in IMMUTABLE:
        return True
    if kind is tuple or kind is frozenset:
        return all(type(item) in IMMUTABLE or immutable(item) for item in value)
    return False


def deep_copy(value: Any) -> Any:
    """A copy of `value` that shares nothing that can change with it; the value itself when it
    cannot change. The engine's own default: a driver hands in one made with its codec."""
    return value if immutable(value) else _copy.deepcopy(value)


def take_copy(value: Any, where: Any) -> tuple[Any, int]:
    """The engine's default `Execution.take`: a private copy of `value`, and 0 for its size
    (a bare Execution bounds nothing)."""
    return deep_copy(value), 0
