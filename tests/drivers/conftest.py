"""Fixtures of the driver tests: a fresh store of each kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A new, empty store: in memory, an SQLite file, or a PostgreSQL schema of its own (skipped
    without a server, failed under CI). A test module may narrow the kinds with
    `@pytest.mark.parametrize("store", [...], indirect=True)`."""
    from tarry.snapshots import MemoryStore, SQLiteStore

    if request.param == "memory":
        made: Any = MemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "store.db")
    else:
        import pgserver

        made = pgserver.scratch_store()
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()
