"""Small helpers of a drive: the value check the engine is given, and folding events that are
written with something else (a session's creation, a token's use)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tarry.engine.state.events import Event
from tarry.engine.state.records import SessionState
from tarry.engine.state.reducer import apply
from tarry.snapshots.codec.check import check as _codec_check
from tarry.snapshots.codec.limits import INT_MAX, INT_MIN

_FIXED = frozenset({type(None), bool, float})


def value_check(limit: int) -> Callable[[Any, Any], None]:
    """The engine's check of a value an event will carry: encodable, and at most `limit` bytes
    encoded. Numbers and short text pass at once; a `(path, key)` place is formatted only when
    a value fails."""
    # Text of up to this many characters fits whatever its characters: at most 4 bytes each,
    # after a header of at most 5.
    short = (limit - 5) // 4

    def check(value: Any, where: Any) -> None:
        kind = type(value)
        if kind in _FIXED or (kind is int and INT_MIN <= value <= INT_MAX):
            return
        if (kind is str or kind is bytes) and len(value) <= short:
            return
        if type(where) is tuple:
            path, key = where
            where = f"{'/'.join(map(str, path))}[{key!r}]"
        _codec_check(value, where, limit)

    return check


def fold(
    state: SessionState,
    now: datetime,
    specs: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]],
    owned: bool = False,
) -> tuple[SessionState, list[Event]]:
    """Events for `specs` (type, path, data) that follow `state`, and the state after them:
    for writing events in the same transaction as something else (create, token use).
    `owned`: `state` is the caller's own (see `reducer.own`) and is changed in place."""
    events = []
    for type_, path, data in specs:
        event = Event(state.last_seq + 1, type_, state.session_id, now, path, data)
        state = apply(state, event, owned)
        events.append(event)
    return state, events
