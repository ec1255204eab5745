"""The codec's named types: ext codes, and the records and enums registered for snapshots."""

from __future__ import annotations

import datetime as dt
import enum
import re
from typing import Any

import attrs

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

_by_name: dict[str, type] = {}
_by_type: dict[type, str] = {}


def register(cls: type, name: str | None = None) -> type:
    """Allow instances of an attrs class, dataclass or Enum in snapshots, stored under `name`
    (default: `module.QualName`). Usable as a decorator. Re-registering the same class is a
    no-op; a name taken by another class is an error."""
    import dataclasses  # here, not at import: only processes that register records need it

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
    if attrs.has(type(obj)):
        fields: Any = attrs.fields(type(obj))
    else:
        import dataclasses  # loaded already: the record is a dataclass

        fields = dataclasses.fields(obj)
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
        import dataclasses  # loaded already: the record is a dataclass

        for f in dataclasses.fields(cls):
            if f.name in values:
                (init if f.init else late)[f.name] = values[f.name]
    obj = cls(**init)
    for key, value in late.items():
        object.__setattr__(obj, key, value)
    return obj


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


def _kind(value: Any) -> str:
    """A short description of a decoded value for error messages (never its whole repr)."""
    if type(value) is list:
        return f"an array of {len(value)}"
    return f"a {type(value).__name__}"
