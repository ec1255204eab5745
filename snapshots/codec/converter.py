"""The one cattrs converter for state records, built on first use."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any

from tarry.engine.errors import SnapshotError
from tarry.snapshots.codec.pack import dumps, loads

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
    from tarry.snapshots.codec.wire import HOOKS

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
