"""How runs are saved: the msgpack codec, session records, and the session stores."""

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
