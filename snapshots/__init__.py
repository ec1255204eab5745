"""How runs are saved: the msgpack codec, session records, and the session stores.

The stores are loaded on first use (`from tarry.snapshots import SQLiteStore`): `import tarry`
stays quick, and `PostgresStore` imports without its optional dependencies (the `postgres`
extra) until it is asked for. `PostgresStore` is not in `__all__`: a star import must not need
them either.
"""

from importlib import import_module

TYPE_CHECKING = False  # not typing's: `import tarry.snapshots.X` must not import typing
if TYPE_CHECKING:  # what __getattr__ loads, as type checkers should see it
    from tarry.snapshots.codec.check import check
    from tarry.snapshots.codec.pack import dumps, loads, register
    from tarry.snapshots.memory.store import MemoryStore
    from tarry.snapshots.postgres.store import (
        PostgresStore as PostgresStore,  # not in __all__ (see above)
    )
    from tarry.snapshots.records import SessionRecord, TokenInfo, WaitRecord
    from tarry.snapshots.sqlite.store import SQLiteStore
    from tarry.snapshots.store import SessionStore

#: Every name is loaded when first read (PEP 562): importing any `tarry.snapshots.X` runs this
#: file first, and should not pay for the codec's checks, the records or the stores it does
#: not use.
_LAZY = {
    "check": ".codec.check",
    "dumps": ".codec.pack",
    "loads": ".codec.pack",
    "register": ".codec.pack",
    "SessionRecord": ".records",
    "TokenInfo": ".records",
    "WaitRecord": ".records",
    "SessionStore": ".store",
    "MemoryStore": ".memory.store",
    "SQLiteStore": ".sqlite.store",
    "PostgresStore": ".postgres.store",
}

__all__ = [
    "MemoryStore",
    "SQLiteStore",
    "SessionRecord",
    "SessionStore",
    "TokenInfo",
    "WaitRecord",
    "check",
    "dumps",
    "loads",
    "register",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is not None:
        # For PostgresStore: ModuleNotFoundError naming the extra to install if psycopg is
        # missing.
        value = getattr(import_module(module, __name__), name)
        globals()[name] = value
        return value
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
