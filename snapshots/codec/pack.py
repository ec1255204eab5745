"""The snapshot codec: msgpack plus named ext types (the registry is _registry.py; the one cattrs
converter is _converter.py; `check`/`take`/`copy` are _check.py).

User values are plain msgpack types plus the types below, each under an ext code of its own.
Records (attrs classes, dataclasses) and enums are stored under the name they were registered
with and restored only if that name is registered here: nothing is pickled and nothing is
imported by name. State records have one wire form (wire.py), registered as their hooks in the
one cattrs converter; `Any`-typed fields pass through untouched so the ext types carry them.

Each ext value (tuple, set, record, ...) holds a msgpack document of its own, packed and
unpacked by a nested msgpack call. msgpack's C code uses the C stack for that nesting, which
Python's recursion limit does not guard: about 40 KiB per `unpackb` and about 440 KiB per fully
nested `packb`. A few hundred bytes of crafted input nested 200 ext values deep crashed the
interpreter (SIGSEGV), so nesting is bounded here, on both sides, by `MAX_DEPTH` and the two
limits next to it.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import msgpack
from tarry.engine.errors import SnapshotError
from tarry.engine.read_only_views import DictView, ListView, underlying
from tarry.snapshots.codec.explain import _explain
from tarry.snapshots.codec.limits import (
    C_LEVELS,
    DEEP_PLAIN_LIMIT,
    MAX_BLOB_BYTES,
    MAX_DEPTH,
)
from tarry.snapshots.codec.registry import (
    _UNSET,
    EXT_DATE,
    EXT_DATETIME,
    EXT_DECIMAL,
    EXT_ENUM,
    EXT_FROZENSET,
    EXT_RECORD,
    EXT_SET,
    EXT_TIME,
    EXT_TIMEDELTA,
    EXT_TUPLE,
    EXT_UUID,
    _build,
    _by_name,
    _by_type,
    _fields,
    _from_iso,
    _kind,
    register,
    registered,
)

__all__ = [
    "EXT_DATE", "EXT_DATETIME", "EXT_DECIMAL", "EXT_ENUM", "EXT_FROZENSET", "EXT_RECORD",
    "EXT_SET", "EXT_TIME", "EXT_TIMEDELTA", "EXT_TUPLE", "EXT_UUID", "MAX_BLOB_BYTES",
    "MAX_DEPTH", "_UNSET", "_build", "_by_name", "_by_type", "_fields",
    "dumps", "loads", "register", "registered",
]  # fmt: skip


# --- encoding ------------------------------------------------------------------------------------


class _Packers(threading.local):
    """One msgpack Packer per nesting depth and thread, made on first use.

    `msgpack.packb` builds a new Packer (and its buffer) on every call, which costs more than
    packing a small value; events and results are small and many. Each depth has its own
    Packer because packing an ext value packs its payload while the outer pack is in progress.
    """

    def __init__(self) -> None:
        self.by_depth: list[msgpack.Packer | None] = [None] * (MAX_DEPTH + 1)

    def get(self, depth: int) -> msgpack.Packer:
        packer = self.by_depth[depth]
        if packer is None:
            packer = msgpack.Packer(
                default=_DEFAULTS[depth], strict_types=True, use_bin_type=True, autoreset=True
            )
            self.by_depth[depth] = packer
        return packer


_packers = _Packers()


def _pack(value: Any, depth: int = 0) -> bytes:
    """`value` as msgpack; `depth` is how many ext values enclose it."""
    by_depth = _packers.by_depth
    packer = by_depth[depth]  # (`_packers.get`, inlined: every event batch and result)
    if packer is None:
        packer = _packers.get(depth)
    try:
        packed: bytes = packer.pack(value)
        return packed
    except BaseException:
        by_depth[depth] = None  # never reuse a packer whose buffer may be half-written
        raise


def _ext(code: int, payload: Any, depth: int) -> msgpack.ExtType:
    """An ext value at nesting `depth + 1` holding `payload` as a msgpack document."""
    if depth >= MAX_DEPTH:
        msg = f"values nest more than {MAX_DEPTH} tuples, sets, records or enums deep"
        raise ValueError(msg)
    if depth >= C_LEVELS and _plain_depth_exceeds(payload, DEEP_PLAIN_LIMIT):
        msg = (
            f"lists and dicts nest more than {DEEP_PLAIN_LIMIT} levels deep inside a value "
            f"nested {depth + 1} tuples, sets, records or enums deep"
        )
        raise ValueError(msg)
    return msgpack.ExtType(code, _pack(payload, depth + 1))


def _plain_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether lists and dicts nest more than `limit` levels in `value` (ext values not counted:
    each is packed by a msgpack call of its own)."""
    t = type(value)
    if t is list:
        items: Any = value
    elif isinstance(value, dict) and t not in _by_type:
        items = value.values()  # keys are hashable, so never lists or dicts
    else:
        return False
    if limit <= 0:
        return True
    return any(_plain_depth_exceeds(item, limit - 1) for item in items)


#: The plain types a subclass of is stored as (a str enum is not: enums have an ext code).
_SCALARS: tuple[type[Any], ...] = (bool, int, float, str, bytes)


def _default(depth: int, obj: Any) -> Any:
    t = type(obj)
    if t is tuple:
        return _ext(EXT_TUPLE, list(obj), depth)
    if t is dt.datetime:
        return msgpack.ExtType(EXT_DATETIME, obj.isoformat().encode())
    if t is set or t is frozenset:
        return _ext(EXT_SET if t is set else EXT_FROZENSET, list(obj), depth)
    name = _by_type.get(t)
    if name is not None:
        if isinstance(obj, enum.Enum):
            return _ext(EXT_ENUM, [name, obj.value], depth)
        return _ext(EXT_RECORD, [name, _fields(obj)], depth)
    if t is dt.date:
        return msgpack.ExtType(EXT_DATE, obj.isoformat().encode())
    if t is dt.time:
        return msgpack.ExtType(EXT_TIME, obj.isoformat().encode())
    if t is dt.timedelta:
        return msgpack.ExtType(
            EXT_TIMEDELTA, msgpack.packb([obj.days, obj.seconds, obj.microseconds])
        )
    if t is uuid.UUID:
        return msgpack.ExtType(EXT_UUID, obj.bytes)
    if t is _decimal_type():
        return msgpack.ExtType(EXT_DECIMAL, str(obj).encode())
    if (
        t is DictView or t is ListView
    ):  # a read-only view (engine/read_only_views.py): the value it shows
        return underlying(obj)
    if isinstance(obj, dict):  # dict subclasses (OrderedDict, defaultdict...) are stored as dicts
        return dict(obj)
    if isinstance(obj, bool | int | float | str | bytes) and not isinstance(obj, enum.Enum):
        for base in _SCALARS:
            if isinstance(obj, base):
                return base(obj)
    raise TypeError(obj)


def _decimal_type() -> type | None:
    """decimal.Decimal if the decimal module is loaded: no Decimal exists before it is, so
    `import tarry` need not load it (a few ms) to recognise one."""
    module = sys.modules.get("decimal")
    return None if module is None else module.Decimal


# One `default` per nesting depth, made once: packing passes no closure per call.
_DEFAULTS = [functools.partial(_default, depth) for depth in range(MAX_DEPTH + 1)]


# --- decoding ------------------------------------------------------------------------------------


def _unpack(data: bytes, depth: int = 0) -> Any:
    """The msgpack document `data`, nested `depth` ext values deep."""
    hook = _HOOKS[depth]
    if depth <= C_LEVELS:
        return msgpack.unpackb(data, ext_hook=hook, raw=False, strict_map_key=False, timestamp=3)
    # `unpackb` keeps its parse stack (about 40 KiB) on the C stack; an Unpacker keeps it on the
    # heap, so deep nesting costs little C stack.
    unpacker = msgpack.Unpacker(
        ext_hook=hook,
        raw=False,
        strict_map_key=False,
        timestamp=3,
        max_buffer_size=max(len(data), 1),
    )
    unpacker.feed(data)
    value = unpacker.unpack()
    if unpacker.tell() != len(data):
        msg = f"{len(data) - unpacker.tell()} extra bytes after an ext value's payload"
        raise SnapshotError(msg)
    return value


def _ext_hook(depth: int, code: int, data: bytes) -> Any:
    """An ext value found `depth` ext values deep; whatever goes wrong is a SnapshotError."""
    try:
        container = _CONTAINERS.get(code)
        if container is not None:  # the common case first: one lookup, no more calls
            items = _nested(data, depth)
            if type(items) is not list:
                msg = f"ext {code} must hold an array (got {_kind(items)})"
                raise SnapshotError(msg)
            return container(items)
        if code == EXT_DATETIME:
            return _from_iso(dt.datetime, data)
        return _decode_other(depth, code, data)
    except SnapshotError:
        raise
    except Exception as exc:  # bad text, bad sizes, a record's validator...: callers see one type
        msg = f"malformed ext {code} value ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


# One `ext_hook` per nesting depth, made once (see `_DEFAULTS`).
_HOOKS = [functools.partial(_ext_hook, depth) for depth in range(MAX_DEPTH + 1)]
_CONTAINERS: dict[int, Callable[[list[Any]], Any]] = {
    EXT_TUPLE: tuple,
    EXT_SET: set,
    EXT_FROZENSET: frozenset,
}


def _decode_other(depth: int, code: int, data: bytes) -> Any:
    if code in (EXT_ENUM, EXT_RECORD):
        return _decode_named(code, data, depth)
    if code == EXT_DATE:
        return dt.date.fromisoformat(data.decode("ascii"))
    if code == EXT_TIME:
        return _from_iso(dt.time, data)
    if code == EXT_TIMEDELTA:
        # three ints, never nested: decoded without an ext_hook, so any ext inside is refused
        parts = msgpack.unpackb(data)
        if type(parts) is not list or len(parts) != 3 or any(type(p) is not int for p in parts):
            msg = f"ext {code} must hold [days, seconds, microseconds] (got {_kind(parts)})"
            raise SnapshotError(msg)
        return dt.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])
    if code == EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == EXT_DECIMAL:
        from decimal import Decimal

        return Decimal(data.decode("ascii"))
    msg = f"unknown ext code {code}"
    raise SnapshotError(msg)


# CPython 3.11's fromisoformat reads an offset under a second ("+00:00:00.000001") as zero.


def _nested(data: bytes, depth: int) -> Any:
    if depth >= MAX_DEPTH:
        msg = f"snapshot values nest more than {MAX_DEPTH} tuples, sets, records or enums deep"
        raise SnapshotError(msg)
    return _unpack(data, depth + 1)


def _decode_named(code: int, data: bytes, depth: int) -> Any:
    """A registered enum member or record, stored as [name, value or fields]."""
    pair = _nested(data, depth)
    if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
        msg = f"ext {code} must hold a [name, value] pair (got {_kind(pair)})"
        raise SnapshotError(msg)
    name, payload = pair
    cls = _by_name.get(name)
    if cls is None:
        msg = f"snapshot holds a {name!r}, which is not registered (tarry.snapshots.register)"
        raise SnapshotError(msg)
    is_enum = issubclass(cls, enum.Enum)
    if code == EXT_ENUM:
        if not is_enum:
            msg = f"snapshot holds {name!r} as an enum member, but it names {cls!r}"
            raise SnapshotError(msg)
        return cls(payload)
    if is_enum:
        msg = f"snapshot holds {name!r} as a record, but it names the enum {cls!r}"
        raise SnapshotError(msg)
    if type(payload) is not dict:
        msg = f"snapshot holds a {name!r} whose fields are not a map (got {_kind(payload)})"
        raise SnapshotError(msg)
    return _build(cls, payload)


# --- the public functions ------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    """Encode `value`; raises NotSerializable naming the first value that cannot be encoded."""
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _explain(value, "value", _default) from exc


def dumps_many(values: list[Any]) -> list[bytes]:
    """`dumps` of each value, with one packer for all (a call less per value)."""
    pack = _packers.get(0).pack
    try:
        return list(map(pack, values))  # C-level: no Python loop per value
    except BaseException:
        _packers.by_depth[0] = None  # never reuse a packer whose buffer may be half-written
        return [dumps(value) for value in values]  # names the value that fails


def loads(data: bytes | bytearray | memoryview) -> Any:
    """Decode bytes from `dumps`; any malformed, truncated or oversized input raises SnapshotError."""
    if not isinstance(data, bytes | bytearray | memoryview):
        msg = f"loads() takes bytes (got a {type(data).__name__})"
        raise SnapshotError(msg)
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > MAX_BLOB_BYTES:
        msg = f"snapshot data is {size} bytes, more than the limit of {MAX_BLOB_BYTES}"
        raise SnapshotError(msg)
    try:
        return _unpack(bytes(data))
    except SnapshotError:
        raise
    except Exception as exc:  # msgpack raises many types for bad input; callers see one
        msg = f"malformed snapshot data ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


# Types `check` passes at once: every value of them can be encoded.
