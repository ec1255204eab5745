"""Opening a store from a URL: `memory://`, `sqlite:///path.db`, `postgresql://...`.

SQLite URLs follow SQLAlchemy's convention: `sqlite:///runs.db` is relative to the current
directory, `sqlite:////var/lib/runs.db` (four slashes) absolute.
"""

from __future__ import annotations

import os

from tarry.engine.errors import InvalidArgument
from tarry.snapshots.store import SessionStore

SQLITE = "sqlite:///"


def sqlite_path(url: str) -> str | None:
    """The file a `sqlite:///...` URL names (relative unless it has four slashes); None for
    another URL."""
    return url[len(SQLITE) :] if url.startswith(SQLITE) else None


def slashes_hint(path: str) -> str:
    """What to add to a message about a relative SQLite path that may have been meant as an
    absolute one (`sqlite:///tmp/x.db`): the hint when the absolute reading's folder exists."""
    folder = os.path.dirname("/" + path)
    if os.path.isabs(path) or folder == "/" or not os.path.isdir(folder):
        return ""
    return (
        f"; a path after sqlite:/// is relative to the current directory ({os.getcwd()}): "
        f"an absolute one takes four slashes, sqlite:////{path}"
    )


#: What a store object must have: any object with these is taken as a SessionStore.
_STORE_METHODS = ("create", "load", "save", "consume_token")


def open_store(store: None | str | SessionStore) -> SessionStore:
    """The store `store` names (a URL), is (a store object), or a new MemoryStore (None);
    InvalidArgument for anything else."""
    # Each store's module is imported when it is opened, so `import tarry` loads none of them.
    if not (store is None or isinstance(store, str)):
        if all(callable(getattr(store, name, None)) for name in _STORE_METHODS):
            return store
        msg = (
            f"store must be a URL (memory://, sqlite:///path.db, postgresql://...) or a store "
            f"object such as tarry.snapshots.SQLiteStore (got {store!r})"
        )
        raise InvalidArgument(msg)
    if store is None or store == "memory://" or store == "memory:":
        from tarry.snapshots.memory.store import MemoryStore

        return MemoryStore()
    path = sqlite_path(store)
    if path is not None:
        if not path:
            msg = f"the SQLite store URL {store!r} names no file (expected sqlite:///path.db)"
            raise InvalidArgument(msg)
        import sqlite3

        from tarry.snapshots.sqlite.store import SQLiteStore

        try:
            return SQLiteStore(path)
        except sqlite3.Error as exc:  # no such folder, no permission, not a database
            where = path if path == ":memory:" else os.path.abspath(path)
            msg = f"cannot open the SQLite store {store!r} (the file {where}): {exc}"
            raise InvalidArgument(msg + slashes_hint(path)) from exc
    if store.startswith(("postgresql://", "postgres://")):
        # Imported here: psycopg is an optional dependency (the 'postgres' extra); without it,
        # an ImportError that says to install it.
        from tarry.snapshots.postgres.store import PostgresStore

        return PostgresStore(store)
    msg = f"unknown store URL {store!r} (expected memory://, sqlite:///path.db or postgresql://...)"
    raise InvalidArgument(msg)
