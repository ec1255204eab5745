"""The snapshot codec: msgpack plus named ext types, and the one cattrs converter.

User values are plain msgpack types plus the types below, each under an ext code of its own.
Records (attrs classes, dataclasses) and enums are stored under the name they were registered
with and restored only if that name is registered here: nothing is pickled and nothing is
imported by name. State records go through the one cattrs converter; `Any`-typed fields pass
through it untouched so the ext types carry them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs
import msgpack
from cattrs.preconf.msgpack import make_converter
from tarry.engine.errors import NotSerializable, SnapshotError

# --- ext codes: one number per type, never reused ------------------------------------------------
EXT_TUPLE = 1
EXT_SET = 2
EXT_FROZENSET = 3
EXT_DATETIME = 4
EXT_DATE = 5
EXT_TIME = 6
EXT_TIMEDELTA = 7
EXT_ENUM = 8
EXT_RECORD = 9
EXT_UUID = 10
EXT_DECIMAL = 11

#: Largest blob `loads` accepts; anything longer is refused before it is parsed.
MAX_BLOB_BYTES = 256 * 1024 * 1024

_by_name: dict[str, type] = {}
_by_type: dict[type, str] = {}


def register(cls: type, name: str | None = None) -> type:
    """Allow instances of an attrs class, dataclass or Enum in snapshots, stored under `name`
    (default: `module.QualName`). Usable as a decorator. Re-registering the same class is a
    no-op; a name taken by another class is an error."""
    if not (attrs.has(cls) or dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum)):
        msg = f"register() takes an attrs class, a dataclass or an Enum (got {cls!r})"
        raise TypeError(msg)
    key = name or f"{cls.__module__}.{cls.__qualname__}"
    taken = _by_name.get(key)
    if taken is not None and taken is not cls:
        msg = f"snapshot name {key!r} is already registered for {taken!r}"
        raise ValueError(msg)
    _by_name[key] = cls
    _by_type[cls] = key
    return cls


def registered(cls: type) -> bool:
    return cls in _by_type


def _fields(obj: Any) -> dict[str, Any]:
    if attrs.has(type(obj)):
        return {f.name: getattr(obj, f.name) for f in attrs.fields(type(obj))}
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _build(cls: type, values: dict[str, Any]) -> Any:
    if attrs.has(cls):
        init, late = {}, {}
        for f in attrs.fields(cls):
            if f.name in values:
                (init if f.init else late)[f.alias if f.init else f.name] = values[f.name]
        obj = cls(**init)
    else:
        init, late = {}, {}
        for f in dataclasses.fields(cls):
            if f.name in values:
                (init if f.init else late)[f.name] = values[f.name]
        obj = cls(**init)
    for key, value in late.items():
        object.__setattr__(obj, key, value)
    return obj


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_default, strict_types=True, use_bin_type=True)


def _default(obj: Any) -> Any:
    t = type(obj)
    if t is tuple:
        return msgpack.ExtType(EXT_TUPLE, _pack(list(obj)))
    if t is dt.datetime:
        return msgpack.ExtType(EXT_DATETIME, obj.isoformat().encode())
    if t is set or t is frozenset:
        code = EXT_SET if t is set else EXT_FROZENSET
        return msgpack.ExtType(code, _pack(list(obj)))
    name = _by_type.get(t)
    if name is not None:
        if isinstance(obj, enum.Enum):
            return msgpack.ExtType(EXT_ENUM, _pack([name, obj.value]))
        return msgpack.ExtType(EXT_RECORD, _pack([name, _fields(obj)]))
    if t is dt.date:
        return msgpack.ExtType(EXT_DATE, obj.isoformat().encode())
    if t is dt.time:
        return msgpack.ExtType(EXT_TIME, obj.isoformat().encode())
    if t is dt.timedelta:
        return msgpack.ExtType(EXT_TIMEDELTA, _pack([obj.days, obj.seconds, obj.microseconds]))
    if t is uuid.UUID:
        return msgpack.ExtType(EXT_UUID, obj.bytes)
    if t is Decimal:
        return msgpack.ExtType(EXT_DECIMAL, str(obj).encode())
    if isinstance(obj, dict):  # dict subclasses (OrderedDict, defaultdict...) are stored as dicts
        return dict(obj)
    if isinstance(obj, bool | int | float | str | bytes) and not isinstance(obj, enum.Enum):
        for base in (bool, int, float, str, bytes):
            if isinstance(obj, base):
                return base(obj)
    raise TypeError(obj)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_TUPLE:
        return tuple(_unpack(data))
    if code == EXT_DATETIME:
        return dt.datetime.fromisoformat(data.decode())
    if code == EXT_SET:
        return set(_unpack(data))
    if code == EXT_FROZENSET:
        return frozenset(_unpack(data))
    if code == EXT_ENUM or code == EXT_RECORD:
        name, payload = _unpack(data)
        cls = _by_name.get(name)
        if cls is None:
            msg = f"snapshot holds a {name!r}, which is not registered (tarry.snapshots.register)"
            raise SnapshotError(msg)
        return cls(payload) if code == EXT_ENUM else _build(cls, payload)
    if code == EXT_DATE:
        return dt.date.fromisoformat(data.decode())
    if code == EXT_TIME:
        return dt.time.fromisoformat(data.decode())
    if code == EXT_TIMEDELTA:
        days, seconds, micros = _unpack(data)
        return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == EXT_DECIMAL:
        return Decimal(data.decode())
    msg = f"unknown ext code {code}"
    raise SnapshotError(msg)


def dumps(value: Any) -> bytes:
    """Encode `value`; raises NotSerializable naming the first value that cannot be encoded."""
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _explain(value, "value") from exc


def loads(data: bytes | bytearray | memoryview) -> Any:
    """Decode bytes from `dumps`; any malformed, truncated or oversized input raises SnapshotError."""
    if not isinstance(data, bytes | bytearray | memoryview):
        msg = f"loads() takes bytes (got a {type(data).__name__})"
        raise SnapshotError(msg)
    if len(data) > MAX_BLOB_BYTES:
        msg = f"snapshot data is {len(data)} bytes, more than the limit of {MAX_BLOB_BYTES}"
        raise SnapshotError(msg)
    try:
        return _unpack(bytes(data))
    except SnapshotError:
        raise
    except Exception as exc:  # msgpack raises many types for bad input; callers see one
        msg = f"malformed snapshot data ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def check(value: Any, where: str = "value") -> None:
    """Raise NotSerializable (naming the path and type) unless `value` can be encoded.

    Scalars return at once; anything else is packed in C, which is faster than a Python walk.
    """
    if type(value) in _SCALARS:
        return
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _explain(value, where) from exc


def _explain(value: Any, where: str) -> NotSerializable:
    """Find the first value below `value` that cannot be encoded, and name it."""
    found = _find_bad(value, where, 0)
    if found is None:
        return NotSerializable(where, value)
    return NotSerializable(*found)


def _find_bad(value: Any, where: str, depth: int) -> tuple[str, Any] | None:
    if depth > 512:
        return (where, value)
    t = type(value)
    if t in _SCALARS:
        if t is int and not -(2**63) <= value < 2**64:
            return (where, value)
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            bad = _find_bad(key, f"{where} key {key!r}", depth + 1)
            bad = bad or _find_bad(item, f"{where}[{key!r}]", depth + 1)
            if bad:
                return bad
        return None
    if t in (list, tuple, set, frozenset):
        for i, item in enumerate(value):
            bad = _find_bad(item, f"{where}[{i}]", depth + 1)
            if bad:
                return bad
        return None
    if t in _by_type:
        if isinstance(value, enum.Enum):
            return _find_bad(value.value, f"{where}.value", depth + 1)
        for key, item in _fields(value).items():
            bad = _find_bad(item, f"{where}.{key}", depth + 1)
            if bad:
                return bad
        return None
    try:
        _default(value)
    except TypeError:
        return (where, value)
    return None


# --- the one converter for state records ---------------------------------------------------------


def _identity(value: Any) -> Any:
    return value


def _make_converter() -> Any:
    conv = make_converter()
    conv.register_unstructure_hook_func(lambda t: t is Any, _identity)
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _: v)
    conv.register_unstructure_hook(dt.datetime, _identity)
    conv.register_structure_hook(dt.datetime, lambda v, _: v)
    return conv


converter = _make_converter()


def pack_record(record: Any) -> bytes:
    """A state record (attrs) as msgpack bytes, through the converter."""
    return dumps(converter.unstructure(record))


def unpack_record(data: bytes, cls: type[Any]) -> Any:
    try:
        return converter.structure(loads(data), cls)
    except SnapshotError:
        raise
    except Exception as exc:
        msg = f"snapshot does not hold a valid {cls.__name__} ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


Hook = Callable[[Any], Any]
