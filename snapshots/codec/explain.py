"""Why a value cannot be encoded: the first part of it the codec refuses, and its path."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from tarry.engine.errors import NotSerializable
from tarry.snapshots.codec.limits import (
    C_LEVELS,
    DEEP_PLAIN_LIMIT,
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    PLAIN_LIMIT,
)
from tarry.snapshots.codec.registry import _by_type, _fields


def _explain(value: Any, where: str, default: Callable[[int, Any], Any]) -> NotSerializable:
    """Find the first value below `value` that cannot be encoded, and name it. `default` is the
    packer's hook for types msgpack does not know (it raises TypeError for one it refuses)."""
    found = _find_bad(value, where, default)
    if found is None:
        return NotSerializable(where, value)
    return NotSerializable(*found)


def _find_bad(value: Any, where: str, default: Callable[[int, Any], Any]) -> tuple[str, Any] | None:
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
        limit = PLAIN_LIMIT if depth <= C_LEVELS else DEEP_PLAIN_LIMIT
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
                default(0, value)
            except TypeError:
                return (where, value)
            continue
        stack.extend(reversed(children))
    return None


_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def _scalar_ok(value: Any) -> bool:
    t = type(value)
    if t is int:
        return INT_MIN <= value <= INT_MAX
    if t is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return True
