"""Log records in every store (the conformance suite's stores): numbered, bounded, paged, and
gone with their session."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support
from storekit import STORES
from support import at
from tarry.engine.errors import ConcurrentUpdate
from tarry.snapshots import SessionStore, SQLiteStore
from tarry.snapshots.log_records import LogBatch, LogRecord


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made = STORES[request.param](tmp_path)
    assert isinstance(made, SessionStore)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def rec(sid: str = "s1", **changes: Any) -> Any:
    return support.rec(sid, **changes)


def log(n: int, level: str = "INFO", levelno: int = 20) -> LogRecord:
    return LogRecord(
        seq=0,
        at=at(n + 0.000123),
        level=level,
        levelno=levelno,
        logger="app.jobs",
        message=f"message {n} — ünïcode",
        path=("items", n, "fetch"),
    )


def batch(*ns: int, keep: int = 1000, skipped: int = 0, **kw: Any) -> LogBatch:
    return LogBatch(tuple(log(n, **kw) for n in ns), skipped=skipped, keep=keep)


def test_saved_records_are_numbered_and_read_back(store: Any) -> None:
    store.create(rec())
    v = store.save(rec(), 0, logs=batch(1, 2))
    store.save(rec(), v, logs=batch(3, level="WARNING", levelno=30))
    got = store.logs("s1")
    assert [r.seq for r in got] == [1, 2, 3]
    assert got[0] == LogRecord(
        1, at(1.000123), "INFO", 20, "app.jobs", "message 1 — ünïcode", ("items", 1, "fetch")
    )
    assert got[2].level == "WARNING" and got[2].at.tzinfo is not None
    assert store.dropped_logs("s1") == 0


def test_reading_filters_by_level_and_pages_by_seq(store: Any) -> None:
    store.create(rec())
    records = (log(1), log(2, "ERROR", 40), log(3), log(4, "WARNING", 30), log(5, "ERROR", 40))
    store.save(rec(), 0, logs=LogBatch(records))
    assert [r.seq for r in store.logs("s1", levelno=30)] == [2, 4, 5]
    assert [r.seq for r in store.logs("s1", after=2)] == [3, 4, 5]
    assert [r.seq for r in store.logs("s1", after=2, limit=2)] == [3, 4]
    assert [r.seq for r in store.logs("s1", levelno=40, after=2, limit=1)] == [5]
    assert store.logs("s1", after=5) == []
    assert store.logs("s1", limit=0) == []


def test_a_session_keeps_its_last_records(store: Any) -> None:
    store.create(rec())
    v = store.save(rec(), 0, logs=batch(1, 2, 3, keep=4))
    v = store.save(rec(), v, logs=batch(4, 5, 6, keep=4))
    assert [r.seq for r in store.logs("s1")] == [3, 4, 5, 6]
    assert store.logs("s1")[0].message.startswith("message 3")
    assert store.dropped_logs("s1") == 2
    # Records the drive dropped unwritten still count: numbering goes on after them.
    # (Those before them are older than the last 4: dropped too.)
    store.save(rec(), v, logs=batch(9, 10, keep=4, skipped=3))
    got = store.logs("s1")
    assert [r.seq for r in got] == [10, 11] and store.dropped_logs("s1") == 9
    assert [r.message for r in got] == ["message 9 — ünïcode", "message 10 — ünïcode"]


def test_unknown_and_empty_sessions(store: Any) -> None:
    assert store.logs("never") is None
    assert store.dropped_logs("never") == 0
    store.create(rec())
    store.save(rec(), 0, logs=LogBatch(()))
    assert store.logs("s1") == []
    assert store.dropped_logs("s1") == 0


def test_a_refused_save_writes_no_record(store: Any) -> None:
    store.create(rec())
    store.save(rec(), 0, logs=batch(1))
    with pytest.raises(ConcurrentUpdate):
        store.save(rec(), 0, logs=batch(2, 3))
    assert [r.seq for r in store.logs("s1")] == [1]


def test_delete_and_prune_take_the_records(store: Any) -> None:
    for sid in ("gone", "pruned", "kept"):
        store.create(rec(sid))
    store.save(rec("gone"), 0, logs=batch(1))
    store.save(rec("pruned", status="completed", updated_at=at(1)), 0, logs=batch(1))
    store.save(rec("kept"), 0, logs=batch(1))
    store.delete("gone")
    assert store.prune(before=at(50), now=at(60)) == 1
    assert store.logs("gone") is None and store.logs("pruned") is None
    # A session made again under a deleted id starts its numbering afresh.
    store.create(rec("gone"))
    store.save(rec("gone"), 0, logs=batch(7))
    assert [r.seq for r in store.logs("gone")] == [1]
    assert [r.seq for r in store.logs("kept")] == [1]


def test_sqlite_file_at_version_2_gets_the_logs_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        store.create(rec())
    db = sqlite3.connect(path)
    db.execute("DROP TABLE logs")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        store.save(rec(), 0, logs=batch(1))
        assert [r.seq for r in store.logs("s1")] == [1]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (8,)
    db.close()
