"""What the engine is handed to take values in, hand them out, and bound a session's state: the
snapshot codec's `take` and `copy` (see tarry.engine.values), and a session's `Bounds` with the
exact size of its state (see tarry.engine.bounds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tarry.engine.bounds import Bounds
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import NotSerializable
from tarry.engine.state.records import SessionState
from tarry.snapshots.codec.check import check as _codec_check
from tarry.snapshots.codec.check import copy as copy
from tarry.snapshots.codec.check import take as _codec_take
from tarry.snapshots.codec.limits import INT_MAX, INT_MIN
from tarry.snapshots.records import SessionRecord, encode_state

if TYPE_CHECKING:
    from tarry.drivers.core import Core


def value_take(limit: int) -> Callable[[Any, Any], tuple[Any, int]]:
    """The engine's `take` of a value entering a session: encodable and at most `limit` bytes
    encoded (else NotSerializable / PayloadTooLarge), made the session's own copy, and
    measured. None, bools and small ints return at once; a `(path, key)` place is formatted
    only when a value fails."""

    def take(value: Any, where: Any) -> tuple[Any, int]:
        kind = type(value)
        # The common outputs, in line: a call less per step.
        if kind is int:
            if -32 <= value < 128:
                return value, 1
            if -128 <= value < 256:
                return value, 2
            if -32768 <= value < 65536:
                return value, 3
            if INT_MIN <= value <= INT_MAX:
                return value, 5 if -(2**31) <= value < 2**32 else 9
        elif value is None or kind is bool:
            return value, 1
        elif kind is float:
            return value, 9
        elif kind is str and len(value) < 32 and value.isascii():
            return value, len(value) + 1
        if type(where) is not tuple:
            return _codec_take(value, where, limit)
        try:
            return _codec_take(value, "", limit)
        except NotSerializable:
            path, key = where
            # Again, to name the place (and the part of the value) that fails.
            return _codec_take(value, f"{'/'.join(map(str, path))}[{key!r}]", limit)

    return take


def bounds(core: Core, flow: Flow, record: SessionRecord, meta: dict[str, Any] | None) -> Bounds:
    """What a session driven from `record` may hold. The state a drive starts from is its
    snapshot plus at most one value (the input, a resume value or a skip's output), except on
    recovery (`meta` says so), which folds the events written since the snapshot: that state
    is measured when first needed."""
    recovered = meta is not None and meta.get("trigger") == "recover"
    held = None if recovered else len(record.state) + core.max_value_bytes
    return Bounds(core.max_value_bytes, core.max_snapshot_bytes, measure(flow), held)


def measure(flow: Flow) -> Callable[[SessionState], int]:
    """The exact size of the snapshot of a state of a session of `flow`."""

    def size(state: SessionState) -> int:
        return len(encode_state(state, fingerprint=flow.fingerprint, flow_version=flow.version))

    return size


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
