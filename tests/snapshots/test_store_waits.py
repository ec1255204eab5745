"""Conformance of every store for many waits per session, keys and the mailbox: `save(waits=,
mail_done=)`, `consume_tokens`, `waits`, `waiting`, `post`, `take_mail`, `discard`, `mail`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support
from storekit import STORES, THREADS, race
from support import at
from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import NODE_COMPLETED, RUN_STARTED, Event
from tarry.snapshots import (
    MemoryStore,
    SessionRecord,
    SessionStore,
    SQLiteStore,
    TokenInfo,
    WaitRecord,
    dumps,
)


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made = STORES[request.param](tmp_path)
    assert isinstance(made, SessionStore)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def rec(sid: str = "s1", **changes: Any) -> SessionRecord:
    return support.rec(sid, **{"state": b"state of " + sid.encode(), **changes})


def ev(seq: int, sid: str = "s1") -> Event:
    type_ = RUN_STARTED if seq == 1 else NODE_COMPLETED
    return Event(seq, type_, sid, at(seq), ("root", seq), {"n": seq})


def wait(token: str, sid: str = "s1", index: int = 0, **fields: Any) -> WaitRecord:
    return WaitRecord(token, sid, ("items", index, "w"), fields.pop("kind", "external"), **fields)


def paused(
    store: Any, sid: str, *waits: WaitRecord, version: int | None = None, **changes: Any
) -> int:
    """Save `sid` paused with `waits` from `version`, or create it and save it from 0."""
    if version is None:
        store.create(rec(sid))
        version = 0
    first = waits[0].token if waits else None
    record = rec(sid, status="paused", token=first, **changes)
    return store.save(record, version, waits=waits)


def tokens_of(waits: list[WaitRecord]) -> list[str]:
    return [w.token for w in waits]


def everything(store: Any, sids: tuple[str, ...], tokens: tuple[str, ...]) -> tuple[Any, ...]:
    """All a store holds of some sessions and tokens, to check that a refused write wrote
    nothing."""
    return (
        [store.load(s) for s in sids],
        [store.events(s) for s in sids],
        [store.waits(s) for s in sids],
        [store.find_token(t) for t in tokens],
        store.waiting(),
    )


# -- save(waits=...) ---------------------------------------------------------------------------


def test_a_save_registers_every_wait_as_a_live_token(store: Any) -> None:
    full = WaitRecord(
        "tk_b", "s1", ("items", 1, "w"), "human", key="job-1", wake_at=at(30),
        reason="why", payload=dumps({"n": 1}),
    )  # fmt: skip
    paused(store, "s1", wait("tk_c", index=2), full, wait("tk_a", index=0, kind="system"))
    assert store.waits("s1") == [
        wait("tk_a", index=0, kind="system"),
        full,
        wait("tk_c", index=2),
    ]  # by path, then token
    for token in ("tk_a", "tk_b", "tk_c"):
        assert store.find_token(token) == TokenInfo("s1", False)
    assert store.load("s1").token == "tk_c"  # record.token keeps its meaning
    assert store.waits("nobody") == []


def test_several_waits_at_one_path_are_ordered_by_token(store: Any) -> None:
    paused(store, "s1", wait("tk_2"), wait("tk_1"), wait("tk_3"))
    assert tokens_of(store.waits("s1")) == ["tk_1", "tk_2", "tk_3"]


def test_a_used_token_is_never_made_live_again_by_a_wait(store: Any) -> None:
    paused(store, "s1", wait("tk_1"), wait("tk_2", index=1))
    assert store.consume_token("tk_1") is True
    store.save(rec(status="paused", token="tk_2"), 1, waits=[wait("tk_1"), wait("tk_2", index=1)])
    assert store.find_token("tk_1") == TokenInfo("s1", True)
    assert tokens_of(store.waits("s1")) == ["tk_2"]
    assert store.consume_token("tk_1") is False


def test_saving_a_wait_again_keeps_one_row(store: Any) -> None:
    paused(store, "s1", wait("tk_1"))
    store.save(rec(status="paused", token="tk_1"), 1, waits=[wait("tk_1", reason="again")])
    assert store.waits("s1") == [wait("tk_1", reason="again")]
    assert tokens_of(store.waiting()) == ["tk_1"]


def test_consume_token_drops_its_wait_only(store: Any) -> None:
    paused(store, "s1", wait("tk_1"), wait("tk_2", index=1))
    assert store.consume_token("tk_1") is True
    assert tokens_of(store.waits("s1")) == ["tk_2"]
    assert tokens_of(store.waiting()) == ["tk_2"]
    assert store.find_token("tk_2") == TokenInfo("s1", False)


def test_a_running_save_keeps_the_waits(store: Any) -> None:
    paused(store, "s1", wait("tk_1"), wait("tk_2", index=1))
    assert store.consume_token("tk_1") is True
    store.save(rec(status="running"), 1)
    assert tokens_of(store.waits("s1")) == ["tk_2"]


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_session_that_ends_drops_its_waits_and_uses_their_tokens(store: Any, status: str) -> None:
    paused(store, "s1", wait("tk_1"), wait("tk_2", index=1))
    paused(store, "s2", wait("tk_9", "s2"))
    store.save(rec(status=status), 1)
    assert store.waits("s1") == []
    assert tokens_of(store.waiting()) == ["tk_9"]
    for token in ("tk_1", "tk_2"):
        assert store.find_token(token) == TokenInfo("s1", True)  # used, never unknown
        assert store.consume_token(token) is False


def test_a_failed_sessions_resume_token_stays_live(store: Any) -> None:
    paused(store, "s1", wait("tk_1"))
    store.save(rec(status="failed", token="tk_retry"), 1)
    assert store.find_token("tk_retry") == TokenInfo("s1", False)
    assert store.find_token("tk_1") == TokenInfo("s1", True)


def test_a_refused_save_registers_no_wait(store: Any) -> None:
    paused(store, "s1", wait("tk_1"))
    with pytest.raises(ConcurrentUpdate):
        store.save(rec(status="paused"), 0, waits=[wait("tk_2", index=1)])
    with pytest.raises(ConcurrentUpdate):
        store.save(rec(status="completed"), 0)
    assert tokens_of(store.waits("s1")) == ["tk_1"]
    assert store.find_token("tk_2") is None


# -- consume_tokens ----------------------------------------------------------------------------


def test_consume_tokens_uses_many_of_several_sessions_at_once(store: Any) -> None:
    store.create(rec("s1"), events=[ev(1)])
    store.save(rec(status="paused", token="a1"), 0, waits=[wait("a1"), wait("a2", index=1),
                                                           wait("a3", index=2)])  # fmt: skip
    store.create(rec("s2"), events=[ev(1, "s2")])
    store.save(rec("s2", status="paused", token="b1"), 0, waits=[wait("b1", "s2")])
    store.request_stop("s1", "abort")  # not running: nothing stored
    done = store.consume_tokens(
        ["a3", "b1", "a1"], owner="w1", until=at(90), events={"s1": [ev(2)], "s2": [ev(2, "s2")]}
    )
    assert done == {}
    for sid in ("s1", "s2"):
        loaded = store.load(sid)
        assert (loaded.status, loaded.lease_owner, loaded.lease_until) == ("running", "w1", at(90))
        assert [e.seq for e in store.events(sid)] == [1, 2]
    assert tokens_of(store.waits("s1")) == ["a2"]
    assert store.waits("s2") == []
    assert [store.find_token(t).used for t in ("a1", "a2", "a3", "b1")] == [True, False, True, True]


def test_find_tokens_answers_many_at_once_leaving_out_the_unknown(store: Any) -> None:
    paused(store, "s1", wait("a1"), wait("a2", index=1))
    paused(store, "s2", wait("b1", "s2"))
    assert store.consume_tokens(["a2"]) == {}
    many = 1500  # more than one statement's worth of parameters on some stores
    asked = ["b1", "zz", "a1", "a2", *(f"x{i}" for i in range(many))]
    assert store.find_tokens(asked) == {
        "b1": TokenInfo("s2", False),
        "a1": TokenInfo("s1", False),
        "a2": TokenInfo("s1", True),
    }
    assert store.find_tokens([]) == {}
    assert store.find_tokens(["a1", "a1"]) == {"a1": TokenInfo("s1", False)}


def test_consume_tokens_without_owner_keeps_the_lease(store: Any) -> None:
    paused(store, "s1", wait("a1"), wait("a2", index=1), lease_owner="w0", lease_until=at(5))
    assert store.consume_tokens(["a1", "a2"]) == {}
    loaded = store.load("s1")
    assert (loaded.status, loaded.lease_owner, loaded.lease_until) == ("running", "w0", at(5))


@pytest.mark.parametrize(
    ("tokens", "refused"),
    [
        (["a1", "zz"], {"zz": "unknown"}),
        (["a1", "used"], {"used": "used"}),
        (["a1", "b1", "a1"], {"a1": "duplicate"}),
        (["zz", "used", "b1", "b1"], {"zz": "unknown", "used": "used", "b1": "duplicate"}),
    ],
)
def test_consume_tokens_is_all_or_nothing(
    store: Any, tokens: list[str], refused: dict[str, str]
) -> None:
    paused(store, "s1", wait("a1"), wait("used", index=1))
    paused(store, "s2", wait("b1", "s2"))
    assert store.consume_token("used") is True
    store.save(rec(status="paused", token="a1"), 1)
    before = everything(store, ("s1", "s2"), ("a1", "b1", "used", "zz"))
    assert store.consume_tokens(tokens, owner="w9", until=at(9), events={"s1": [ev(1)]}) == refused
    assert everything(store, ("s1", "s2"), ("a1", "b1", "used", "zz")) == before


def test_consume_tokens_with_an_event_gap_writes_nothing(store: Any) -> None:
    store.create(rec("s1"), events=[ev(1)])
    store.save(rec(status="paused", token="a1"), 0, waits=[wait("a1")])
    store.create(rec("s2"))
    store.save(rec("s2", status="paused", token="b1"), 0, waits=[wait("b1", "s2")])
    before = everything(store, ("s1", "s2"), ("a1", "b1"))
    with pytest.raises(ConcurrentUpdate):
        store.consume_tokens(["a1", "b1"], events={"s1": [ev(2)], "s2": [ev(3, "s2")]})
    with pytest.raises(ConcurrentUpdate):
        store.consume_tokens(["b1", "a1"], events={"s1": [ev(1)]})  # seq 1 is taken
    assert everything(store, ("s1", "s2"), ("a1", "b1")) == before
    assert store.consume_tokens(["a1", "b1"], events={"s1": [ev(2)], "s2": [ev(1, "s2")]}) == {}


def test_consume_tokens_of_nothing_is_nothing(store: Any) -> None:
    assert store.consume_tokens([]) == {}


def test_consume_tokens_races_with_consume_token_single_winner(store: Any) -> None:
    n = 12
    paused(store, "s1", *(wait(f"tk_{i:02}", index=i) for i in range(n)))

    def go(i: int) -> list[str]:
        if i % 2:  # overlapping batches of three
            picked = [f"tk_{(i + j) % n:02}" for j in range(3)]
            return picked if store.consume_tokens(picked) == {} else []
        return [f"tk_{j:02}" for j in range(n) if store.consume_token(f"tk_{j:02}")]

    won = [t for got in race(THREADS, go) for t in got]
    assert sorted(won) == [f"tk_{i:02}" for i in range(n)]  # each used once, by one caller
    assert store.waits("s1") == []


# -- waiting -----------------------------------------------------------------------------------


def fill(store: Any) -> None:
    paused(store, "s1", wait("t1", kind="human"), wait("t4", index=1, key="k1"),
           wait("t7", index=2, key="k2"))  # fmt: skip
    paused(store, "s2", wait("t2", "s2", key="k1"), wait("t5", "s2", index=1, kind="system"))
    paused(store, "s3", wait("t3", "s3", kind="human", key="k1"), wait("t6", "s3", index=1))


def test_waiting_lists_every_live_wait_by_token(store: Any) -> None:
    fill(store)
    found = store.waiting()
    assert tokens_of(found) == ["t1", "t2", "t3", "t4", "t5", "t6", "t7"]
    assert found[2] == wait("t3", "s3", kind="human", key="k1")


def test_waiting_filters_by_kind_and_key(store: Any) -> None:
    fill(store)
    assert tokens_of(store.waiting(kind="human")) == ["t1", "t3"]
    assert tokens_of(store.waiting(kind="external")) == ["t2", "t4", "t6", "t7"]
    assert tokens_of(store.waiting(key="k1")) == ["t2", "t3", "t4"]
    assert tokens_of(store.waiting(kind="human", key="k1")) == ["t3"]
    assert store.waiting(kind="nothing") == []
    assert store.waiting(key="nothing") == []


def test_waiting_pages_with_a_cursor(store: Any) -> None:
    fill(store)
    pages, after = [], None
    while True:
        page = store.waiting(after=after, limit=3)
        if not page:
            break
        pages.append(tokens_of(page))
        after = page[-1].token
    assert pages == [["t1", "t2", "t3"], ["t4", "t5", "t6"], ["t7"]]
    assert tokens_of(store.waiting(kind="external", after="t2", limit=2)) == ["t4", "t6"]
    assert tokens_of(store.waiting(key="k1", after="t3")) == ["t4"]


def test_waiting_forgets_used_tokens_and_ended_sessions(store: Any) -> None:
    fill(store)
    assert store.consume_tokens(["t4", "t2"]) == {}
    store.save(rec("s3", status="cancelled"), 1)
    store.delete("s1")
    assert tokens_of(store.waiting()) == ["t5"]
    assert store.waiting(key="k1") == []


def rows(store: Any) -> Any:
    """Something that changes whenever the store writes a row: SQLite's change counter, each
    PostgreSQL row's version (xmin: an update; xmax: a lock or delete; ctid: a move)."""
    if isinstance(store, SQLiteStore):
        with store._lock:
            return store._db.total_changes
    if isinstance(store, MemoryStore):
        return (store.bytes_written, store.waiting(), dict(store._mail))
    tables = ("tarry_sessions", "tarry_tokens", "tarry_waits", "tarry_mail")
    with store._pool.connection() as conn:
        return [
            conn.execute(f"SELECT ctid, xmin, xmax FROM {t} ORDER BY ctid").fetchall()
            for t in tables
        ]


def test_waiting_writes_nothing(store: Any) -> None:
    fill(store)
    store.post("early", b"v", at(1))
    before = rows(store)
    for kind in (None, "human", "external"):
        for key in (None, "k1"):
            store.waiting(kind=kind, key=key)
            store.waiting(kind=kind, key=key, after="t3", limit=1)
    store.waits("s1")
    store.mail("early")
    assert rows(store) == before
    store.post("other", b"w", at(1))  # and the probe does see a write
    assert rows(store) != before


# -- the mailbox -------------------------------------------------------------------------------


def test_a_post_to_a_live_key_returns_its_waits_and_keeps_nothing(store: Any) -> None:
    fill(store)
    found = store.post("k1", b"result", at(1))
    assert tokens_of(found) == ["t2", "t3", "t4"]
    assert found[0] == wait("t2", "s2", key="k1")
    assert store.mail("k1") is None


def test_a_post_before_its_wait_is_kept_and_taken_once(store: Any) -> None:
    assert store.post("job-1", b"early", at(1)) == []
    assert store.mail("job-1") == b"early"
    assert store.post("job-1", b"later", at(2)) == []  # replaces the unclaimed one
    assert store.mail("job-1") == b"later"
    paused(store, "s1", wait("tk_1", key="job-1"))
    paused(store, "s2", wait("tk_2", "s2", key="job-1"))
    assert store.take_mail(["job-1", "job-2"], "s1") == {"job-1": b"later"}
    assert store.mail("job-1") is None  # claimed: no other session gets it
    assert store.take_mail(["job-1"], "s2") == {}
    # The claimant finds it again (a process that died before saving, on recovery).
    assert store.take_mail(["job-1"], "s1") == {"job-1": b"later"}
    store.save(rec(status="paused", token="tk_1"), 1, mail_done=["job-1"])
    assert store.take_mail(["job-1"], "s1") == {}


def test_a_post_while_the_mail_is_claimed_waits_for_the_next_claimer(store: Any) -> None:
    store.post("job", b"first", at(1))
    paused(store, "s1", wait("tk_1", key="job"))
    assert store.take_mail(["job"], "s1") == {"job": b"first"}
    assert store.consume_token("tk_1") is True  # s1 resumes its wait with the mail
    assert store.post("job", b"second", at(2)) == []
    assert store.mail("job") == b"second"
    assert store.take_mail(["job"], "s1") == {"job": b"first"}  # its own claim first
    store.save(rec(status="running"), 1, mail_done=["job"])
    paused(store, "s2", wait("tk_2", "s2", key="job"))
    assert store.take_mail(["job"], "s2") == {"job": b"second"}


def test_mail_done_deletes_only_the_sessions_own_claims(store: Any) -> None:
    store.post("a", b"1", at(1))
    store.post("b", b"2", at(1))
    paused(store, "s1", wait("tk_1"))
    paused(store, "s2", wait("tk_2", "s2"))
    assert store.take_mail(["a"], "s2") == {"a": b"1"}
    store.save(rec(status="paused", token="tk_1"), 1, mail_done=["a", "b"])
    assert store.mail("b") == b"2"  # unclaimed: not s1's to delete
    assert store.take_mail(["a"], "s2") == {"a": b"1"}


def test_discard_drops_unclaimed_mail_only(store: Any) -> None:
    assert store.discard("job") is False
    store.post("job", b"v", at(1))
    assert store.discard("job") is True
    assert store.mail("job") is None
    assert store.discard("job") is False
    store.post("job", b"w", at(1))
    paused(store, "s1", wait("tk_1"))
    store.take_mail(["job"], "s1")
    assert store.discard("job") is False
    assert store.take_mail(["job"], "s1") == {"job": b"w"}


def test_delete_and_prune_drop_waits_and_claimed_mail(store: Any) -> None:
    for sid in ("s1", "s2"):
        paused(store, sid, wait(f"tk_{sid}", sid, key=f"k_{sid}"))
        store.post(f"m_{sid}", b"v", at(1))
        assert store.take_mail([f"m_{sid}"], sid) == {f"m_{sid}": b"v"}
    store.delete("s1")
    store.save(rec("s2", status="completed", updated_at=at(1)), 1)
    assert store.prune(before=at(2), now=at(3)) == 1
    assert store.waiting() == []
    assert store.post("k_s1", b"x", at(1)) == []  # no wait is left on the key
    for sid in ("s1", "s2"):
        # Recreated under the same id, a session finds none of the old one's mail.
        paused(store, sid, wait(f"tk2_{sid}", sid))
        assert store.take_mail([f"m_{sid}"], sid) == {}


def test_a_post_racing_a_keyed_save_is_never_lost(store: Any) -> None:
    """One thread registers a wait on a key and then takes the key's mail, as a run that
    pauses does; another posts to the key. Whoever comes first, the value reaches the wait
    exactly once: the post returns the wait, or the saver's take_mail finds the mail."""
    rounds = 30
    for i in range(rounds):
        store.create(rec(f"s{i}"))
    for i in range(rounds):
        key = f"key-{i}"

        def go(who: int, i: int = i, key: str = key) -> Any:
            if who == 0:
                paused(store, f"s{i}", wait(f"tk_{i}", f"s{i}", key=key), version=0)
                return store.take_mail([key], f"s{i}")
            return store.post(key, b"v%d" % i, at(1))

        taken, posted = race(2, go)
        assert taken in ({}, {key: b"v%d" % i}), taken
        assert bool(taken) != bool(posted), (i, taken, posted)


# -- sessions paused before waits existed ------------------------------------------------------


def test_an_old_sqlite_file_gets_a_wait_for_each_paused_session(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        store.create(rec("human"))
        store.save(rec("human", status="paused", token="tk_h", meta={"pause_kind": "human"}), 0)
        store.create(rec("plain"))
        store.save(rec("plain", status="paused", token="tk_p"), 0)
        store.create(rec("used"))
        store.save(rec("used", status="paused", token="tk_u"), 0)
        assert store.consume_token("tk_u") is True
        store.create(rec("done"))
        store.save(rec("done", status="completed", token="tk_d"), 0)
    # As a file written before this version: no waits table, no mailbox, schema version 1.
    db = sqlite3.connect(path)
    db.execute("DROP TABLE waits")
    db.execute("DROP TABLE mail")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert store.waiting() == [
            WaitRecord("tk_h", "human", (), "human"),
            WaitRecord("tk_p", "plain", (), "external"),
        ]
        assert store.waits("human") == [WaitRecord("tk_h", "human", (), "human")]
        assert store.post("k", b"v", at(1)) == []
        assert store.consume_token("tk_h") is True
        assert tokens_of(store.waiting()) == ["tk_p"]
    with SQLiteStore(path) as store:  # opening again adds nothing
        assert tokens_of(store.waiting()) == ["tk_p"]


def test_sqlite_wait_queries_use_indexes(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        plans = []
        real = store._cur

        class Planning:
            """The store's cursor, asking SQLite for the plan of each read it runs."""

            def execute(self, sql: str, args: Any = ()) -> Any:
                if sql.startswith("SELECT"):
                    plans.append(" | ".join(r[3] for r in store._db.execute(
                        f"EXPLAIN QUERY PLAN {sql}", args)))  # fmt: skip
                return real.execute(sql, args)

        store._cur = Planning()  # type: ignore[assignment]
        store.waiting()
        store.waiting(kind="human", after="t1", limit=5)
        store.waiting(key="k1")
        store.waiting(kind="human", key="k1")
        store.waits("s1")
        store.mail("k1")
        store._cur = real
        assert len(plans) == 6
        for found in plans:
            assert "SCAN" not in found, found  # every lookup through an index or the key
        assert "waits_kind" in plans[1] and "waits_key" in plans[2] and "waits_key" in plans[3]
        assert "TEMP B-TREE" not in " ".join(plans[:4])  # pages come in token order, unsorted


@pytest.mark.parametrize("spoiled", [b"\xc1", b"\x01"])  # not msgpack; not an array
def test_sqlite_names_a_wait_path_it_cannot_read(tmp_path: Path, spoiled: bytes) -> None:
    from tarry.engine.errors import SnapshotError

    store = SQLiteStore(tmp_path / "w.db")
    paused(store, "s1", wait("t1", key="k"), wait("t2", index=1))
    with sqlite3.connect(tmp_path / "w.db") as db:
        db.execute("UPDATE waits SET path = ? WHERE token = 't2'", (spoiled,))
    for read in (lambda: store.waiting(), lambda: store.waits("s1")):
        with pytest.raises(SnapshotError, match="malformed wait path"):
            read()
    assert [w.path for w in store.waiting(key="k")] == [("items", 0, "w")]
    store.close()
