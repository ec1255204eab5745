"""The SessionStore conformance suite: every store must pass every test here.

A new store joins by adding an entry to storekit.STORES (a factory taking pytest's tmp_path); a
store that needs a server (PostgresStore) should `pytest.skip` in its factory when none is set
up. test_store_waits.py runs the waits and the mailbox the same way.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import support
from storekit import STORES, THREADS, race
from support import at
from tarry.engine.errors import ConcurrentUpdate, SessionExists, SnapshotError
from tarry.engine.state.events import NODE_COMPLETED, RUN_STARTED, Event
from tarry.snapshots import SessionRecord, SessionStore, SQLiteStore, TokenInfo
from tarry.snapshots.records import encode_event


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made = STORES[request.param](tmp_path)
    assert isinstance(made, SessionStore)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def rec(sid: str = "s1", **changes: Any) -> SessionRecord:
    """A record whose state names its session, so a mix-up between sessions shows."""
    return support.rec(sid, **{"state": b"state of " + sid.encode(), **changes})


def ev(seq: int, sid: str = "s1") -> Event:
    type_ = RUN_STARTED if seq == 1 else NODE_COMPLETED
    return Event(seq, type_, sid, at(seq + 0.000123), ("root", seq), {"n": seq, "ok": True})


def snapshot(store: Any, sid: str, tokens: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """Everything stored about a session, to check that a failed write changed nothing."""
    return (
        store.load(sid),
        store.events(sid),
        store.get_values(sid, "k", 10),
        [store.find_token(t) for t in tokens],
    )


# -- sessions ----------------------------------------------------------------------------------


FULL = rec(
    "full",
    flow="billing",
    status="paused",
    state=b"\x00\xffsome state",
    version=7,
    fingerprint="sha256:abc",
    flow_version={"major": 2, "tags": ["a", "b"], "pair": (1, "x")},
    token="tk_full",
    wake_at=at(30.5),
    lease_owner="worker-1",
    lease_until=at(60.000001),
    created_at=at(-3600.25),
    updated_at=at(1.999999),
    meta={"owner": "ann", "n": 3, "nested": {"k": [1, 2.5, None]}},
    durability="step",
)
MINIMAL = rec("minimal")


@pytest.mark.parametrize("record", [FULL, MINIMAL], ids=["full", "minimal"])
def test_create_load_round_trips_every_field(store: Any, record: SessionRecord) -> None:
    store.create(record)
    loaded = store.load(record.session_id)
    assert loaded == attrs.evolve(record, version=0)  # the stored version starts at 0
    for name in ("wake_at", "lease_until", "created_at", "updated_at"):
        value = getattr(loaded, name)
        assert value is None or value.utcoffset() == dt.timedelta(0), name


def test_create_twice_raises_session_exists(store: Any) -> None:
    store.create(rec(state=b"first"))
    with pytest.raises(SessionExists):
        store.create(rec(state=b"second", status="paused"))
    assert store.load("s1") == rec(state=b"first")


def test_load_unknown_is_none(store: Any) -> None:
    assert store.load("nope") is None


def test_loaded_record_is_a_copy(store: Any) -> None:
    record = rec(meta={"a": 1})
    store.create(record)
    record.meta["after create"] = True
    loaded = store.load("s1")
    loaded.meta["after load"] = True
    assert store.load("s1").meta == {"a": 1}


def test_save_increments_version(store: Any) -> None:
    store.create(rec(version=5))
    assert store.save(rec(state=b"one", version=99), 0) == 1
    assert store.load("s1") == rec(state=b"one", version=1)
    assert store.save(rec(state=b"two", status="paused"), 1) == 2
    assert store.load("s1") == rec(state=b"two", status="paused", version=2)


def test_save_with_stale_version_changes_nothing(store: Any) -> None:
    store.create(rec(token="tk_a"))
    store.save(rec(state=b"v1", token="tk_a"), 0, events=[ev(1)], values=[("k", 0, b"a")])
    before = snapshot(store, "s1", ("tk_a", "tk_b"))
    with pytest.raises(ConcurrentUpdate):
        store.save(
            rec(state=b"stale", status="completed", token="tk_b"),
            0,
            events=[ev(2)],
            values=[("k", 0, b"zz"), ("k", 1, b"y")],
        )
    assert snapshot(store, "s1", ("tk_a", "tk_b")) == before
    assert store.find_token("tk_b") is None


def test_save_unknown_session_raises(store: Any) -> None:
    with pytest.raises(ConcurrentUpdate):
        store.save(rec("ghost", token="tk_g"), 0, events=[ev(1, "ghost")])
    assert store.load("ghost") is None
    assert store.events("ghost") == []
    assert store.find_token("tk_g") is None


def test_concurrent_save_one_winner(store: Any) -> None:
    store.create(rec())
    results = race(THREADS, lambda i: store.save(rec(state=b"by %d" % i), 0, events=[ev(1)]))
    winners = [i for i, r in enumerate(results) if r == 1]
    assert len(winners) == 1
    assert all(isinstance(r, ConcurrentUpdate) for r in results if r != 1)
    assert store.load("s1") == rec(state=b"by %d" % winners[0], version=1)
    assert store.events("s1") == [ev(1)]


def test_list_newest_first_filtered_and_paginated(store: Any) -> None:
    specs = [  # id, created (s), status, flow
        ("a", 10, "paused", "f"),
        ("b", 30, "running", "f"),
        ("c", 20, "paused", "g"),
        ("d", 30, "paused", "f"),  # same created_at as b: the id breaks the tie, descending
        ("e", 5, "completed", "g"),
    ]
    for sid, created, status, flow in specs:
        store.create(rec(sid, created_at=at(created), status=status, flow=flow))

    def ids(**kw: Any) -> list[str]:
        return [r.session_id for r in store.list(**kw)]

    assert ids() == ["d", "b", "c", "a", "e"]
    assert ids(status="paused") == ["d", "c", "a"]
    assert ids(flow="g") == ["c", "e"]
    assert ids(status="paused", flow="f") == ["d", "a"]
    assert ids(status="failed") == []
    assert ids(limit=2) == ["d", "b"]
    assert ids(limit=2, offset=2) == ["c", "a"]
    assert ids(limit=2, offset=4) == ["e"]
    assert ids(offset=5) == []
    # Without the state: listing reads no snapshot.
    assert store.list(status="running") == [
        rec("b", created_at=at(30), status="running", state=b"")
    ]
    assert store.load("b").state == b"state of b"


def test_delete_removes_everything(store: Any) -> None:
    store.create(rec(token="tk_1"))
    store.save(rec(token="tk_2"), 0, events=[ev(1), ev(2)], values=[("k", 0, b"a")])
    store.create(rec("other", token="tk_o"))
    store.put_values("other", [("k", 0, b"o")])
    store.delete("s1")
    assert store.load("s1") is None
    assert store.events("s1") == []
    assert store.get_value("s1", "k", 0) is None
    assert store.get_values("s1", "k", 10) == []
    assert store.find_token("tk_1") is None
    assert store.find_token("tk_2") is None
    assert store.consume_token("tk_2") is False
    assert [r.session_id for r in store.list()] == ["other"]
    # The other session is untouched, and deleting unknown ids is a no-op.
    store.delete("s1")
    store.delete("never")
    assert store.get_value("other", "k", 0) == b"o"
    assert store.find_token("tk_o") == TokenInfo("other", False)
    # A new session under the old id starts clean (its log begins at seq 1 again).
    store.create(rec())
    store.append_events("s1", [ev(1)])
    assert store.events("s1") == [ev(1)]


# -- events ------------------------------------------------------------------------------------


def test_events_append_and_read_after_seq(store: Any) -> None:
    store.create(rec())
    store.create(rec("s2"))
    assert store.events("s1") == []
    store.append_events("s1", [ev(1), ev(2)])
    store.append_events("s1", [])
    store.save(rec(), 0, events=[ev(3)])
    store.append_events("s2", [ev(1, "s2")])
    assert store.events("s1") == [ev(1), ev(2), ev(3)]
    assert store.events("s1", after_seq=2) == [ev(3)]
    assert store.events("s1", after_seq=3) == []
    assert store.events("s2") == [ev(1, "s2")]
    assert store.events("nope") == []
    event = store.events("s1")[0]
    assert event.at.utcoffset() == dt.timedelta(0)
    assert event.path == ("root", 1)


def test_events_read_a_page(store: Any) -> None:
    store.create(rec(), events=[ev(1), ev(2)])
    store.append_events("s1", [ev(3), ev(4), ev(5)])
    store.save(rec(), 0, events=[ev(6), ev(7)])
    store.append_events("s1", [ev(8)])
    whole = store.events("s1")
    assert [e.seq for e in whole] == list(range(1, 9))
    for after in range(10):
        for limit in (1, 2, 3, 5, 100):
            page = store.events("s1", after_seq=after, limit=limit)
            assert page == whole[after : after + limit], (after, limit)
    assert store.events("s1", 3, None) == whole[3:]
    assert store.events("s1", after_seq=2, limit=0) == []
    assert store.events("nope", limit=3) == []
    # Paging through the log from the start reads it exactly once, in order.
    seen, after = [], 0
    while page := store.events("s1", after, 3):
        seen += page
        after = page[-1].seq
    assert seen == whole


def test_append_events_to_unknown_session_raises(store: Any) -> None:
    with pytest.raises(ConcurrentUpdate):
        store.append_events("ghost", [ev(1, "ghost")])
    assert store.events("ghost") == []


BAD_SEQS = {
    "duplicate": [2],
    "duplicate in batch": [3, 3],
    "gap": [4],
    "gap in batch": [3, 5],
    "backwards": [1],
}


@pytest.mark.parametrize("seqs", BAD_SEQS.values(), ids=BAD_SEQS.keys())
@pytest.mark.parametrize("via", ["append_events", "save"])
def test_bad_seq_raises_and_writes_nothing(store: Any, via: str, seqs: list[int]) -> None:
    store.create(rec(token="tk_1"))
    store.append_events("s1", [ev(1), ev(2)])
    before = snapshot(store, "s1", ("tk_1", "tk_2"))
    written = store.bytes_written
    with pytest.raises(ConcurrentUpdate):
        if via == "save":
            store.save(
                rec(state=b"new", token="tk_2"),
                0,
                events=[ev(s) for s in seqs],
                values=[("k", 0, b"a")],
            )
        else:
            store.append_events("s1", [ev(s) for s in seqs])
    assert snapshot(store, "s1", ("tk_1", "tk_2")) == before
    assert store.bytes_written == written
    store.append_events("s1", [ev(3)])  # the log still continues where it was
    assert [e.seq for e in store.events("s1")] == [1, 2, 3]


# -- out-of-line values ------------------------------------------------------------------------


def test_values_put_and_get(store: Any) -> None:
    store.create(rec())
    store.put_values("s1", [("k", 0, b"a"), ("k", 2, b"c"), ("k", 5, b"f"), ("other", 1, b"x")])
    store.save(rec(), 0, values=[("k", 3, b"d")])
    assert store.get_value("s1", "k", 0) == b"a"
    assert store.get_value("s1", "k", 1) is None
    assert store.get_value("s1", "other", 1) == b"x"
    assert store.get_value("s1", "missing", 0) is None
    assert store.get_values("s1", "k", 5) == [b"a", b"c", b"d"]  # 1 and 4 missing; 5 beyond stop
    assert store.get_values("s1", "k", 6) == [b"a", b"c", b"d", b"f"]
    assert store.get_values("s1", "k", 1) == [b"a"]
    assert store.get_values("s1", "k", 0) == []
    assert store.get_values("s1", "missing", 10) == []
    store.put_values("s1", [("k", 0, b"A")])  # a put replaces
    assert store.get_values("s1", "k", 3) == [b"A", b"c"]
    assert store.get_value("nope", "k", 0) is None
    assert store.get_values("nope", "k", 10) == []


def test_put_values_for_unknown_session_is_dropped(store: Any) -> None:
    store.put_values("later", [("k", 0, b"a")])
    store.create(rec("later"))
    assert store.get_value("later", "k", 0) is None


# -- tokens ------------------------------------------------------------------------------------


def test_tokens_register_and_consume_once(store: Any) -> None:
    assert store.find_token("tk_nope") is None
    assert store.consume_token("tk_nope") is False
    store.create(rec(token="tk_1"))
    assert store.find_token("tk_1") == TokenInfo("s1", False)
    store.save(rec(token="tk_2"), 0)
    assert store.find_token("tk_2") == TokenInfo("s1", False)
    assert store.find_token("tk_1") == TokenInfo("s1", False)  # older tokens stay known
    assert store.consume_token("tk_2") is True
    assert store.consume_token("tk_2") is False
    assert store.find_token("tk_2") == TokenInfo("s1", True)
    store.save(rec(token="tk_2"), 1)  # saving again never revives a consumed token
    assert store.find_token("tk_2") == TokenInfo("s1", True)
    assert store.consume_token("tk_2") is False


def test_consumed_token_is_never_live_again(store: Any) -> None:
    store.create(rec("a", token="tk_same"))
    assert store.consume_token("tk_same") is True
    store.create(rec("b", token="tk_same"))
    assert store.consume_token("tk_same") is False
    assert store.find_token("tk_same") == TokenInfo("a", True)


def test_concurrent_consume_one_winner(store: Any) -> None:
    store.create(rec(token="tk_1"))
    results = race(THREADS, lambda i: store.consume_token("tk_1"))
    assert sorted(results) == [False] * (THREADS - 1) + [True]


# -- timers and leases -------------------------------------------------------------------------


def test_due_lists_paused_sessions_whose_time_has_come(store: Any) -> None:
    now = at(100)
    specs = [  # id, status, wake_at
        ("late", "paused", at(90)),
        ("now", "paused", now),
        ("early", "paused", at(50)),
        ("future", "paused", at(100.000001)),
        ("no timer", "paused", None),
        ("running", "running", at(10)),
        ("done", "completed", at(10)),
    ]
    for sid, status, wake_at in specs:
        store.create(rec(sid, status=status, wake_at=wake_at))
    assert [r.session_id for r in store.due(now)] == ["early", "late", "now"]
    assert [r.session_id for r in store.due(now, limit=2)] == ["early", "late"]
    assert [r.session_id for r in store.due(at(0))] == []
    assert store.due(now)[0] == rec("early", status="paused", wake_at=at(50))


def test_claim_takes_free_expired_or_own_leases(store: Any) -> None:
    store.create(rec())
    assert store.claim("s1", "a", until=at(30), now=at(0)) is True
    assert store.load("s1").lease_owner == "a"
    assert store.load("s1").lease_until == at(30)
    assert store.claim("s1", "b", until=at(40), now=at(10)) is False
    assert store.claim("s1", "a", until=at(60), now=at(10)) is True  # renewal
    assert store.claim("s1", "b", until=at(90), now=at(59)) is False
    assert store.claim("s1", "b", until=at(90), now=at(60)) is True  # expired at 60
    loaded = store.load("s1")
    assert (loaded.lease_owner, loaded.lease_until, loaded.version) == ("b", at(90), 0)
    assert store.claim("nope", "a", until=at(90), now=at(0)) is False


def test_concurrent_claim_one_winner(store: Any) -> None:
    store.create(rec())
    results = race(THREADS, lambda i: store.claim("s1", f"w{i}", until=at(30), now=at(0)))
    assert sorted(results) == [False] * (THREADS - 1) + [True]
    assert store.load("s1").lease_owner == f"w{results.index(True)}"


def test_release_only_by_owner(store: Any) -> None:
    store.create(rec())
    store.claim("s1", "a", until=at(30), now=at(0))
    store.release("s1", "b")
    assert store.load("s1").lease_owner == "a"
    store.release("s1", "a")
    loaded = store.load("s1")
    assert (loaded.lease_owner, loaded.lease_until) == (None, None)
    assert store.claim("s1", "b", until=at(30), now=at(1)) is True
    store.release("nope", "a")


def test_expired_lists_sessions_with_lapsed_leases(store: Any) -> None:
    # Any status: a paused session holds a lease only while a resumer drives it.
    now = at(100)
    specs = [  # id, status, lease_until
        ("lapsed", "running", at(90)),
        ("at now", "running", now),
        ("long ago", "running", at(10)),
        ("alive", "running", at(100.000001)),
        ("no lease", "running", None),
        ("paused", "paused", at(10)),
    ]
    for sid, status, until in specs:
        store.create(rec(sid, status=status, lease_owner="w", lease_until=until))
    assert [r.session_id for r in store.expired(now)] == ["long ago", "paused", "lapsed", "at now"]
    assert [r.session_id for r in store.expired(now, limit=1)] == ["long ago"]
    assert store.expired(at(0)) == []


def test_expired_pages_after_a_cursor(store: Any) -> None:
    for sid, until in [("b", at(10)), ("a", at(10)), ("c", at(20)), ("d", at(5))]:
        store.create(rec(sid, lease_owner="w", lease_until=until))
    now = at(100)
    assert [r.session_id for r in store.expired(now, after=(at(5), "d"))] == ["a", "b", "c"]
    assert [r.session_id for r in store.expired(now, after=(at(10), "a"))] == ["b", "c"]
    assert [r.session_id for r in store.expired(now, 1, after=(at(10), "b"))] == ["c"]
    assert store.expired(now, after=(at(20), "c")) == []


# -- claiming due sessions ---------------------------------------------------------------------


def due_session(store: Any, sid: str, wake_at: dt.datetime, **changes: Any) -> None:
    """A paused session with a live token `tk_<sid>`, due at `wake_at`."""
    store.create(rec(sid, status="paused", wake_at=wake_at, token=f"tk_{sid}", **changes))


def test_claim_due_leases_due_sessions_earliest_first(store: Any) -> None:
    now = at(100)
    for sid, wake_at in [
        ("late", at(90)),
        ("now", now),
        ("early", at(50)),
        ("tie", at(50)),
        ("future", at(100.000001)),
    ]:
        due_session(store, sid, wake_at)
    store.create(rec("no timer", status="paused", token="tk_x"))
    store.create(rec("running", status="running", wake_at=at(10), token="tk_r"))
    store.create(rec("done", status="completed", wake_at=at(10)))
    claimed = store.claim_due(now, "w1", at(130), limit=2)
    assert [r.session_id for r in claimed] == ["early", "tie"]
    assert claimed[0] == rec(
        "early",
        status="paused",
        wake_at=at(50),
        token="tk_early",
        lease_owner="w1",
        lease_until=at(130),
    )
    for sid in ("early", "tie"):
        loaded = store.load(sid)
        assert (loaded.lease_owner, loaded.lease_until, loaded.version) == ("w1", at(130), 0)
    # Claimed sessions are no longer free, not even for their owner; the rest come next.
    assert [r.session_id for r in store.claim_due(now, "w1", at(130))] == ["late", "now"]
    assert store.claim_due(now, "w2", at(130)) == []
    assert store.load("future").lease_owner is None


def test_claim_due_takes_only_free_sessions_with_a_live_token(store: Any) -> None:
    now = at(100)
    due_session(store, "free", at(1))
    due_session(store, "lapsed", at(2), lease_owner="gone", lease_until=at(100))
    due_session(store, "leased", at(3), lease_owner="other", lease_until=at(100.5))
    due_session(store, "used", at(4))
    store.consume_token("tk_used")
    store.create(rec("tokenless", status="paused", wake_at=at(5)))
    claimed = store.claim_due(now, "me", at(130))
    assert [r.session_id for r in claimed] == ["free", "lapsed"]
    assert store.load("leased").lease_owner == "other"
    assert store.load("used").lease_owner is None
    assert store.find_token("tk_free") == TokenInfo("free", False)  # claiming uses no token


def test_claim_due_pages_after_a_cursor(store: Any) -> None:
    for sid, wake_at in [("b", at(10)), ("a", at(10)), ("c", at(20)), ("d", at(5))]:
        due_session(store, sid, wake_at)
    now = at(100)
    page = store.claim_due(now, "w", at(130), limit=2, after=(at(5), "d"))
    assert [r.session_id for r in page] == ["a", "b"]
    last = page[-1]
    assert [
        r.session_id
        for r in store.claim_due(now, "w", at(130), after=(last.wake_at, last.session_id))
    ] == ["c"]
    assert store.load("d").lease_owner is None  # before the cursor: left alone
    store.release("a", "w")
    assert [r.session_id for r in store.claim_due(now, "w", at(130))] == ["d", "a"]


def test_concurrent_claimants_of_due_sessions_get_disjoint_ones(store: Any) -> None:
    sessions = 40
    for n in range(sessions):
        due_session(store, f"s{n:02}", at(n % 7))
    results = race(THREADS, lambda i: store.claim_due(at(100), f"w{i}", at(130), limit=10))
    assert not [r for r in results if isinstance(r, Exception)]
    claimed = [r.session_id for result in results for r in result]
    assert len(claimed) == len(set(claimed))  # no session claimed twice
    rest = store.claim_due(at(100), "late", at(130), limit=sessions)
    assert sorted(claimed + [r.session_id for r in rest]) == [f"s{n:02}" for n in range(sessions)]
    for i, result in enumerate(results):
        assert all(store.load(r.session_id).lease_owner == f"w{i}" for r in result)


# -- store-wide marks --------------------------------------------------------------------------


def test_marks_are_kept_once_and_for_all(store: Any) -> None:
    assert store.marked("signed_tokens") is False
    store.mark("signed_tokens")
    store.mark("signed_tokens")
    assert store.marked("signed_tokens") is True
    assert store.marked("other") is False


def test_sqlite_marks_are_seen_by_other_stores_on_the_file(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db") as one:
        one.mark("signed_tokens")
    with SQLiteStore(tmp_path / "m.db") as two:
        assert two.marked("signed_tokens") is True


# -- the cost model ----------------------------------------------------------------------------


def test_byte_counters_count_exactly_the_blobs(store: Any) -> None:
    assert (store.bytes_written, store.bytes_read) == (0, 0)
    record = rec(state=b"x" * 100)
    store.create(record)
    assert store.bytes_written == 100

    events = [ev(1), ev(2)]
    values = [("k", 0, b"a" * 7), ("k", 1, b"b" * 9)]
    store.save(rec(state=b"y" * 50), 0, events=events, values=values)
    event_bytes = sum(len(encode_event(e)) for e in events)
    assert store.bytes_written == 100 + 50 + event_bytes + 16

    store.append_events("s1", [ev(3)])
    store.put_values("s1", [("k", 2, b"c" * 5)])
    assert store.bytes_written == 100 + 50 + event_bytes + 16 + len(encode_event(ev(3))) + 5

    with pytest.raises(ConcurrentUpdate):
        store.save(rec(state=b"z" * 1000), 0, values=[("k", 9, b"z")])
    written = store.bytes_written
    assert written == 100 + 50 + event_bytes + 16 + len(encode_event(ev(3))) + 5

    assert store.bytes_read == 0
    store.load("s1")
    assert store.bytes_read == 50
    assert store.get_value("s1", "k", 1) == b"b" * 9
    assert store.bytes_read == 59
    store.get_value("s1", "k", 99)
    assert store.bytes_read == 59
    store.get_values("s1", "k", 3)
    assert store.bytes_read == 59 + 21
    # Listing, timers and the event log are not part of the counted read cost.
    store.load("nope")
    store.events("s1")
    store.list()
    store.due(at(0))
    store.expired(at(0))
    store.find_token("nope")
    assert (store.bytes_written, store.bytes_read) == (written, 80)


# -- SQLite only -------------------------------------------------------------------------------


def test_sqlite_two_stores_on_one_file_share_sessions(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as one, SQLiteStore(str(path)) as two:
        one.create(rec(token="tk_1"))
        assert two.load("s1") == rec(token="tk_1")
        two.save(rec(state=b"by two"), 0, events=[ev(1)], values=[("k", 0, b"v")])
        assert one.load("s1").state == b"by two"
        assert one.events("s1") == [ev(1)]
        assert one.get_value("s1", "k", 0) == b"v"
        # The compare-and-set is the database's, not the instance's.
        with pytest.raises(ConcurrentUpdate):
            one.save(rec(state=b"stale"), 0)
        with pytest.raises(SessionExists):
            one.create(rec())
        assert two.consume_token("tk_1") is True
        assert one.consume_token("tk_1") is False


def test_sqlite_schema_and_pragmas(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    SQLiteStore(path).close()  # reopening an existing file is fine
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (8,)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"sessions", "events", "vals", "tokens", "marks", "waits", "mail", "logs"} <= tables
        db.execute("PRAGMA user_version = 9")
        db.commit()
    finally:
        db.close()
    with pytest.raises(SnapshotError, match="schema version 9"):
        SQLiteStore(path)


def test_sqlite_stores_utc_microseconds(tmp_path: Path) -> None:
    # An offset other than UTC is the same instant: it must compare and come back as UTC.
    plus2 = dt.timezone(dt.timedelta(hours=2))
    with SQLiteStore(tmp_path / "s.db") as store:
        store.create(rec(status="paused", wake_at=dt.datetime(2024, 5, 1, 14, 0, 1, tzinfo=plus2)))
        assert store.load("s1").wake_at == at(1)
        assert store.load("s1").wake_at.tzinfo == dt.UTC
        assert [r.session_id for r in store.due(at(1))] == ["s1"]
        assert store.due(at(0.999999)) == []


def _consume_in_process(path: str, token: str, barrier: Any, results: Any) -> None:
    with SQLiteStore(path) as store:
        # Generous: a safety net for a hung child on a loaded machine, not a speed limit.
        barrier.wait(timeout=300)
        results.put(store.consume_token(token))


def test_sqlite_consume_races_across_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "s.db")
    with SQLiteStore(path) as store:
        store.create(rec(token="tk_1"))
    # Spawned children import this module by name: make the repository root importable.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_consume_in_process, args=(path, "tk_1", barrier, results))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    outcome = sorted(results.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert outcome == [False, False, False, True]
    with SQLiteStore(path) as store:
        assert store.find_token("tk_1") == TokenInfo("s1", True)


def test_create_with_first_events_is_atomic(store: Any) -> None:
    store.create(rec("s1"), events=[ev(1)])
    assert [e.seq for e in store.events("s1")] == [1]
    with pytest.raises(SessionExists):
        store.create(rec("s1"), events=[ev(1)])
    assert [e.seq for e in store.events("s1")] == [1]
    with pytest.raises(ConcurrentUpdate):
        store.create(rec("s2"), events=[ev(2, "s2")])
    assert store.load("s2") is None


def test_consume_token_takes_the_lease_and_appends_events_atomically(store: Any) -> None:
    store.create(rec("s1", token="tk_1"), events=[ev(1)])
    until = at(500)
    assert store.consume_token("tk_1", owner="w1", until=until, events=[ev(2)]) is True
    loaded = store.load("s1")
    assert (loaded.lease_owner, loaded.lease_until) == ("w1", until)
    assert [e.seq for e in store.events("s1")] == [1, 2]
    # the loser writes nothing
    assert store.consume_token("tk_1", owner="w2", until=at(900), events=[ev(3)]) is False
    assert store.load("s1").lease_owner == "w1"
    assert [e.seq for e in store.events("s1")] == [1, 2]


def test_consume_token_at_a_version_uses_it_only_while_the_session_is_there(store: Any) -> None:
    """`version`: a resumer that checked the session as it saved it uses the token without
    reading it first; a session that moved on since (saved again, or another of its tokens
    used) refuses with ConcurrentUpdate and keeps everything as it was."""
    store.create(rec("s1", status="paused", token="tk_1"), events=[ev(1)])
    store.save(rec("s1", status="paused", token="tk_2"), 0, events=[ev(2)])  # now version 1
    before = snapshot(store, "s1", ("tk_1", "tk_2"))
    with pytest.raises(ConcurrentUpdate):
        store.consume_token("tk_2", owner="w1", until=at(500), events=[ev(3)], version=0)
    assert snapshot(store, "s1", ("tk_1", "tk_2")) == before
    assert store.consume_token("tk_2", owner="w1", until=at(500), events=[ev(3)], version=1)
    loaded = store.load("s1")
    assert (loaded.status, loaded.lease_owner, loaded.version) == ("running", "w1", 1)
    assert [e.seq for e in store.events("s1")] == [1, 2, 3]
    # Used (or unknown): False, as without a version.
    assert store.consume_token("tk_2", events=[ev(4)], version=1) is False
    assert store.consume_token("tk_nobody", version=1) is False
    # Another token of it was used: the session runs, so this one must wait its turn.
    before = snapshot(store, "s1", ("tk_1",))
    with pytest.raises(ConcurrentUpdate):
        store.consume_token("tk_1", owner="w2", until=at(600), events=[ev(4)], version=1)
    assert snapshot(store, "s1", ("tk_1",)) == before
    assert store.find_token("tk_1") == TokenInfo("s1", False)


def test_consume_token_at_a_version_has_one_winner(store: Any) -> None:
    store.create(rec("s1", status="paused", token="tk_1"), events=[ev(1)])
    results = race(THREADS, lambda _: store.consume_token("tk_1", events=[ev(2)], version=0))
    assert sum(r is True for r in results) == 1
    assert all(r is True or r is False or isinstance(r, ConcurrentUpdate) for r in results)
    assert [e.seq for e in store.events("s1")] == [1, 2]


# -- control: a session's durability and stop requests -----------------------------------------


def test_a_new_session_has_the_default_durability_and_no_stop(store: Any) -> None:
    store.create(rec("s1", stop="cancel"))  # a record's own stop is never written
    loaded = store.load("s1")
    assert (loaded.durability, loaded.stop) == ("pause", None)


def test_durability_is_kept_by_saves(store: Any) -> None:
    store.create(rec("s1", durability="step"))
    store.save(rec("s1", status="paused", durability="step"), 0)
    assert store.load("s1").durability == "step"


def test_request_stop_is_stored_for_a_running_session_only(store: Any) -> None:
    store.create(rec("run"))
    store.create(rec("held", status="paused"))
    assert store.request_stop("run", "abort") == "running"
    assert store.stop_requested("run") == "abort" and store.load("run").stop == "abort"
    assert store.request_stop("run", "cancel") == "running"  # a later request replaces it
    assert store.stop_requested("run") == "cancel"
    assert store.request_stop("held", "cancel") == "paused"  # not running: nothing stored
    assert store.stop_requested("held") is None
    assert store.request_stop("nope", "abort") is None
    assert store.stop_requested("nope") is None


def test_a_save_that_ends_the_run_clears_the_stop_request(store: Any) -> None:
    store.create(rec("s1"))
    store.request_stop("s1", "abort")
    version = store.save(rec("s1", state=b"progress", stop=None), 0)  # still running
    assert store.stop_requested("s1") == "abort"
    store.save(rec("s1", status="paused", token="tk_1", stop="abort"), version)
    assert store.stop_requested("s1") is None


def test_using_a_token_marks_the_session_running_and_keeps_its_stop(store: Any) -> None:
    # A request the run paused before it saw stays for the next drive (or a worker's round).
    store.create(rec("s1"))
    store.request_stop("s1", "cancel")
    store.save(rec("s1", status="paused", token="tk_1", updated_at=at(5)), 0)
    assert store.stop_requested("s1") == "cancel"
    assert store.load("s1").wake_at == at(5)  # due at once: a worker honours it
    assert store.request_stop("s1", "abort") == "paused"  # refused: paused
    assert store.consume_token("tk_1", owner="w1", until=at(60), events=[ev(1)]) is True
    loaded = store.load("s1")
    assert (loaded.status, loaded.stop, loaded.lease_owner) == ("running", "cancel", "w1")
    # The drive that stops for it says so in its write, which clears it.
    store.save(rec("s1", status="paused", stop="cancel"), 1)
    assert store.stop_requested("s1") is None
    store.create(rec("s3"))
    store.request_stop("s3", "abort")
    store.save(rec("s3", status="completed"), 0)  # an ended session keeps none
    assert store.stop_requested("s3") is None
    store.create(rec("s2", status="failed", token="tk_2"))
    assert store.consume_token("tk_2") is True  # no owner: the lease is left as it was
    loaded = store.load("s2")
    assert (loaded.status, loaded.lease_owner) == ("running", None)


def test_stop_requests_race_with_the_save_that_ends_the_run(store: Any) -> None:
    # Whoever comes second decides: a request stored before the save that pauses the run stays
    # (the run did not honour it: a worker will); one after it finds the session paused and
    # stores nothing. A save that ends the run clears it.
    for i in range(20):
        sid = f"s{i}"
        store.create(rec(sid))
        results = race(
            2,
            lambda n, sid=sid: (
                store.request_stop(sid, "abort")
                if n == 0
                else store.save(rec(sid, status="paused"), 0)
            ),
        )
        assert results[0] in ("running", "paused")
        assert store.stop_requested(sid) == ("abort" if results[0] == "running" else None)


# -- retention ---------------------------------------------------------------------------------

ENDED = ("completed", "cancelled", "failed")


def _ended_and_not(store: Any) -> None:
    """Sessions of every kind, each with events, a value and a token: ended ones last updated
    at 10 s (one at 100 s), paused and running ones at 10 s, and a failed one at 10 s that is
    being resumed (its lease runs to 200 s)."""
    specs = [
        ("done", "completed", {}),
        ("gone", "cancelled", {}),
        ("broke", "failed", {}),
        ("recent", "completed", {"updated_at": at(100)}),
        ("waits", "paused", {}),
        ("runs", "running", {}),
        ("retried", "failed", {"lease_owner": "w", "lease_until": at(200)}),
    ]
    for sid, status, changes in specs:
        store.create(rec(sid, token=f"tk_{sid}"), events=[ev(1, sid)])
        fields = {"status": status, "updated_at": at(10), "token": f"tk2_{sid}", **changes}
        store.save(rec(sid, **fields), 0, events=[ev(2, sid)], values=[("k", 0, b"v")])


def test_prune_deletes_ended_sessions_last_updated_before_a_time(store: Any) -> None:
    _ended_and_not(store)
    everything = {r.session_id for r in store.list()}
    kw = {"before": at(50), "now": at(60)}
    assert store.prune(statuses=ENDED, dry_run=True, **kw) == 3
    assert store.prune(statuses=("failed", "completed"), dry_run=True, **kw) == 2
    assert {r.session_id for r in store.list()} == everything  # a dry run deletes nothing
    assert store.prune(statuses=("completed",), **kw) == 1
    assert store.prune(statuses=ENDED, limit=1, **kw) == 1  # batches: the oldest first
    assert store.prune(statuses=ENDED, limit=10, **kw) == 1
    assert store.prune(statuses=ENDED, **kw) == 0
    assert {r.session_id for r in store.list()} == {"recent", "waits", "runs", "retried"}
    for sid in ("done", "gone", "broke"):
        assert store.load(sid) is None
        assert store.events(sid) == []
        assert store.get_values(sid, "k", 10) == []
        assert store.find_token(f"tk_{sid}") is None and store.find_token(f"tk2_{sid}") is None
    kept = store.load("retried")
    assert (kept.status, store.find_token("tk2_retried")) == ("failed", TokenInfo("retried", False))
    assert [e.seq for e in store.events("waits")] == [1, 2]
    # Once its lease is over, the failed one goes too; paused and running ones never do.
    assert store.prune(statuses=ENDED, before=at(50), now=at(300)) == 1
    assert store.prune(statuses=("paused", "running"), before=at(500), now=at(500)) == 0
    assert store.prune(statuses=ENDED, before=at(500), now=at(500)) == 1  # "recent"
    assert {r.session_id for r in store.list()} == {"waits", "runs"}


def test_prune_of_many_sessions_in_batches(store: Any) -> None:
    for i in range(25):
        sid = f"s{i:02}"
        store.create(rec(sid, status="completed", updated_at=at(i)), events=[ev(1, sid)])
    store.create(rec("later", status="completed", updated_at=at(99)))
    kw = {"statuses": ENDED, "before": at(50), "now": at(50)}
    assert store.prune(limit=10, **kw) == 10
    left = sorted(r.session_id for r in store.list(limit=100))
    assert left == ["later", *(f"s{i}" for i in range(10, 25))]  # the oldest went first
    assert store.prune(limit=10, **kw) == 10
    assert store.prune(limit=10, **kw) == 5
    assert [r.session_id for r in store.list()] == ["later"]


# -- stats -------------------------------------------------------------------------------------


def node(seq: int, type_: str, name: str, seconds: float, sid: str = "s1", **data: Any) -> Event:
    return Event(seq, type_, sid, at(seconds), ("f", name), data)


def test_stats_count_statuses_and_add_up_node_tallies(store: Any) -> None:
    from tarry.snapshots.tally import NodeTotals

    store.create(
        rec("s1", flow="f"),
        events=[
            Event(1, RUN_STARTED, "s1", at(0), (), {}),
            node(2, "node.started", "a", 1),
            node(3, "node.completed", "a", 3, metrics={"tokens": 5}),
            node(4, "node.started", "b", 3),
            node(5, "node.failed", "b", 4, metrics={"tokens": 1}),
            node(6, "node.retrying", "b", 4, delay=2.0),
        ],
    )
    store.create(
        rec("s2", flow="g", status="completed"),
        events=[
            Event(1, RUN_STARTED, "s2", at(0), (), {}),
            node(2, "node.started", "a", 10, "s2"),
            node(3, "node.completed", "a", 14, "s2"),
            node(4, "node.completed", "c", 14, "s2", skipped=True),  # `skip`: not an execution
        ],
    )
    store.create(rec("s3", flow="f", status="paused"))
    totals = store.stats()
    assert totals.by_status == {"running": 1, "completed": 1, "paused": 1}
    assert totals.nodes == {
        "a": NodeTotals(executions=2, failures=0, seconds=6.0, timed=2, metrics={"tokens": 5}),
        "b": NodeTotals(executions=1, failures=1, seconds=1.0, timed=1, metrics={"tokens": 1}),
    }
    # Later events fold into what was tallied, across writes: b's next attempt began when its
    # back-off ended (at 6 s), an attempt of a in progress since before is timed whole.
    store.append_events("s1", [node(7, "node.started", "a", 20)])
    assert store.stats().nodes["a"].executions == 2
    store.save(
        rec("s1", flow="f", status="completed"),
        0,
        events=[
            node(8, "node.completed", "b", 7),
            node(9, "node.completed", "a", 25, metrics={"tokens": 2}),
        ],
    )
    totals = store.stats()
    assert totals.by_status == {"completed": 2, "paused": 1}
    assert totals.nodes["a"] == NodeTotals(3, 0, 11.0, 3, {"tokens": 7})
    assert totals.nodes["b"] == NodeTotals(2, 1, 2.0, 2, {"tokens": 1})
    only = store.stats(flow="g")
    assert only.by_status == {"completed": 1}
    assert only.nodes == {"a": NodeTotals(1, 0, 4.0, 1, {})}
    assert store.stats(flow="nope").by_status == {}


def test_stats_read_only_the_events_written_since_the_last_report(store: Any) -> None:
    for i in range(3):
        sid = f"s{i}"
        events = [Event(1, RUN_STARTED, sid, at(0), (), {})]
        events += [node(2 + k, "node.completed", "a", 1, sid) for k in range(40)]
        store.create(rec(sid, status="completed" if i else "running"), events=events)
    reads: list[tuple[str, int, int | None]] = []
    events = store.events

    def spy(session_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        reads.append((session_id, after_seq, limit))
        return events(session_id, after_seq, limit)

    store.events = spy
    assert store.stats().nodes["a"].executions == 120
    assert sorted(r[:2] for r in reads) == [("s0", 0), ("s1", 0), ("s2", 0)]
    assert all(limit is not None for _, _, limit in reads)  # paged, never the whole log
    reads.clear()
    assert store.stats().nodes["a"].executions == 120
    assert reads == []  # nothing new: no event read at all
    store.append_events("s0", [node(42, "node.completed", "a", 2, "s0")])
    assert store.stats().nodes["a"].executions == 121
    assert [r[:2] for r in reads] == [("s0", 41)]


def test_a_deleted_session_leaves_no_tally(store: Any) -> None:
    store.create(rec(status="completed"), events=[node(1, "node.completed", "a", 1)])
    assert store.stats().nodes["a"].executions == 1
    store.delete("s1")
    assert store.stats().nodes == {}
    store.create(rec(status="completed"), events=[node(1, "node.completed", "b", 1)])
    assert set(store.stats().nodes) == {"b"}


def test_sqlite_a_file_made_before_the_control_columns_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        store.create(rec("s1", status="paused", token="tk_1"))
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE sessions DROP COLUMN durability")
    db.execute("ALTER TABLE sessions DROP COLUMN stop")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:  # as a file written by the tarry before them
        loaded = store.load("s1")
        assert (loaded.durability, loaded.stop, loaded.token) == ("pause", None, "tk_1")
        assert store.consume_token("tk_1") and store.request_stop("s1", "abort") == "running"


def test_list_pages_by_cursor_filters_by_period_and_search(store: Any) -> None:
    specs = [  # id, created (s), flow
        ("job-1", 10, "billing"),
        ("job-2", 20, "billing"),
        ("job-3", 20, "mail"),
        ("other", 30, "daily-billing"),
        ("x%_", 40, "mail"),
    ]
    for sid, created, flow in specs:
        store.create(rec(sid, created_at=at(created), flow=flow))

    def ids(**kw: Any) -> list[str]:
        return [r.session_id for r in store.list(**kw)]

    assert ids() == ["x%_", "other", "job-3", "job-2", "job-1"]
    # Keyset paging: strictly before the (created_at, id) of the last row seen.
    assert ids(limit=2) == ["x%_", "other"]
    assert ids(limit=2, before=(at(30), "other")) == ["job-3", "job-2"]
    assert ids(limit=2, before=(at(20), "job-2")) == ["job-1"]
    # A session created meanwhile changes nothing on the later pages.
    store.create(rec("newest", created_at=at(50)))
    assert ids(limit=2, before=(at(30), "other")) == ["job-3", "job-2"]
    # Period of creation: since inclusive, until exclusive.
    assert ids(since=at(20), until=at(40)) == ["other", "job-3", "job-2"]
    assert ids(since=at(20), until=at(40), before=(at(20), "job-3")) == ["job-2"]
    # Search: an id prefix or a flow name substring, case-sensitive, wildcards are literal.
    assert ids(search="job-") == ["job-3", "job-2", "job-1"]
    assert ids(search="billing") == ["other", "job-2", "job-1"]
    assert ids(search="x%") == ["x%_"]
    assert ids(search="x_") == []  # as a LIKE pattern it would match "x%_"
    assert ids(search="%") == []
    assert ids(search="Job") == []
    assert ids(search="billing", flow="billing") == ["job-2", "job-1"]


def test_stats_of_a_period_count_sessions_by_creation_time(store: Any) -> None:
    for sid, created, status in (
        ("s1", 10, "completed"),
        ("s2", 20, "paused"),
        ("s3", 30, "completed"),
    ):
        store.create(
            rec(sid, created_at=at(created), status=status),
            events=[
                Event(1, RUN_STARTED, sid, at(created), (), {}),
                node(2, "node.started", "a", created, sid),
                node(3, "node.completed", "a", created + 1, sid),
            ],
        )
    assert store.stats().nodes["a"].executions == 3
    period = store.stats(since=at(20), until=at(30))
    assert period.by_status == {"paused": 1}
    assert period.nodes["a"].executions == 1
    assert store.stats(since=at(15)).by_status == {"paused": 1, "completed": 1}
    assert store.stats(until=at(15)).by_status == {"completed": 1}
    assert store.stats(since=at(31)).by_status == {}
