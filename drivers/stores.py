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
        msg = "PostgresStore is not available yet (it comes with the 'postgres' extra)"
        raise ValueError(msg)
    msg = f"unknown store URL {store!r} (expected memory://, sqlite:///path.db or postgresql://...)"
    raise ValueError(msg)
