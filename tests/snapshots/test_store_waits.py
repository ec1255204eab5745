"""Conformance of every store for many waits per session, keys and the mailbox: `save(waits=,
mail_done=)`, `consume_tokens`, `waits`, `waiting`, and the message queue per key (`post`,
`claim_mail`, `queued`, `pending`, `discard`, `mailbox`, `purge_mail`)."""

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


def test_a_wait_keeps_its_parked_lane_and_is_read_by_its_token(store: Any) -> None:
    paused(store, "s1", wait("tk_a", lane=b"lane a"), wait("tk_b", index=1))
    found = store.wait("tk_a")
    assert found is not None and found.lane == b"lane a" and found.path == ("items", 0, "w")
    assert store.wait("tk_b").lane == b""
    assert store.wait("tk_nope") is None
    assert [w.lane for w in store.waits("s1")] == [b"lane a", b""]
    assert tokens_of(store.waiting()) == ["tk_a", "tk_b"]
    assert store.consume_token("tk_a")
    assert store.wait("tk_a") is None  # a used token has no wait


def test_waits_of_a_session_may_be_limited(store: Any) -> None:
    paused(store, "s1", *[wait(f"tk_{i}", index=i) for i in range(5)])
    assert tokens_of(store.waits("s1", limit=1)) == ["tk_0"]
    assert tokens_of(store.waits("s1", limit=3)) == ["tk_0", "tk_1", "tk_2"]
    assert len(store.waits("s1")) == 5


def test_a_paused_session_wakes_for_the_earliest_of_all_its_waits(store: Any) -> None:
    # The waits of an earlier save (parked lanes) count: the record's own time is only that
    # of the waits its snapshot holds.
    version = paused(
        store, "s1", wait("tk_a", wake_at=at(50)), wait("tk_b", index=1, wake_at=at(90))
    )
    assert store.load("s1").wake_at == at(50)
    assert store.consume_token("tk_a", events=[ev(1)])
    later = rec(status="paused", token="tk_c", wake_at=at(200))
    store.save(later, version, waits=[wait("tk_c", index=2, wake_at=at(200))])
    assert store.load("s1").wake_at == at(90)
    assert [r.session_id for r in store.due(at(95))] == ["s1"]
    # An earlier time of its own wins; a running save keeps the record's time (none).
    store.save(rec(status="paused", token="tk_c", wake_at=at(10)), version + 1)
    assert store.load("s1").wake_at == at(10)
    store.save(rec(status="running"), version + 2)
    assert store.load("s1").wake_at is None


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
    store.queued(key="early")
    store.pending()
    store.mailbox()
    assert rows(store) == before
    store.post("other", b"w", at(1))  # and the probe does see a write
    assert rows(store) != before


# -- the mailbox: a FIFO queue per key -------------------------------------------------------


def ids_of(found: list[Any]) -> list[int]:
    return [m.id for m in found]


def test_posts_to_one_key_are_two_messages_in_order(store: Any) -> None:
    first = store.post("job", b"a", at(1))
    second = store.post("job", b"b", at(2))
    assert second > first
    found = store.queued(key="job")
    assert [(m.id, m.key, m.value, m.at) for m in found] == [
        (first, "job", b"a", at(1)),
        (second, "job", b"b", at(2)),
    ]
    assert store.queued(key="other") == []


def test_a_post_keeps_the_message_even_with_waits_on_its_key(store: Any) -> None:
    fill(store)
    posted = store.post("k1", b"result", at(1))
    assert ids_of(store.queued(key="k1")) == [posted]


def test_a_claim_takes_the_oldest_message_once(store: Any) -> None:
    a = store.post("job", b"a", at(1))
    b = store.post("job", b"b", at(2))
    paused(store, "s1", wait("tk_1", key="job"))
    paused(store, "s2", wait("tk_2", "s2", key="job"))
    assert store.claim_mail("job", "s1") == (a, b"a")
    assert store.claim_mail("job", "s2") == (b, b"b")  # a is s1's: s2 gets the next one
    assert store.claim_mail("job", "s2", skip=[b]) is None
    assert store.queued(key="job") == []  # claimed messages are not queued for others
    # The claimant finds its claims again (a drive that died before it saved, on recovery),
    # but not the ones its drive already took (`skip`).
    assert store.claim_mail("job", "s1") == (a, b"a")
    assert store.claim_mail("job", "s1", skip=[a]) is None


def test_a_save_consumes_what_it_names_and_releases_the_rest(store: Any) -> None:
    a = store.post("a", b"1", at(1))
    b = store.post("b", b"2", at(1))
    paused(store, "s1", wait("tk_1"))
    assert store.claim_mail("a", "s1") == (a, b"1")
    assert store.claim_mail("b", "s1") == (b, b"2")
    store.save(rec(status="paused", token="tk_1"), 1, mail_done=[a])
    assert store.queued(key="a") == []  # consumed
    assert ids_of(store.queued(key="b")) == [b]  # released: queued again
    assert store.claim_mail("b", "s2") == (b, b"2")


def test_mail_done_deletes_only_the_sessions_own_claims(store: Any) -> None:
    a = store.post("a", b"1", at(1))
    b = store.post("b", b"2", at(1))
    paused(store, "s1", wait("tk_1"))
    paused(store, "s2", wait("tk_2", "s2"))
    assert store.claim_mail("a", "s2") == (a, b"1")
    store.save(rec(status="paused", token="tk_1"), 1, mail_done=[a, b])
    assert ids_of(store.queued(key="b")) == [b]  # unclaimed: not s1's to delete
    assert store.claim_mail("a", "s2") == (a, b"1")  # s2's claim stands


def test_a_token_use_consumes_its_message_in_the_same_transaction(store: Any) -> None:
    from tarry.snapshots.store import MailGone

    m = store.post("job", b"v", at(1))
    paused(store, "s1", wait("tk_1", key="job"))
    paused(store, "s2", wait("tk_2", "s2", key="job"))
    assert store.consume_token("tk_1", mail=m) is True
    assert store.queued(key="job") == []
    before = everything(store, ("s2",), ("tk_2",))
    with pytest.raises(MailGone):  # consumed already: the token stays unused
        store.consume_token("tk_2", mail=m)
    assert everything(store, ("s2",), ("tk_2",)) == before
    n = store.post("job", b"w", at(2))
    assert store.claim_mail("job", "s9") == (n, b"w")
    with pytest.raises(MailGone):  # claimed by another session: not this delivery's to take
        store.consume_token("tk_2", mail=n)
    assert everything(store, ("s2",), ("tk_2",)) == before


def test_consume_tokens_consumes_their_messages_all_or_nothing(store: Any) -> None:
    from tarry.snapshots.store import MailGone

    fill(store)
    m1 = store.post("k1", b"1", at(1))
    m2 = store.post("k2", b"2", at(1))
    store.claim_mail("k2", "s9")
    before = everything(store, ("s1", "s2"), ("t2", "t7"))
    with pytest.raises(MailGone):
        store.consume_tokens(["t2", "t7"], mail={"t2": m1, "t7": m2})
    assert everything(store, ("s1", "s2"), ("t2", "t7")) == before
    assert ids_of(store.queued(key="k1")) == [m1]
    assert store.consume_tokens(["t2", "t7"], mail={"t2": m1}) == {}
    assert store.queued(key="k1") == []


def test_a_message_for_a_busy_session_is_found_by_its_target(store: Any) -> None:
    paused(store, "s1", wait("tk_1", key="job"))
    m = store.post("job", b"v", at(1), target="s1")
    store.post("job", b"w", at(2))
    assert ids_of(store.queued(session_id="s1")) == [m]
    assert store.queued(session_id="s2") == []


def test_pending_pairs_waits_with_mail_on_their_key(store: Any) -> None:
    fill(store)  # waits on k1: t2, t3, t4; on k2: t7
    assert store.pending() == []
    m1 = store.post("k1", b"1", at(1))
    store.post("k1", b"1b", at(2))
    store.post("nobody", b"x", at(1))
    found = store.pending()
    assert [(w.token, m.id) for w, m in found] == [("t4", m1)]  # k1's longest-waiting wait
    store.claim_mail("k1", "s9")
    store.claim_mail("k1", "s9", skip=[m1])
    assert store.pending() == []  # claimed messages are not pending


def test_pending_pages_past_a_message_id(store: Any) -> None:
    """`after`: only the keys whose oldest unclaimed message is newer (a round that could not
    deliver the oldest pairs goes on past them, so they do not starve the rest)."""
    fill(store)  # waits on k1 (t4 longest) and on k2 (t7)
    m1 = store.post("k1", b"1", at(1))
    m2 = store.post("k2", b"2", at(2))
    assert [(w.token, m.id) for w, m in store.pending(limit=1)] == [("t4", m1)]
    assert [(w.token, m.id) for w, m in store.pending(limit=1, after=m1)] == [("t7", m2)]
    assert store.pending(after=m2) == []
    assert [m.id for _, m in store.pending(after=0)] == [m1, m2]


def test_waiters_come_in_the_order_their_waits_were_registered(store: Any) -> None:
    fill(store)  # s1 registered t4 on k1 first, then s2 t2, then s3 t3
    assert tokens_of(store.waiters("k1")) == ["t4", "t2", "t3"]
    assert tokens_of(store.waiters("k1", limit=2)) == ["t4", "t2"]
    assert store.consume_token("t4") is True
    paused(store, "s4", wait("t0", "s4", key="k1"))  # newest, whatever its token
    assert tokens_of(store.waiters("k1")) == ["t2", "t3", "t0"]
    assert store.waiters("nobody") == []


def test_waiters_many_answers_for_many_keys_in_one_read(store: Any) -> None:
    fill(store)  # waits on k1: t4 (s1, first), t2 (s2), t3 (s3); on k2: t7 (s1)
    many = 1500  # more than one statement's worth of parameters on some stores
    asked = ["k2", "nobody", "k1", *(f"x{i}" for i in range(many))]
    found = store.waiters_many(asked)
    assert {key: tokens_of(waits) for key, waits in found.items()} == {
        "k1": ["t4", "t2", "t3"],
        "k2": ["t7"],
    }
    assert found["k1"] == store.waiters("k1")  # the same records, lanes left out alike
    assert {k: tokens_of(w) for k, w in store.waiters_many(["k1", "k1"], limit=2).items()} == {
        "k1": ["t4", "t2"]
    }
    assert store.consume_token("t4") is True
    paused(store, "s4", wait("t0", "s4", key="k1"))  # newest, whatever its token
    assert tokens_of(store.waiters_many(["k1"])["k1"]) == ["t2", "t3", "t0"]
    assert store.waiters_many([]) == {}


def test_queued_keys_names_the_keys_that_hold_unclaimed_messages(store: Any) -> None:
    store.post("a", b"1", at(1))
    store.post("b", b"2", at(1))
    store.post("c", b"3", at(1))
    store.claim_mail("b", "s9")  # claimed: not queued for anyone else
    store.discard("c")
    asked = ["a", "b", "c", "nobody", *(f"x{i}" for i in range(1500))]
    assert store.queued_keys(asked) == {"a"}
    assert store.queued_keys(["a", "a"]) == {"a"}
    assert store.queued_keys([]) == set()


def test_load_many_reads_many_sessions_leaving_out_the_unknown(store: Any) -> None:
    paused(store, "s1", wait("t1"))
    store.create(rec("s2"))
    asked = ["s2", "nobody", "s1", *(f"x{i}" for i in range(1500))]
    found = store.load_many(asked)
    assert found == {"s1": store.load("s1"), "s2": store.load("s2")}
    assert found["s1"].version == 1 and found["s1"].state == b"state of s1"
    assert store.load_many([]) == {}


def test_discard_drops_unclaimed_messages_only(store: Any) -> None:
    assert store.discard("job") == 0
    store.post("job", b"v", at(1))
    store.post("job", b"w", at(2))
    assert store.discard("job") == 2
    assert store.queued(key="job") == []
    m = store.post("job", b"x", at(3))
    store.claim_mail("job", "s1")
    assert store.discard("job") == 0
    assert store.claim_mail("job", "s1") == (m, b"x")


def test_the_mailbox_lists_keys_with_counts(store: Any) -> None:
    store.post("batch-1/a", b"1", at(3))
    store.post("batch-1/a", b"2", at(4))
    store.post("batch-1/b", b"3", at(2))
    store.post("batch-2/a", b"4", at(1))
    claimed = store.post("batch-1/c", b"5", at(1))
    assert store.claim_mail("batch-1/c", "s1") == (claimed, b"5")
    found = store.mailbox()
    assert [(i.key, i.count, i.oldest_at) for i in found] == [
        ("batch-1/a", 2, at(3)),
        ("batch-1/b", 1, at(2)),
        ("batch-2/a", 1, at(1)),
    ]
    assert [i.key for i in store.mailbox(prefix="batch-1/")] == ["batch-1/a", "batch-1/b"]
    assert [i.key for i in store.mailbox(after="batch-1/a", limit=1)] == ["batch-1/b"]
    assert [i.key for i in store.mailbox(prefix="%")] == []  # no wildcards


def test_purge_drops_old_unclaimed_messages(store: Any) -> None:
    store.post("a", b"1", at(1))
    keep = store.post("a", b"2", at(5))
    old = store.post("b", b"3", at(2))
    store.claim_mail("b", "s1")
    assert store.purge_mail(at(3)) == 1  # b's is claimed: not purged
    assert ids_of(store.queued(key="a")) == [keep]
    assert store.claim_mail("b", "s1") == (old, b"3")


def test_delete_and_prune_drop_waits_and_release_claims(store: Any) -> None:
    mail = {}
    for sid in ("s1", "s2"):
        paused(store, sid, wait(f"tk_{sid}", sid, key=f"k_{sid}"))
        mail[sid] = store.post(f"m_{sid}", b"v", at(1))
        assert store.claim_mail(f"m_{sid}", sid) == (mail[sid], b"v")
    store.delete("s1")
    store.save(rec("s2", status="completed", updated_at=at(1)), 1)
    assert store.prune(before=at(2), now=at(3)) == 1
    assert store.waiting() == []
    for sid in ("s1", "s2"):  # a claim is not a consumption: the messages are queued again
        assert ids_of(store.queued(key=f"m_{sid}")) == [mail[sid]]


def test_concurrent_claims_take_each_message_once(store: Any) -> None:
    ids = [store.post("job", b"%d" % i, at(1)) for i in range(THREADS)]
    taken = race(THREADS, lambda i: store.claim_mail("job", f"s{i}"))
    assert sorted(t[0] for t in taken) == ids


# -- claims of ready waits (a poll's round) ----------------------------------------------------


def leases(store: Any, *sids: str) -> list[tuple[str | None, Any]]:
    return [(r.lease_owner, r.lease_until) for r in map(store.load, sids)]


def test_claim_waits_leases_the_sessions_of_live_waits(store: Any) -> None:
    v1 = paused(store, "s1", wait("tk_a", lane=b"lane a"), wait("tk_b", index=1))
    paused(store, "s2", wait("tk_c", "s2"))
    paused(store, "s3", wait("tk_d", "s3"))
    store.consume_token("tk_d")
    got = store.claim_waits(["tk_a", "tk_b", "tk_c", "tk_d", "tk_nope"], "w1", at(30), at(1))
    assert sorted(got) == ["tk_a", "tk_b", "tk_c"]  # a used token and an unknown one: left out
    assert got["tk_a"].session_id == got["tk_b"].session_id == "s1"
    assert got["tk_c"].session_id == "s2"
    for record in got.values():
        assert (record.lease_owner, record.lease_until) == ("w1", at(30))
        assert record.status == "paused" and record == store.load(record.session_id)
    assert got["tk_a"].version == v1 and got["tk_a"].state == b"state of s1"
    assert leases(store, "s1", "s2") == [("w1", at(30))] * 2
    assert store.load("s3").lease_owner is None  # running, not claimed: not written
    # The waits are as they were: a claim is not a use (a parked lane stays in its row).
    assert tokens_of(store.waiting()) == ["tk_a", "tk_b", "tk_c"]
    assert store.wait("tk_a").lane == b"lane a"


def test_claim_waits_of_nothing_is_nothing(store: Any) -> None:
    paused(store, "s1", wait("tk_a"))
    assert store.claim_waits([], "w1", at(30), at(1)) == {}
    assert store.claim_waits(["tk_nope"], "w1", at(30), at(1)) == {}
    assert leases(store, "s1") == [(None, None)]


def test_claim_waits_skips_sessions_another_lease_holds_until_it_lapses(store: Any) -> None:
    paused(store, "s1", wait("tk_a"))
    paused(store, "s2", wait("tk_b", "s2"))
    assert sorted(store.claim_waits(["tk_a"], "w1", at(30), at(1))) == ["tk_a"]
    # w2 finds s1 held (and w1 too: its own lease is not free here, as in claim_due).
    assert sorted(store.claim_waits(["tk_a", "tk_b"], "w2", at(31), at(2))) == ["tk_b"]
    assert store.claim_waits(["tk_a"], "w1", at(32), at(3)) == {}
    assert leases(store, "s1", "s2") == [("w1", at(30)), ("w2", at(31))]
    # A lease that ended (its worker died) is free; so is one given back.
    assert sorted(store.claim_waits(["tk_a"], "w3", at(60), at(30))) == ["tk_a"]
    store.release("s2", "w2")
    assert sorted(store.claim_waits(["tk_b"], "w3", at(60), at(30))) == ["tk_b"]
    assert leases(store, "s1", "s2") == [("w3", at(60))] * 2


def test_claim_waits_takes_only_paused_sessions(store: Any) -> None:
    paused(store, "s1", wait("tk_a"), wait("tk_b", index=1))
    store.consume_token("tk_a")  # s1 runs: its other wait is not claimed
    assert store.claim_waits(["tk_b"], "w1", at(30), at(1)) == {}
    paused(store, "s2", wait("tk_c", "s2"))
    store.save(rec("s2", status="completed"), 1)  # ended: its waits went with it
    assert store.claim_waits(["tk_c"], "w1", at(30), at(1)) == {}
    assert leases(store, "s2") == [(None, None)]


def test_a_claimed_wait_is_resumed_at_the_version_claimed(store: Any) -> None:
    version = paused(
        store, "s1", wait("tk_a", lane=b"lane a"), wait("tk_b", index=1), wake_at=at(0)
    )
    [record, _] = store.claim_waits(["tk_a", "tk_b"], "w1", at(30), at(1)).values()
    assert record.version == version  # a claim is not a save: the version stays
    assert store.claim_due(at(1), "w2", at(31)) == []  # timers pass over it while it is held
    assert store.wait("tk_a").lane == b"lane a"
    assert store.consume_token("tk_a", owner="w1", until=at(40), version=record.version)
    assert store.load("s1").status == "running"
    assert leases(store, "s1") == [("w1", at(40))]
    assert tokens_of(store.waits("s1")) == ["tk_b"]


def test_concurrent_claims_of_the_same_waits_are_disjoint(store: Any) -> None:
    sids = [f"s{i:02}" for i in range(24)]
    for sid in sids:
        paused(store, sid, wait(f"tk_{sid}", sid))
    tokens = [f"tk_{sid}" for sid in sids]
    got = race(THREADS, lambda i: store.claim_waits(tokens, f"w{i}", at(30), at(1)))
    claimed = [r.session_id for found in got for r in found.values()]
    assert sorted(claimed) == sids  # each session claimed once, by one of them
    owners = {r.session_id: r.lease_owner for found in got for r in found.values()}
    assert leases(store, *sids) == [(owners[sid], at(30)) for sid in sids]


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
        assert store.post("k", b"v", at(1)) > 0
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
        store.queued(key="k1")
        store.queued(session_id="s1")
        store.waiters("k1")
        store._cur = real
        assert len(plans) == 8
        # A key's waiters, longest first, straight from the queue index.
        assert "waits_queue" in plans[7] and "TEMP B-TREE" not in plans[7], plans[7]
        for found in plans:
            assert "SCAN" not in found, found  # every lookup through an index or the key
        assert "waits_live_kind" in plans[1]
        assert "waits_queue" in plans[2] and "waits_queue" in plans[3]
        # Pages of every wait, and of a kind's, come in token order, unsorted (a key's few
        # waits are sorted).
        assert "TEMP B-TREE" not in " ".join(plans[:2])


def test_an_sqlite_file_of_schema_7_moves_its_waits_tokens_into_them(tmp_path: Path) -> None:
    """Schema 7 kept every token in the tokens table, a used one's wait deleted, and ordered a
    key's waiters by the tokens' rowids. On open, the tokens of live waits move into them (the
    order of the waiters kept); used tokens stay in the tokens table, refused as used."""
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        paused(store, "s1", wait("t1", key="k"), wait("t2", index=1, key="k"))
        paused(store, "s2", wait("t3", "s2", key="k"), wait("t4", "s2", index=1, wake_at=at(5)))
        store.create(rec("bad", status="failed", token="tk_f"))
    db = sqlite3.connect(path)
    for name in ("waits_queue", "waits_live_kind", "waits_session_live"):
        db.execute(f"DROP INDEX {name}")
    # t3 was registered first and t2 used: as schema 7 kept them.
    for token, sid in (("t3", "s2"), ("t1", "s1"), ("t2", "s1"), ("t4", "s2")):
        db.execute("INSERT INTO tokens (token, session_id, used) VALUES (?, ?, 0)", (token, sid))
    db.execute("UPDATE tokens SET used = 1 WHERE token = 't2'")
    db.execute("DELETE FROM waits WHERE token = 't2'")
    db.execute("ALTER TABLE waits DROP COLUMN used")
    db.execute("ALTER TABLE waits DROP COLUMN ord")
    db.execute("CREATE INDEX waits_key ON waits (key, token) WHERE key IS NOT NULL")
    db.execute("CREATE INDEX waits_kind ON waits (kind, token)")
    db.execute("CREATE INDEX waits_session_wake ON waits (session_id, wake_at)")
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert tokens_of(store.waiters("k")) == ["t3", "t1"]  # the order they came in
        assert tokens_of(store.waiting()) == ["t1", "t3", "t4"]
        assert store.find_token("t1") == TokenInfo("s1", False)
        assert store.find_token("t2") == TokenInfo("s1", True)
        assert store.load("s2").wake_at == at(5)
        assert store.consume_token("t2") is False
        assert store.consume_tokens(["t1", "t2"]) == {"t2": "used"}
        assert store.consume_token("t3") is True and store.consume_token("t3") is False
        assert store.find_token("t3") == TokenInfo("s2", True)
        assert tokens_of(store.waiters("k")) == ["t1"]
        paused(store, "s3", wait("t5", "s3", key="k"))
        assert tokens_of(store.waiters("k")) == ["t1", "t5"]  # a new waiter comes last
        assert store.consume_token("tk_f") is True  # a token with no wait: still usable
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (8,)
    in_tokens = {t for (t,) in db.execute("SELECT token FROM tokens")}
    assert in_tokens == {"t2", "tk_f"}  # the live waits' tokens moved into them
    db.close()


def test_an_sqlite_file_of_schema_7_keeps_filling_in_its_event_types(tmp_path: Path) -> None:
    """Schema 8 leaves out the `type` column of the events (the blob names the type); a file
    made before keeps the column, and every write of events fills it in."""
    path = tmp_path / "old.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    assert "type" not in {row[1] for row in db.execute("PRAGMA table_info(events)")}
    db.execute("DROP TABLE events")
    db.execute(
        "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "type TEXT NOT NULL, blob BLOB NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
    )
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        store.create(rec("s1"), events=[ev(1)])  # create
        store.append_events("s1", [ev(2), ev(3)])  # one statement
        store.append_events("s1", [ev(n) for n in range(4, 40)])  # a transaction of chunks
        version = paused(store, "s1", wait("t1"), version=0)
        assert store.consume_token("t1", events=[ev(40)])  # a token's use
        record = store.load("s1")
        assert store.save(record, version, events=[ev(41)]) == version + 1  # a save
        paused(store, "s1", wait("t2"), version=version + 1)
        assert store.consume_tokens(["t2"], events={"s1": [ev(42)]}) == {}  # many tokens' use
        assert [e.seq for e in store.events("s1")] == list(range(1, 43))
    db = sqlite3.connect(path)
    types = dict(db.execute("SELECT seq, type FROM events"))
    db.close()
    assert types == {e.seq: e.type for e in (ev(n) for n in range(1, 43))}


def test_sqlite_claims_of_ready_waits_use_keys(tmp_path: Path) -> None:
    from tarry.snapshots.sqlite.sql import _CLAIM_WAITS, _LIVE_WAITS

    def plan(sql: str, *args: Any) -> str:
        return " | ".join(r[3] for r in store._db.execute(f"EXPLAIN QUERY PLAN {sql}", args))

    with SQLiteStore(tmp_path / "s.db") as store:
        claim = plan(_CLAIM_WAITS, '["t1"]', "w", 2, 1)
        live = plan(_LIVE_WAITS, '["t1"]')
    for found in (claim, live):
        assert "SCAN sessions" not in found and "SCAN waits" not in found, found
        assert "waits USING PRIMARY KEY (token=?)" in found, found
    # Each session through its key, not every paused one through the status index.
    assert "sessions USING INDEX sqlite_autoindex_sessions_1 (session_id=?)" in claim, claim


@pytest.mark.parametrize("spoiled", [b"\xc1", b"\x01"])  # not msgpack; not an array
def test_sqlite_names_a_wait_path_it_cannot_read(tmp_path: Path, spoiled: bytes) -> None:
    from tarry.engine.errors import SnapshotError

    store = SQLiteStore(tmp_path / "w.db")
    paused(store, "s1", wait("t1", key="k"), wait("t2", index=1))
    with sqlite3.connect(tmp_path / "w.db") as db:
        db.execute("UPDATE waits SET path = ? WHERE token = 't2'", (spoiled,))
    with pytest.raises(SnapshotError, match="malformed wait path"):
        store.waits("s1")  # one session's waits: its own boundary hears of it
    # A page of every session's waits skips it (logged once): one bad row stops no poll.
    assert [w.token for w in store.waiting()] == ["t1"]
    assert [w.path for w in store.waiting(key="k")] == [("items", 0, "w")]
    store.close()


def test_an_sqlite_file_of_schema_3_keeps_its_mail_as_messages(tmp_path: Path) -> None:
    """The mailbox of schema 3 (one row per key and claimant) becomes the queue of schema 4:
    each row one message, in the order they came, claims kept."""
    path = tmp_path / "old.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE mail")
    db.execute(
        "CREATE TABLE mail (key TEXT NOT NULL, claimed_by TEXT NOT NULL DEFAULT '', "
        "value BLOB NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (key, claimed_by)) WITHOUT ROWID"
    )
    db.execute("CREATE INDEX mail_claimed ON mail (claimed_by) WHERE claimed_by <> ''")
    db.executemany(
        "INSERT INTO mail VALUES (?, ?, ?, ?)",
        [("job", "", b"later", 2_000_000), ("job", "s1", b"first", 1_000_000), ("x", "", b"x", 3)],
    )
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert [m.value for m in store.queued(key="job")] == [b"later"]
        assert store.claim_mail("job", "s1")[1] == b"first"  # s1's claim kept
        assert [m.value for m in store.queued(key="x")] == [b"x"]
        newest = max(m.id for m in store.queued(key="job"))
        assert store.post("job", b"new", at(9)) > newest
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (8,)
    db.close()


def test_an_sqlite_file_of_schema_5_gets_the_indexes_of_schema_6(tmp_path: Path) -> None:
    """Schema 5 indexed sessions by (status, ...) three times; schema 6 drops those and indexes
    timers and leases partially. The sessions of the old file are found through the new ones."""
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        paused(store, "timer", wait("t1", "timer"), wake_at=at(5))
        paused(store, "keyed", wait("t2", "keyed", key="k"))
        store.create(rec("leased", status="running", lease_owner="w", lease_until=at(3)))
    db = sqlite3.connect(path)
    db.execute("DROP INDEX sessions_wake")
    db.execute("DROP INDEX sessions_lease")
    db.execute("CREATE INDEX sessions_list ON sessions (status, flow, created_at)")
    db.execute("CREATE INDEX sessions_due ON sessions (status, wake_at)")
    db.execute("CREATE INDEX sessions_expired ON sessions (status, lease_until)")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert [r.session_id for r in store.due(at(9))] == ["timer"]
        assert [r.session_id for r in store.claim_due(at(9), "w2", at(20))] == ["timer"]
        assert [r.session_id for r in store.expired(at(9))] == ["leased"]
        assert store.consume_token("t2", owner="w", until=at(30))
        assert [r.session_id for r in store.expired(at(99))] == ["leased", "timer", "keyed"]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (8,)
    names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"sessions_wake", "sessions_lease"} <= names
    assert not names & {"sessions_list", "sessions_due", "sessions_expired"}
    db.close()


# -- the reads of a round that wakes parents (PostgresStore's; optional for a store) ------------


def _optional(store: Any, name: str) -> Any:
    found = getattr(store, name, None)
    if found is None:
        pytest.skip(f"{type(store).__name__} has no {name} (the drivers read one at a time)")
    return found


def test_pending_on_pairs_the_given_keys_only(store: Any) -> None:
    pending_on = _optional(store, "pending_on")
    fill(store)  # waits on k1: t2, t3, t4 (t4 longest); on k2: t7
    assert pending_on(["k1", "k2"]) == []
    m1 = store.post("k1", b"1", at(1))
    store.post("k1", b"1b", at(2))
    m2 = store.post("k2", b"2", at(3))
    store.post("nobody", b"x", at(1))
    found = pending_on(["k2", "k1", "nobody", "k1"])
    assert [(w.token, m.id, m.value) for w, m in found] == [("t4", m1, b"1"), ("t7", m2, b"2")]
    assert [(w.token, m.id) for w, m in pending_on(["k2"])] == [("t7", m2)]
    assert pending_on([]) == []


def test_pending_on_passes_over_a_running_session(store: Any) -> None:
    pending_on = _optional(store, "pending_on")
    fill(store)  # s1 waits on k1 with t4 (longest); s2 with t2
    store.post("k1", b"1", at(1))
    assert store.consume_token("t1")  # another wait of s1: s1 is running now
    assert pending_on(["k1"]) == []  # its wait takes the message once it pauses: later
    assert [w.token for w, _ in store.pending()] == ["t4"]


def test_wait_many_reads_the_waits_of_many_tokens_with_their_lanes(store: Any) -> None:
    wait_many = _optional(store, "wait_many")
    paused(store, "s1", wait("tk_a", lane=b"lane a"), wait("tk_b", index=1))
    found = wait_many(["tk_b", "tk_a", "tk_nope"])
    assert sorted(found) == ["tk_a", "tk_b"]
    assert found["tk_a"].lane == b"lane a" and found["tk_a"].path == ("items", 0, "w")
    assert found["tk_b"] == store.wait("tk_b")
    assert store.consume_token("tk_a")
    assert list(wait_many(["tk_a", "tk_b"])) == ["tk_b"]  # a used token has no wait
    assert wait_many([]) == {}


def test_get_values_at_reads_some_indexes_of_a_key(store: Any) -> None:
    get_values_at = _optional(store, "get_values_at")
    store.create(rec("s1"))
    store.put_values("s1", [("i", n, bytes([n])) for n in range(50)] + [("j", 7, b"j")])
    assert get_values_at("s1", "i", [41, 3, 7]) == {41: b")", 3: b"\x03", 7: b"\x07"}
    assert get_values_at("s1", "i", [3, 99]) == {3: b"\x03"}  # a missing one is left out
    assert get_values_at("s1", "j", [7]) == {7: b"j"}
    assert get_values_at("s2", "i", [3]) == {}
    assert get_values_at("s1", "i", []) == {}


def test_an_sqlite_file_of_schema_6_gets_the_phases_of_schema_7(tmp_path: Path) -> None:
    """Schema 6 listed by status through (status, created_at, session_id), whose entry moved
    at every pause and resume; schema 7 lists through the phase (live: running or paused).
    A file of schema 6 gets the column, filled in, and works: listings, resumes, ends."""
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        paused(store, "keyed", wait("t1", "keyed", key="k"))
        paused(store, "other", wait("t2", "keyed", key="k2"))
        store.create(rec("done", status="completed"))
        store.create(rec("bad", status="failed", token="tk_f"))
        store.create(rec("busy", status="running"))
    db = sqlite3.connect(path)
    db.execute("DROP INDEX sessions_phase_created")
    db.execute("ALTER TABLE sessions DROP COLUMN phase")
    db.execute("CREATE INDEX sessions_status_created ON sessions (status, created_at, session_id)")
    db.execute("PRAGMA user_version = 6")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:

        def listed(status: str) -> list[str]:
            return sorted(r.session_id for r in store.list(status=status))

        assert listed("paused") == ["keyed", "other"]
        assert listed("completed") == ["done"] and listed("failed") == ["bad"]
        assert listed("running") == ["busy"]
        assert store.consume_token("t1", owner="w", until=at(30))
        assert listed("running") == ["busy", "keyed"] and listed("paused") == ["other"]
        record = store.load("keyed")
        record.status = "completed"
        store.save(record, record.version)
        assert listed("completed") == ["done", "keyed"]
        assert store.consume_token("tk_f")  # a failed session resumed: live again
        assert listed("running") == ["bad", "busy"] and listed("failed") == []
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (8,)
    names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "sessions_phase_created" in names and "sessions_status_created" not in names
    phases = dict(db.execute("SELECT session_id, phase FROM sessions"))
    assert phases == {
        "keyed": "completed",
        "other": "live",
        "done": "completed",
        "bad": "live",
        "busy": "live",
    }
    db.close()
