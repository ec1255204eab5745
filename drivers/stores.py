"""Opening a store from a URL: `memory://`, `sqlite:///path.db`, `postgresql://...`."""

from __future__ import annotations

from tarry.snapshots.store import SessionStore


def open_store(store: None | str | SessionStore) -> SessionStore:
    # Each store's module is imported when it is opened, so `import tarry` loads none of them.
    if not (store is None or isinstance(store, str)):
        return store
    if store is None or store == "memory://" or store == "memory:":
        from tarry.snapshots.memory import MemoryStore

        return MemoryStore()
    if store.startswith("sqlite:///"):
        from tarry.snapshots.sqlite import SQLiteStore

        return SQLiteStore(store[len("sqlite:///") :])
    if store.startswith(("postgresql://", "postgres://")):
        # Imported here: psycopg is an optional dependency (the 'postgres' extra).
        from tarry.snapshots.postgres import PostgresStore

        return PostgresStore(store)
    msg = f"unknown store URL {store!r} (expected memory://, sqlite:///path.db or postgresql://...)"
    raise ValueError(msg)
