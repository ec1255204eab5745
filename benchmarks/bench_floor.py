"""The plain-Python floor: what the workloads cost with no engine at all."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any


def noop(ctx: Any) -> None:
    return None


def plain_loop(n: int) -> Callable[[], None]:
    """A loop calling the same no-op function n times."""

    def run() -> None:
        for _ in range(n):
            noop(None)

    return run


def yield_from(n: int) -> Callable[[], list[Any]]:
    """n no-op calls, each through a 3-deep `yield from` chain (tarry's flow -> container ->
    step nesting), collecting the outputs."""

    def leaf(i: int):
        yield None
        return noop(i)

    def mid(i: int):
        return (yield from leaf(i))

    def top():
        out = []
        for i in range(n):
            out.append((yield from mid(i)))
        return out

    def run() -> list[Any]:
        gen = top()
        try:
            while True:
                gen.send(None)
        except StopIteration as stop:
            return stop.value

    return run


def sqlite_commits(path: Path, n: int) -> Callable[[], None]:
    """n transactions, each inserting one small row and committing, on a WAL file with
    synchronous=NORMAL (the settings of tarry's SQLiteStore)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS log (id INTEGER PRIMARY KEY, blob BLOB NOT NULL)")
    blob = b"x" * 100

    def run() -> None:
        for _ in range(n):
            db.execute("BEGIN")
            db.execute("INSERT INTO log (blob) VALUES (?)", (blob,))
            db.execute("COMMIT")

    return run
