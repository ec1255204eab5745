"""The snapshot codec: msgpack plus named ext types, and the one cattrs converter.

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

import dataclasses
import datetime as dt
import enum
import functools
import re
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import msgpack
from tarry.engine.errors import NotSerializable, PayloadTooLarge, SnapshotError
from tarry.engine.values import immutable

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

#: Deepest nesting of ext values (tuples, sets, records, enums) inside one another.
MAX_DEPTH = 100
#: The outermost ext levels are packed and unpacked by msgpack's fast C calls, whose lists and
#: dicts may nest up to msgpack's own limit (`_PLAIN_LIMIT`); deeper ones are unpacked by a
#: heap-allocated `Unpacker`, and their lists and dicts may nest at most `_DEEP_PLAIN_LIMIT`
#: levels, so the worst case stays a few MiB of C stack.
_C_LEVELS = 4
_PLAIN_LIMIT = 1024
_DEEP_PLAIN_LIMIT = 32
#: Lists and dicts a checked value leaves free for where it is stored: the envelope, the
#: state, an event, and one level per container whose output holds it.
_HEADROOM = 64

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

_by_name: dict[str, type] = {}
_by_type: dict[type, str] = {}


def register(cls: type, name: str | None = None) -> type:
    """Allow instances of an attrs class, dataclass or Enum in snapshots, stored under `name`
    (default: `module.QualName`). Usable as a decorator. Re-registering the same class is a
    no-op; a name taken by another class is an error."""
    if not isinstance(cls, type) or not (
        attrs.has(cls) or dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum)
    ):
        msg = f"register() takes an attrs class, a dataclass or an Enum (got {cls!r})"
        raise TypeError(msg)
    if name is not None and (type(name) is not str or not name):
        msg = f"register() name must be a non-empty str (got {name!r})"
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


_UNSET = object()


def _fields(obj: Any) -> dict[str, Any]:
    """A record's fields by name; a field that was never set (init=False, no default) is left
    out, so it stays unset after a round trip instead of failing the encoding."""
    fields = attrs.fields(type(obj)) if attrs.has(type(obj)) else dataclasses.fields(obj)
    values = {f.name: getattr(obj, f.name, _UNSET) for f in fields}
    return {key: value for key, value in values.items() if value is not _UNSET}


def _build(cls: type, values: dict[str, Any]) -> Any:
    """An instance of a registered record from its stored fields: init fields go through the
    constructor (so validators run), the others are set afterwards. Stored fields the class no
    longer has are ignored; missing ones take their defaults."""
    init: dict[str, Any] = {}
    late: dict[str, Any] = {}
    if attrs.has(cls):
        for f in attrs.fields(cls):
            if f.name in values:
                (init if f.init else late)[f.alias if f.init else f.name] = values[f.name]
    else:
        for f in dataclasses.fields(cls):
            if f.name in values:
                (init if f.init else late)[f.name] = values[f.name]
    obj = cls(**init)
    for key, value in late.items():
        object.__setattr__(obj, key, value)
    return obj


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
    try:
        return _packers.get(depth).pack(value)
    except BaseException:
        _packers.by_depth[depth] = None  # never reuse a packer whose buffer may be half-written
        raise


def _ext(code: int, payload: Any, depth: int) -> msgpack.ExtType:
    """An ext value at nesting `depth + 1` holding `payload` as a msgpack document."""
    if depth >= MAX_DEPTH:
        msg = f"values nest more than {MAX_DEPTH} tuples, sets, records or enums deep"
        raise ValueError(msg)
    if depth >= _C_LEVELS and _plain_depth_exceeds(payload, _DEEP_PLAIN_LIMIT):
        msg = (
            f"lists and dicts nest more than {_DEEP_PLAIN_LIMIT} levels deep inside a value "
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
        return msgpack.ExtType(EXT_TIMEDELTA, msgpack.packb([obj.days, obj.seconds, obj.microseconds]))
    if t is uuid.UUID:
        return msgpack.ExtType(EXT_UUID, obj.bytes)
    if t is _decimal_type():
        return msgpack.ExtType(EXT_DECIMAL, str(obj).encode())
    if isinstance(obj, dict):  # dict subclasses (OrderedDict, defaultdict...) are stored as dicts
        return dict(obj)
    if isinstance(obj, bool | int | float | str | bytes) and not isinstance(obj, enum.Enum):
        for base in (bool, int, float, str, bytes):
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
    if depth <= _C_LEVELS:
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
_SUBSECOND_OFFSET = re.compile(r"([+-])00:00:00\.(\d{6})$")


def _from_iso(cls: type[Any], data: bytes) -> Any:
    """A datetime or time from its isoformat text, with its exact UTC offset."""
    text = data.decode("ascii")
    value = cls.fromisoformat(text)
    if value.tzinfo is not None and not value.utcoffset():
        tiny = _SUBSECOND_OFFSET.search(text)
        if tiny is not None:
            micros = int(tiny[2]) * (-1 if tiny[1] == "-" else 1)
            value = value.replace(tzinfo=dt.timezone(dt.timedelta(microseconds=micros)))
    return value


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


def _kind(value: Any) -> str:
    """A short description of a decoded value for error messages (never its whole repr)."""
    if type(value) is list:
        return f"an array of {len(value)}"
    return f"a {type(value).__name__}"


# --- the public functions ------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    """Encode `value`; raises NotSerializable naming the first value that cannot be encoded."""
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _explain(value, "value") from exc


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
_ALWAYS_OK = frozenset({type(None), bool, float})


def check(value: Any, where: str = "value", limit: int | None = None) -> None:
    """Raise NotSerializable (naming the path and type) unless `value` can be encoded, and
    PayloadTooLarge when `limit` is given and its encoding is longer than `limit` bytes.

    Scalars return at once; anything else is packed in C, which is faster than a Python walk.
    """
    t = type(value)
    if t in _ALWAYS_OK:
        return
    if t is int and _INT_MIN <= value <= _INT_MAX:
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
        if size > _PLAIN_LIMIT - _HEADROOM:
            _pack(_wrapped(value, _HEADROOM))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _explain(value, where) from exc
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
    if t is int and _INT_MIN <= value <= _INT_MAX:
        return value, _int_size(value)
    if (t is str and value.isascii()) or (t is bytes and len(value) < 2**32):
        size = len(value) + _header(len(value), t is str)
        if limit is not None and size > limit:
            raise PayloadTooLarge(where, size, limit)
        return value, size
    try:
        blob = _pack(value)
        if len(blob) > _PLAIN_LIMIT - _HEADROOM:  # see `check`
            _pack(_wrapped(value, _HEADROOM))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _explain(value, where) from exc
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
    """Bytes msgpack takes for the int `n` (within _INT_MIN.._INT_MAX)."""
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


def _explain(value: Any, where: str) -> NotSerializable:
    """Find the first value below `value` that cannot be encoded, and name it."""
    found = _find_bad(value, where)
    if found is None:
        return NotSerializable(where, value)
    return NotSerializable(*found)


def _find_bad(value: Any, where: str) -> tuple[str, Any] | None:
    """The path and value of the first thing `_pack` refuses, depth first, or None.

    A loop rather than recursion, so values nested deeper than Python's recursion limit are
    named too. It mirrors `_default` and the nesting limits.
    """
    stack: list[tuple[Any, str, int, int]] = [(value, where, 0, 0)]  # value, path, ext, plain
    while stack:
        value, where, depth, plain = stack.pop()
        t = type(value)
        if t in _SCALARS:
            if not _scalar_ok(value):
                return (where, value)
            continue
        limit = _PLAIN_LIMIT if depth <= _C_LEVELS else _DEEP_PLAIN_LIMIT
        children: list[tuple[Any, str, int, int]] = []
        if t is list or (isinstance(value, dict) and t not in _by_type):
            if plain >= limit:
                return (where, value)
            if t is list:
                children = [(x, f"{where}[{i}]", depth, plain + 1) for i, x in enumerate(value)]
            else:
                for key, item in value.items():
                    children.append((key, f"{where} key {key!r}", depth, plain + 1))
                    children.append((item, f"{where}[{key!r}]", depth, plain + 1))
        elif t is tuple or t is set or t is frozenset or t in _by_type:
            if depth >= MAX_DEPTH:
                return (where, value)
            if t in _by_type and isinstance(value, enum.Enum):
                children = [(value.value, f"{where}.value", depth + 1, 1)]
            elif t in _by_type:
                fields = _fields(value).items()
                children = [(item, f"{where}.{key}", depth + 1, 2) for key, item in fields]
            else:
                children = [(x, f"{where}[{i}]", depth + 1, 1) for i, x in enumerate(value)]
        else:
            try:
                _default(0, value)
            except TypeError:
                return (where, value)
            continue
        stack.extend(reversed(children))
    return None


_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def _scalar_ok(value: Any) -> bool:
    t = type(value)
    if t is int:
        return _INT_MIN <= value <= _INT_MAX
    if t is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return True


# --- the one converter for state records ---------------------------------------------------------


def _identity(value: Any) -> Any:
    return value


@functools.cache
def converter() -> Any:
    """The one converter, built (with all its hooks) on first use. Its hooks for the state
    records are wire.py's functions, which `encode_state`/`decode_state` call directly:
    importing cattrs and building the converter takes about 20 ms, and a process that starts
    to resume one session (a CLI call, a worker) should not pay that to decode it."""
    from cattrs.preconf.msgpack import make_converter

    conv = make_converter()
    conv.register_unstructure_hook_func(lambda t: t is Any, _identity)
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _: v)
    conv.register_unstructure_hook(dt.datetime, _identity)
    conv.register_structure_hook(dt.datetime, lambda v, _: v)
    # The state records' own hooks, written by hand (see wire.py).
    from .wire import HOOKS

    for cls, write, read in HOOKS:
        conv.register_unstructure_hook(cls, write)
        conv.register_structure_hook(cls, _reader(read))
    return conv


def _reader(read: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda value, _cls: read(value)


def pack_record(record: Any) -> bytes:
    """A state record (attrs) as msgpack bytes, through the converter."""
    return dumps(converter().unstructure(record))


def unpack_record(data: bytes, cls: type[Any]) -> Any:
    try:
        return converter().structure(loads(data), cls)
    except SnapshotError:
        raise
    except Exception as exc:
        msg = f"snapshot does not hold a valid {cls.__name__} ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


