"""The three stores every store test runs against, and small helpers for store tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pgserver
from support import WAIT
from tarry.snapshots import MemoryStore, SQLiteStore

#: A new store joins by adding a factory taking pytest's tmp_path; a store that needs a server
#: (PostgresStore) skips in its factory when none is set up (and fails under CI).
STORES: dict[str, Callable[[Path], Any]] = {
    "memory": lambda tmp_path: MemoryStore(),
    "sqlite": lambda tmp_path: SQLiteStore(tmp_path / "s.db"),
    # A schema no other test sees (emptied on close).
    "postgres": lambda tmp_path: pgserver.scratch_store(),
}

THREADS = 8


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Call fn(0..n-1) from n threads released together; each result, or the exception raised."""
    barrier = threading.Barrier(n)

    def run(i: int) -> Any:
        barrier.wait(timeout=WAIT)
        try:
            return fn(i)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))
