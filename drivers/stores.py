"""Opening a store from a URL: `memory://`, `sqlite:///path.db`, `postgresql://...`."""

from __future__ import annotations

from tarry.snapshots.memory import MemoryStore
from tarry.snapshots.store import SessionStore


def open_store(store: None | str | SessionStore) -> SessionStore:
    if store is None:
        return MemoryStore()
    if not isinstance(store, str):
        return store
    if store == "memory://" or store == "memory:":
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
