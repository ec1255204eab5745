"""Why a value cannot be encoded: the first part of it the codec refuses, and its path."""

from __future__ import annotations

import enum
from typing import Any

from tarry.engine.errors import NotSerializable
from tarry.snapshots.codec.registry import _by_type, _fields


def _explain(value: Any, where: str) -> NotSerializable:
    """Find the first value below `value` that cannot be encoded, and name it."""
    found = _find_bad(value, where)
    if found is None:
        return NotSerializable(where, value)
    return NotSerializable(*found)


def _find_bad(value: Any, where: str) -> tuple[str, Any] | None:
    from tarry.snapshots.codec.pack import (
        _C_LEVELS,
        _DEEP_PLAIN_LIMIT,
        _PLAIN_LIMIT,
        MAX_DEPTH,
        _default,
    )

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
    from tarry.snapshots.codec.pack import _INT_MAX, _INT_MIN

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
