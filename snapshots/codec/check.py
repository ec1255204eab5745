"""Whether a value can be stored (`check`), and a private copy of one (`take`, `copy`).

These pack in C rather than walk in Python; `_explain` walks only once packing failed.
"""

from __future__ import annotations

from typing import Any

from tarry.engine.errors import PayloadTooLarge
from tarry.engine.values import immutable
from tarry.snapshots.codec.explain import _explain
from tarry.snapshots.codec.limits import HEADROOM, INT_MAX, INT_MIN, PLAIN_LIMIT
from tarry.snapshots.codec.pack import _default, _pack, _unpack

_ALWAYS_OK = frozenset({type(None), bool, float})


def check(value: Any, where: str = "value", limit: int | None = None) -> None:
    """Raise NotSerializable (naming the path and type) unless `value` can be encoded, and
    PayloadTooLarge when `limit` is given and its encoding is longer than `limit` bytes.

    Scalars return at once; anything else is packed in C, which is faster than a Python walk.
    """
    t = type(value)
    if t in _ALWAYS_OK:
        return
    if t is int and INT_MIN <= value <= INT_MAX:
        return
    if (t is str and value.isascii()) or (t is bytes and len(value) < 2**32):
        # Only non-ASCII text can fail to encode (lone surrogates); ASCII is one byte a char.
        if limit is not None:
            size = len(value) + _header(len(value), t is str)
            if size > limit:
                raise PayloadTooLarge(where, size, limit)
        return
    try:
        size = len(_pack(value))
        # Stored, a value sits a few lists and dicts deeper (in an event, the state, a
        # container's outputs); one that only fits at the top would fail there, later, after
        # the token was used. Only a value of this many bytes can nest this deep.
        if size > PLAIN_LIMIT - HEADROOM:
            _pack(_wrapped(value, HEADROOM))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _explain(value, where, _default) from exc
    if limit is not None and size > limit:
        raise PayloadTooLarge(where, size, limit)


def take(value: Any, where: str = "value", limit: int | None = None) -> tuple[Any, int]:
    """`check(value, where, limit)`, and then a copy of `value` that shares nothing that can
    change with it (what decoding its encoding gives: what a recovered run reads), and the size
    of its encoding. A value that cannot change (see `tarry.engine.values`) is its own copy.

    The check packs the value anyway; the copy costs one unpack of those bytes on top.
    """
    t = type(value)
    if t in _ALWAYS_OK:
        return value, 9 if t is float else 1
    if t is int and INT_MIN <= value <= INT_MAX:
        return value, _int_size(value)
    if (t is str and value.isascii()) or (t is bytes and len(value) < 2**32):
        size = len(value) + _header(len(value), t is str)
        if limit is not None and size > limit:
            raise PayloadTooLarge(where, size, limit)
        return value, size
    try:
        blob = _pack(value)
        if len(blob) > PLAIN_LIMIT - HEADROOM:  # see `check`
            _pack(_wrapped(value, HEADROOM))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _explain(value, where, _default) from exc
    size = len(blob)
    if limit is not None and size > limit:
        raise PayloadTooLarge(where, size, limit)
    if t is not dict and t is not list and (t is str or immutable(value)):
        return value, size
    own = _unpack(blob)
    if size <= _REMEMBERED_BYTES:
        global _taken
        _taken = (own, blob)
    return own, size


# The copy `take` made last, and its encoding: a step's output is most often read (as the next
# step's `ctx.prev`) right after it was taken, and its copy is then one unpack, not two calls.
# One pair, replaced whole, so threads that take at once can only miss. Small values only, so
# that what it keeps alive is small.
_taken: tuple[Any, bytes] = (None, b"")
_REMEMBERED_BYTES = 64 * 1024


def copy(value: Any) -> Any:
    """A copy of a value the codec encodes that shares nothing that can change with it: what
    decoding its encoding gives. A value that cannot change is its own copy."""
    t = type(value)
    if t is not dict and t is not list and immutable(value):
        return value
    taken = _taken
    if value is taken[0]:
        return _unpack(taken[1])
    return _unpack(_pack(value))


def _int_size(n: int) -> int:
    """Bytes msgpack takes for the int `n` (within INT_MIN..INT_MAX)."""
    if -32 <= n < 128:
        return 1
    if -128 <= n < 256:
        return 2
    if -32768 <= n < 65536:
        return 3
    if -(2**31) <= n < 2**32:
        return 5
    return 9


def _wrapped(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


def _header(n: int, text: bool) -> int:
    """Bytes msgpack puts before a str (`text`) or bin of n bytes."""
    if text and n < 32:
        return 1
    return 2 if n < 256 else 3 if n < 65536 else 5
