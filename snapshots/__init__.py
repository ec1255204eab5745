"""How runs are saved: the msgpack codec, session records, and the session stores.

`PostgresStore` is loaded on first use (`from tarry.snapshots import PostgresStore`), so that
this package imports without its optional dependencies (the `postgres` extra). It is not in
`__all__`: a star import must not need them either.
"""

from typing import Any

from ._codec import check, dumps, loads, register
from .memory import MemoryStore
from .records import SessionRecord, TokenInfo
from .sqlite import SQLiteStore
from .store import SessionStore

__all__ = [
    "MemoryStore",
    "SQLiteStore",
    "SessionRecord",
    "SessionStore",
    "TokenInfo",
    "check",
    "dumps",
    "loads",
    "register",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        # ModuleNotFoundError naming the extra to install if psycopg is missing.
        from .postgres import PostgresStore

        return PostgresStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
