"""The shapes that keep the stores fast on the pause -> resume and durable-step paths: which SQL
statements SQLiteStore sends, which indexes they use, and how MemoryStore keeps events (one
encoded blob per write), with the guarantees those shortcuts must not weaken."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import T0, at, rec
from tarry import Flow, ForEach, Runtime, step
from tarry.engine.errors import ConcurrentUpdate, NotSerializable
from tarry.engine.state.events import NODE_COMPLETED, RUN_STARTED, Event
from tarry.snapshots import MemoryStore, SQLiteStore, TokenInfo
from tarry.snapshots.memory import entry as store_module_memory
from tarry.snapshots.memory.store import _decode_batch, _encode_batch
from tarry.snapshots.records import encode_event
from tarry.snapshots.sqlite import sql as sqlite_module
from tarry.snapshots.sqlite import store as store_module


def ev(seq: int, sid: str = "s1", **data: Any) -> Event:
    type_ = RUN_STARTED if seq == 1 else NODE_COMPLETED
    return Event(seq, type_, sid, at(seq), ("loop", seq, "work"), data or {"n": seq})


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db") as store:
        yield store


class Statements:
    """The SQL statements a store's connection runs, first word(s) only."""

    def __init__(self, store: SQLiteStore) -> None:
        self.seen: list[str] = []
        store._db.set_trace_callback(self.seen.append)

    def take(self) -> list[str]:
        words = [" ".join(s.split()[:3]) for s in self.seen]
        self.seen.clear()
        return words


# -- SQLite: statements per operation ------------------------------------------------------------


def test_sqlite_durable_step_is_one_insert_in_one_commit(sqlite_store: SQLiteStore) -> None:
    sqlite_store.create(rec(), events=[ev(1)])
    sql = Statements(sqlite_store)
    sqlite_store.append_events("s1", [ev(2), ev(3)])
    # Both events and the check that they continue the log in one statement (no MAX(seq)),
    # which SQLite runs as a transaction of its own.
    assert sql.take() == ["INSERT INTO events"]
    assert [e.seq for e in sqlite_store.events("s1")] == [1, 2, 3]


def test_sqlite_resume_and_pause_statements(sqlite_store: SQLiteStore) -> None:
    sqlite_store.create(rec(status="paused", token="tk_1"), events=[ev(1)])
    sql = Statements(sqlite_store)
    assert sqlite_store.consume_token("tk_1", owner="w", until=at(60), events=[ev(2)])
    # A token with no wait (a record's own) is used in the tokens table, after the UPDATE of
    # the waits (where a waiting branch's token lives) found none; the lease UPDATE checks that
    # the events continue the log; the SELECT names the session and its indexed columns for
    # the save below.
    assert sql.take() == [
        "BEGIN IMMEDIATE",
        "UPDATE waits SET",
        "UPDATE tokens SET",
        "SELECT t.session_id, status,",
        "UPDATE sessions SET",
        "INSERT INTO events",
        "COMMIT",
    ]
    events = [ev(3), ev(4), ev(5), ev(6)]
    paused = rec(status="paused", token="tk_2", state=b"later")
    assert sqlite_store.save(paused, 0, events=events, values=[("k", 0, b"v"), ("k", 1, b"w")])
    assert sql.take() == [
        "BEGIN IMMEDIATE",
        "UPDATE sessions SET",
        "INSERT INTO events",
        "INSERT OR REPLACE",
        # Its token has no wait: registered in the tokens table.
        "SELECT 1 FROM",
        "INSERT OR IGNORE",
        # A paused session wakes for the earliest of its waits (one index probe; written
        # only when earlier than the record's own).
        "SELECT (SELECT min(wake_at)",
        "COMMIT",
    ]


def test_sqlite_pause_resume_round_trip_statements(
    tmp_path: Path, ticks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the resume's own statements are counted, however slow the machine: no drive ticks
    # (a tick a second renews the lease, reads the stop request and writes the progress: 7
    # statements more), no round of the lease keeper's thread (a renewal), and the store's
    # "signed tokens" mark, read at most once a second (drivers/tokens.py), is not read again
    # inside the counted resume.
    from tarry.drivers.drive.lease_keeper import LeaseKeeper

    monkeypatch.setattr(LeaseKeeper, "_run", lambda self: None)
    monkeypatch.setattr("tarry.drivers.tokens.RECHECK_SECONDS", 3600.0)

    def work(ctx: Any) -> Any:
        if ctx.index >= 2:
            ctx.interrupt("review")
        return ctx.item

    store = SQLiteStore(tmp_path / "rt.db")
    rt = Runtime(store=store)
    out = rt.run(Flow("loop", [ForEach("items", list(range(20)), step(work, "work"))]))
    out = rt.resume(out.token, True)
    sql = Statements(store)
    out = rt.resume(out.token, True)
    assert out.paused
    # find_token, load, 7 to use the token (one drops its wait), 2 reads of items, 7 to save
    # (one registers the new wait) (23 before issue 5).
    assert len(sql.take()) <= 18
    store.close()


def test_sqlite_save_leaves_unchanged_indexed_columns_alone(sqlite_store: SQLiteStore) -> None:
    sqlite_store.create(rec(status="paused", token="tk_1"))
    assert sqlite_store.consume_token("tk_1", owner="w", until=at(60))  # now running
    sql = Statements(sqlite_store)
    sqlite_store.save(rec(status="running", state=b"new"), 0)  # a running drive's progress
    (update,) = [s for s in sql.seen if s.startswith("UPDATE sessions")]
    assigned = update.split(" WHERE ")[0]
    assert "status =" not in assigned and "wake_at =" not in assigned
    assert "state =" in assigned and "lease_until =" in assigned
    # A save that changes them assigns them, in one UPDATE still.
    sql.seen.clear()
    sqlite_store.save(rec(status="completed", state=b"done"), 1)
    (update,) = [s for s in sql.seen if s.startswith("UPDATE sessions")]
    assert "status =" in update.split(" WHERE ")[0]
    assert [r.session_id for r in sqlite_store.list(status="completed")] == ["s1"]


def test_sqlite_save_assigns_what_another_writer_changed(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    with SQLiteStore(path) as store:
        store.create(rec(status="paused", wake_at=at(5), token="tk_1"))
        assert store.consume_token("tk_1", owner="w", until=at(60))
        # Behind the store's back: the indexed columns change, the version does not.
        other = sqlite3.connect(path)
        other.execute("UPDATE sessions SET status = 'running', wake_at = NULL")
        other.commit()
        other.close()
        # What the store saw is stale: the save must still write status and wake_at.
        assert store.save(rec(status="paused", wake_at=at(5)), 0) == 1
        loaded = store.load("s1")
        assert (loaded.status, loaded.wake_at, loaded.version) == ("paused", at(5), 1)
        assert [r.session_id for r in store.due(at(10))] == ["s1"]
        assert [r.session_id for r in store.list(status="paused")] == ["s1"]
        assert store.list(status="running") == []
        assert store._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_sqlite_indexes_stay_consistent_over_status_changes(sqlite_store: SQLiteStore) -> None:
    sqlite_store.create(rec(token="tk_0"), events=[ev(1)])
    version, seq = 0, 1
    for i, (status, wake) in enumerate(
        [("paused", None), ("paused", at(3)), ("running", None), ("paused", at(4))] * 3
    ):
        version = sqlite_store.save(
            rec(status=status, wake_at=wake, token=f"tk_{i + 1}"), version, events=[ev(seq + 1)]
        )
        seq += 1
        assert [r.status for r in sqlite_store.list(status=status)] == [status]
        assert bool(sqlite_store.due(at(10))) == (status == "paused" and wake is not None)
        assert sqlite_store.consume_token(
            f"tk_{i + 1}", owner="w", until=at(60), events=[ev(seq + 1)]
        )
        seq += 1
        assert [r.status for r in sqlite_store.list(status="running")] == ["running"]
        assert not sqlite_store.due(at(10))  # a resumed session runs: no timer is due
    assert sqlite_store._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert [e.seq for e in sqlite_store.events("s1")] == list(range(1, seq + 1))


# -- SQLite: continuity and atomicity of the shortened writes ------------------------------------


@pytest.mark.parametrize("owner", ["w2", None])
def test_sqlite_consume_with_events_that_skip_changes_nothing(
    sqlite_store: SQLiteStore, owner: str | None
) -> None:
    sqlite_store.create(rec(token="tk_1", lease_owner="w1", lease_until=at(9)), events=[ev(1)])
    with pytest.raises(ConcurrentUpdate, match="does not follow 1"):
        sqlite_store.consume_token("tk_1", owner=owner, until=at(99), events=[ev(3)])
    assert sqlite_store.find_token("tk_1") == TokenInfo("s1", False)
    assert sqlite_store.load("s1").lease_owner == "w1"
    assert [e.seq for e in sqlite_store.events("s1")] == [1]
    assert sqlite_store.consume_token("tk_1", owner=owner, until=at(99), events=[ev(2)])


def test_sqlite_batches_longer_than_one_insert(sqlite_store: SQLiteStore) -> None:
    rows = sqlite_module._ROWS_PER_INSERT * 3 + 5
    sqlite_store.create(rec(), events=[ev(s) for s in range(1, rows + 1)])
    values = [("k", i, bytes([i % 256]) * 3) for i in range(rows)]
    sqlite_store.put_values("s1", values)
    sqlite_store.put_values("ghost", values)  # unknown session: dropped, nothing counted
    version = sqlite_store.save(rec(), 0, events=[ev(s) for s in range(rows + 1, 2 * rows + 1)])
    assert version == 1
    assert [e.seq for e in sqlite_store.events("s1")] == list(range(1, 2 * rows + 1))
    assert sqlite_store.get_values("s1", "k", rows) == [blob for _, _, blob in values]
    assert sqlite_store.get_values("ghost", "k", rows) == []
    # A long batch that does not continue the log writes none of its chunks.
    with pytest.raises(ConcurrentUpdate):
        sqlite_store.append_events("s1", [ev(s) for s in range(2 * rows, 3 * rows)])
    assert len(sqlite_store.events("s1")) == 2 * rows


def test_sqlite_append_to_a_fresh_session_and_to_none(sqlite_store: SQLiteStore) -> None:
    sqlite_store.create(rec())
    sqlite_store.append_events("s1", [ev(1), ev(2)])  # seq 1: the session itself must exist
    with pytest.raises(ConcurrentUpdate, match="no session 'ghost'"):
        sqlite_store.append_events("ghost", [ev(1, "ghost")])
    with pytest.raises(ConcurrentUpdate, match="does not follow 2"):
        sqlite_store.append_events("s1", [ev(1)])
    assert [e.seq for e in sqlite_store.events("s1")] == [1, 2]


# -- SQLite: query plans -------------------------------------------------------------------------


def plan(store: SQLiteStore, sql: str, args: tuple[Any, ...]) -> str:
    return " | ".join(row[3] for row in store._db.execute(f"EXPLAIN QUERY PLAN {sql}", args))


def test_sqlite_hot_and_worker_queries_use_indexes(sqlite_store: SQLiteStore) -> None:
    m = sqlite_module
    queries = {
        "load": (m._LOAD, ("s",)),
        "token": (m._TOKEN_SESSION, ("t",)),
        "follows": (m._FOLLOWS, ("s", 3)),
        "resuming": (m._RESUMING, ("s", "w", 1, 3)),
        "save": (m._update((True, True, True, False)), (None,) * (len(m._NAMES) + 3)),
        "expired": (m._EXPIRED, (1, 0, "", 10)),
        "due": (m._DUE, (1, 10)),
        "claim due": (m._CLAIM_DUE, ("w", 2, 1, 0, "", 10)),
        "events": ("SELECT blob FROM events WHERE session_id = ? AND seq > ?", ("s", 0)),
    }
    for name, (sql, args) in queries.items():
        found = plan(sqlite_store, sql, args)
        # No full scan of a table: every lookup goes through an index or the primary key.
        for table in ("sessions", "events", "tokens", "vals"):
            assert f"SCAN {table}" not in found, (name, found)
    # Timers and leases walk their partial indexes in order: no sort of every paused session.
    expired = plan(sqlite_store, m._EXPIRED, (1, 0, "", 10))
    assert "INDEX sessions_lease ((lease_until,session_id)>(?,?) AND lease_until<?)" in expired
    assert "TEMP B-TREE" not in expired
    for sql, args in ((m._CLAIM_DUE, ("w", 2, 1, 0, "", 10)), (m._DUE, (1, 10))):
        found = plan(sqlite_store, sql, args)
        assert "INDEX sessions_wake (" in found, found
        assert "TEMP B-TREE" not in found, found


@pytest.mark.parametrize(
    ("status", "flow", "index"),
    [
        ("paused", None, "sessions_phase_created (phase=?)"),
        ("failed", "f", "sessions_phase_created (phase=?)"),
        (None, "f", "sessions_flow_created (flow=?)"),
        (None, None, "sessions_created"),
    ],
)
def test_sqlite_listings_walk_an_index_newest_first(
    sqlite_store: SQLiteStore, status: str | None, flow: str | None, index: str
) -> None:
    sql, args = sqlite_module.LISTING.sql(
        status=status,
        flow=flow,
        limit=10,
        offset=0,
        before=None,
        since=None,
        until=None,
        search=None,
    )
    found = plan(sqlite_store, sql, tuple(args))
    assert f"INDEX {index}" in found, found
    assert "TEMP B-TREE" not in found, found


def test_sqlite_sessions_indexes_a_resume_leaves_alone(sqlite_store: SQLiteStore) -> None:
    """Schema 6: no index of sessions leads with its status (whose entry would move at every
    pause and resume); timers and leases have partial ones."""
    indexes = dict(
        sqlite_store._db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions' "
            "AND sql IS NOT NULL"
        ).fetchall()
    )
    assert set(indexes) == {
        "sessions_created",
        "sessions_flow_created",
        "sessions_phase_created",
        "sessions_ended",
        "sessions_wake",
        "sessions_lease",
    }
    assert "WHERE status = 'paused' AND wake_at IS NOT NULL" in indexes["sessions_wake"]
    assert "WHERE lease_until IS NOT NULL" in indexes["sessions_lease"]


def test_sqlite_expired_finds_leases_of_every_status(sqlite_store: SQLiteStore) -> None:
    for i, status in enumerate(["running", "paused", "failed", "zzz-unusual", "completed"]):
        sqlite_store.create(rec(f"s{i}", status=status, lease_owner="w", lease_until=at(i)))
    sqlite_store.create(rec("free", status="running"))
    assert [r.session_id for r in sqlite_store.expired(at(10))] == ["s0", "s1", "s2", "s3", "s4"]
    assert [r.session_id for r in sqlite_store.expired(at(2))] == ["s0", "s1", "s2"]


def test_sqlite_checkpoints_rarely(sqlite_store: SQLiteStore) -> None:
    assert sqlite_store._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (10_000,)


def test_sqlite_keeps_a_big_save_in_memory_until_it_commits(sqlite_store: SQLiteStore) -> None:
    # Pages are spilled to the WAL mid-transaction only past SPILL_BYTES (then written twice).
    spill = sqlite_store._db.execute("PRAGMA cache_spill").fetchone()[0]
    assert spill == store_module.spill_pages(store_module.PAGE_SIZE)
    assert spill * store_module.PAGE_SIZE >= 60_000_000 and spill % 256


def test_a_new_sqlite_file_has_small_pages_and_an_old_one_keeps_its_own(tmp_path: Any) -> None:
    new = SQLiteStore(tmp_path / "new.db")
    assert new._db.execute("PRAGMA page_size").fetchone() == (store_module.PAGE_SIZE,)
    new.close()
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as db:  # a file made with SQLite's default pages
        db.execute("PRAGMA page_size = 4096")
        db.execute("CREATE TABLE t (x)")
    made = SQLiteStore(old)
    assert made._db.execute("PRAGMA page_size").fetchone() == (4096,)
    spill = made._db.execute("PRAGMA cache_spill").fetchone()[0]
    assert spill == store_module.spill_pages(4096)
    made.close()


# -- MemoryStore: one blob per write -------------------------------------------------------------


RICH = {"output": {1: "int key", (1, "t"): {2, 3}, "bin": b"x" * 70_000, "at": T0, "big": 2**63}}


@pytest.mark.parametrize("n", [1, 2, 15, 16, 300, 0x10000])
def test_memory_batch_holds_encode_event_bytes(n: int) -> None:
    events = [Event(i + 1, NODE_COMPLETED, "s", T0, ("a", i), {"i": i}) for i in range(n)]
    if n == 2:  # keys and values that plain msgpack would not round-trip
        events[0] = Event(1, NODE_COMPLETED, "s", T0, (), RICH)
    blob, counted = _encode_batch(events)
    each = b"".join(encode_event(e) for e in events)
    assert counted == len(each)
    assert blob[len(blob) - counted :] == each  # the array's elements are encode_event's
    assert _decode_batch(blob, "s") == events


def test_memory_events_after_any_seq_across_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tarry.snapshots.memory.store.MERGE_BYTES", 0)  # a blob per write
    store = MemoryStore()
    store.create(rec(token="tk_1"), events=[ev(1)])
    store.append_events("s1", [ev(2), ev(3), ev(4)])
    store.consume_token("tk_1", owner="w", until=at(9), events=[ev(5)])
    version = store.save(rec(), 0, events=[ev(6)])
    store.save(rec(), version, events=[ev(s) for s in range(7, 12)])
    everything = [ev(s) for s in range(1, 12)]
    assert store.events("s1") == everything
    for after in range(-1, 13):
        assert store.events("s1", after) == everything[max(after, 0) :], after
    assert store.events("ghost") == []
    # Reading the tail decodes the writes it spans, not the whole log.
    decoded: list[bytes] = []

    def counting(blob: bytes, sid: str, *args: Any) -> list[Event]:
        decoded.append(blob)
        return _decode_batch(blob, sid, *args)

    monkeypatch.setattr("tarry.snapshots.memory.store._decode_batch", counting)
    assert store.events("s1", 6) == everything[6:]
    assert len(decoded) == 1
    # So does a page anywhere else: the write holding its first event is found by bisection.
    decoded.clear()
    assert store.events("s1", 0, 2) == everything[:2]
    assert store.events("s1", 2, 3) == everything[2:5]
    assert len(decoded) == 4  # the first two writes, then the second and third


@pytest.mark.parametrize("n", [1, 14, 15, 16, 17, 300])
def test_memory_a_small_second_write_joins_the_first_blob_and_reads_back_alike(n: int) -> None:
    store = MemoryStore()
    store.create(rec(token="tk_1"), events=[ev(1)])
    store.append_events("s1", [ev(s) for s in range(2, n + 2)])
    store.consume_token("tk_1", owner="w", until=at(9), events=[ev(n + 2)])
    everything = [ev(s) for s in range(1, n + 3)]
    entry = store._sessions["s1"]
    sizes = [len(encode_event(e)) for e in everything]
    if sum(sizes[:-1]) < store_module_memory.MERGE_FIRST:  # still small: the third joins too
        assert entry.batches == _encode_batch(everything)[0] and entry.firsts is None
    elif sum(sizes[:-1]) < store_module_memory.MERGE_BYTES:  # the third starts a blob
        assert entry.batches[0] == _encode_batch(everything[:-1])[0]
        assert entry.firsts == [1, n + 2]
    else:  # a write too big to join the first blob starts one (the merge copies O(1) bytes)
        assert entry.firsts == [1, 2, n + 2]
    for after in range(n + 4):
        assert store.events("s1", after) == everything[after:], after
        assert store.events("s1", after, 2) == everything[after : after + 2], after


def test_memory_events_do_not_change_when_callers_mutate_their_data() -> None:
    store = MemoryStore()
    items = [1, 2]
    first = Event(1, RUN_STARTED, "s1", T0, (), {"input": {"items": items}})
    store.create(rec(), events=[first])
    items.append(3)
    first.data["input"]["extra"] = True
    assert store.events("s1")[0].data == {"input": {"items": [1, 2]}}
    returned = store.events("s1")
    returned[0].data["input"]["items"].append(99)
    assert store.events("s1")[0].data == {"input": {"items": [1, 2]}}


def test_memory_unencodable_events_are_refused_and_nothing_is_written() -> None:
    store = MemoryStore()
    store.create(rec(token="tk_1"), events=[ev(1)])
    written = store.bytes_written
    bad = Event(2, NODE_COMPLETED, "s1", T0, ("x",), {"output": object()})
    with pytest.raises(NotSerializable):
        store.append_events("s1", [bad])
    with pytest.raises(NotSerializable):
        store.save(rec(state=b"new"), 0, events=[bad])
    with pytest.raises(NotSerializable):
        store.consume_token("tk_1", events=[bad])
    assert store.bytes_written == written
    assert store.load("s1").state == b"state"
    assert store.find_token("tk_1") == TokenInfo("s1", False)
    assert [e.seq for e in store.events("s1")] == [1]


def test_memory_records_handed_out_share_nothing() -> None:
    store = MemoryStore()
    store.create(rec(status="paused", wake_at=at(1), lease_owner="w", lease_until=at(1)))
    given = rec("s2", meta={"a": 1})
    store.create(given)
    given.meta["caller's"] = True
    assert store.load("s2").meta == {"a": 1}
    handed_out = [store.load("s1"), store.list(flow="f")[1], store.due(at(2))[0]]
    for handed in [*handed_out, store.expired(at(2))[0]]:
        handed.meta["mine"] = True  # an empty meta must not be one dict shared by all
        handed.status = "changed"
    assert store.claim("s1", "w2", at(50), at(2))
    loaded = store.load("s1")
    assert (loaded.meta, loaded.status, loaded.lease_owner) == ({}, "paused", "w2")


def test_memory_forgets_used_tokens_with_their_session() -> None:
    store = MemoryStore()
    store.create(rec(token="tk_1"))
    store.save(rec(token="tk_2"), 0)
    assert store.consume_token("tk_1")
    assert store.find_token("tk_1") == TokenInfo("s1", True)
    store.delete("s1")
    assert store.find_token("tk_1") is None and store.find_token("tk_2") is None
    assert store._tokens == {} and store._used == set()


def test_listing_newest_first_reads_an_index_not_the_whole_table(tmp_path) -> None:
    import sqlite3

    from tarry.snapshots import SQLiteStore

    SQLiteStore(tmp_path / "s.db").close()
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        for where in ("", "WHERE flow = ? "):
            args = ("f",) if where else ()
            plan = db.execute(
                f"EXPLAIN QUERY PLAN SELECT session_id FROM sessions {where}"
                "ORDER BY created_at DESC, session_id DESC LIMIT 5",
                args,
            ).fetchall()
            text = " ".join(row[-1] for row in plan)
            assert "INDEX" in text and "TEMP B-TREE" not in text, text
    finally:
        db.close()
