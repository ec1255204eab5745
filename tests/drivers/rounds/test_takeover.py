"""Takeover within seconds: short leases kept alive by the lease keeper through long steps,
`recover(session_id=...)`, and the `stale` status shown for a running session whose lease
lapsed. The clock is a ManualClock; nothing sleeps (the keeper's round is called directly)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from support import WAIT
from tarry import (
    Flow,
    ForEach,
    ManualClock,
    Runtime,
    SessionNotResumable,
    UnknownFlow,
    UnknownSession,
)
from tarry.snapshots import MemoryStore, SQLiteStore


class Crash(BaseException):
    """Stands for the process dying: nothing in tarry catches it."""


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")


def crashing(ran: list[int], crash_at: int | None) -> Flow:
    def work(ctx):
        ran.append(ctx.item)
        if ctx.item == crash_at and ran.count(ctx.item) == 1:
            raise Crash
        return ctx.item

    return Flow("takeover", [ForEach("items", [1, 2, 3], work)])


@pytest.fixture
def by_hand(monkeypatch):
    """The lease keeper's rounds run only when the test calls `renew_due`: its thread (which
    runs one a third of a lease after a drive began, by the machine's clock) does nothing. On
    a loaded machine that thread may otherwise renew a lease at any moment of the test: after
    the ManualClock has been moved on and before a thief's claim, which then fails."""
    from tarry.drivers.drive.lease_keeper import LeaseKeeper

    monkeypatch.setattr(LeaseKeeper, "_run", lambda self: None)


def crashed(store, clock: ManualClock) -> str:
    """A session whose process died in its second step (durability "step", default lease)."""
    rt = Runtime(store=store, durability="step", clock=clock)
    with pytest.raises(Crash):
        rt.run(crashing([], crash_at=2), session_id="s1")
    return "s1"


def test_the_default_lease_makes_a_dead_run_recoverable_within_ten_seconds(store) -> None:
    clock = ManualClock()
    assert Runtime().lease == 10.0
    sid = crashed(store, clock)
    other = Runtime(store=store, durability="step", clock=clock, flows=[crashing([], None)])
    clock.advance(9.9)
    assert other.recover() == []  # its lease still holds
    clock.advance(0.1)
    [out] = other.recover()
    assert out.ok and out.session_id == sid and out.output == [1, 2, 3]


def test_a_lapsed_lease_shows_as_stale_until_recovered(store) -> None:
    clock = ManualClock()
    sid = crashed(store, clock)
    rt = Runtime(store=store, clock=clock, flows=[crashing([], None)])
    [row] = rt.sessions()
    assert row.status == "running" and row.lease_until > clock.now()
    assert rt.sessions(status="stale") == []
    clock.advance(10)
    [row] = rt.sessions()
    assert row.status == "stale" and row.lease_until <= clock.now()
    assert [s.session_id for s in rt.sessions(status="stale")] == [sid]
    # Filtering by the stored status still finds it (shown as stale).
    assert [s.status for s in rt.sessions(status="running")] == ["stale"]
    assert [s.status for s in rt.sessions_page(status="stale").sessions] == ["stale"]
    assert [s.status for s in rt.sessions_page().sessions] == ["stale"]
    view = rt.session(sid)
    assert view.status == "running" and view.stale(clock.now())  # derived, never stored
    [out] = rt.recover(session_id=sid)
    assert out.ok
    [row] = rt.sessions()
    assert row.status == "completed" and row.lease_until is None
    assert rt.sessions(status="stale") == []


def test_stale_filter_pages_past_live_running_sessions(tmp_path) -> None:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "p.db")
    for i in range(3):
        with pytest.raises(Crash):
            Runtime(store=store, durability="step", clock=clock).run(
                crashing([], crash_at=2), session_id=f"old{i}"
            )
    clock.advance(11)
    with pytest.raises(Crash):  # a newer one whose lease holds
        Runtime(store=store, durability="step", clock=clock).run(
            crashing([], crash_at=2), session_id="young"
        )
    rt = Runtime(store=store, clock=clock)
    stale = [s.session_id for s in rt.sessions(status="stale")]
    assert stale == ["old2", "old1", "old0"]
    assert [s.session_id for s in rt.sessions(status="stale", limit=1, offset=1)] == ["old1"]
    page = rt.sessions_page(status="stale", limit=2)
    assert [s.session_id for s in page.sessions] == ["old2", "old1"]
    rest = rt.sessions_page(status="stale", limit=2, cursor=page.next_cursor)
    assert [s.session_id for s in rest.sessions] == ["old0"] and rest.next_cursor is None
    assert {s.session_id: s.status for s in rt.sessions(status="running")}["young"] == "running"


def test_recover_one_session_refuses_what_it_cannot_take_over(store) -> None:
    clock = ManualClock()
    sid = crashed(store, clock)
    rt = Runtime(store=store, clock=clock, flows=[crashing([], None)])
    with pytest.raises(UnknownSession):
        rt.recover(session_id="nope")
    with pytest.raises(SessionNotResumable, match="lease holds"):
        rt.recover(session_id=sid)  # its process may be alive
    clock.advance(10)
    with pytest.raises(UnknownFlow):  # a runtime that lacks the flow changes nothing
        Runtime(store=store, clock=clock).recover(session_id=sid)
    assert rt.sessions()[0].status == "stale"
    [out] = rt.recover(session_id=sid)
    assert out.ok
    with pytest.raises(SessionNotResumable, match="completed"):
        rt.recover(session_id=sid)


def test_recover_one_leaves_the_other_stale_sessions(store) -> None:
    clock = ManualClock()
    for sid in ("a", "b"):
        with pytest.raises(Crash):
            Runtime(store=store, durability="step", clock=clock).run(
                crashing([], crash_at=2), session_id=sid
            )
    clock.advance(10)
    rt = Runtime(store=store, clock=clock, flows=[crashing([], None)])
    [out] = rt.recover(session_id="b")
    assert out.ok and out.session_id == "b"
    assert {s.session_id: s.status for s in rt.sessions()} == {"a": "stale", "b": "completed"}


def test_the_lease_keeper_keeps_a_long_step_from_being_taken_over(tmp_path, by_hand) -> None:
    """A step longer than the lease has no checkpoint; the keeper renews its lease, so another
    process's recover() never runs it twice, and the session never shows as stale."""
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "k.db")
    entered, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def long_step(ctx):
        ran.append(1)
        entered.set()
        assert release.wait(WAIT)
        return "done"

    flow = Flow("long", [long_step])
    rt = Runtime(store=store, durability="step", clock=clock)
    other = Runtime(store=store, durability="step", clock=clock, flows=[flow])
    result: list = []
    runner = threading.Thread(target=lambda: result.append(rt.run(flow, session_id="L")))
    runner.start()
    try:
        assert entered.wait(WAIT)
        keeper = rt._core.keeper
        for _ in range(5):  # 45 s of the ManualClock, renewed every 9 s by the keeper
            clock.advance(9)
            assert keeper.renew_due(time.monotonic() + 3600) == 1
            assert other.recover() == []
            assert other.sessions()[0].status == "running"
    finally:
        release.set()
        runner.join(WAIT)
    [out] = result
    assert out.ok and out.output == "done" and ran == [1]
    assert rt._core.keeper.drives == {}  # an ended drive is no longer kept
    assert rt._core.keeper.renew_due(time.monotonic() + 3600) == 0


def test_a_drive_whose_lease_the_keeper_finds_taken_stops_without_writing(
    tmp_path, by_hand
) -> None:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "lost.db")
    entered, release = threading.Event(), threading.Event()

    def long_step(ctx):
        entered.set()
        assert release.wait(WAIT)
        return ctx.item

    flow = Flow("lost", [ForEach("items", [1, 2], long_step)])
    rt = Runtime(store=store, durability="step", clock=clock)
    result: list = []
    runner = threading.Thread(target=lambda: result.append(rt.run(flow, session_id="X")))
    runner.start()
    try:
        assert entered.wait(WAIT)
        clock.advance(11)  # the keeper did not run in time (a stalled process)
        assert store.claim("X", "thief", clock.now().replace(year=2100), clock.now())
        assert rt._core.keeper.renew_due(time.monotonic() + 3600) == 1
    finally:
        release.set()
        runner.join(WAIT)
    [out] = result
    assert out.failed and out.error.type == "lease_lost"
    assert store.load("X").lease_owner == "thief"


def test_a_live_session_is_not_stale_in_the_http_api_and_a_dead_one_is(tmp_path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from tarry.drivers.http.app import create_app

    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = SQLiteStore(tmp_path / "h.db")
    sid = crashed(store, clock)
    rt = Runtime(store=store, clock=clock, flows=[crashing([], None)])
    client = TestClient(create_app(rt), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1))
    assert client.get(f"/api/sessions/{sid}").json()["status"] == "running"
    clock.advance(10)
    body = client.get(f"/api/sessions/{sid}").json()
    assert body["status"] == "stale" and body["actions"]["recover"] is True
    assert body["lease_until"] is not None
    listed = client.get("/api/sessions").json()["sessions"]
    assert [s["status"] for s in listed] == ["stale"]
    assert [
        s["session_id"] for s in client.get("/api/sessions?status=stale").json()["sessions"]
    ] == [sid]


def test_the_http_api_recovers_a_stale_session(tmp_path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from tarry.drivers.http.app import create_app

    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = SQLiteStore(tmp_path / "r.db")
    sid = crashed(store, clock)
    rt = Runtime(store=store, clock=clock, flows=[crashing([], None)])
    client = TestClient(create_app(rt), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1))
    early = client.post(f"/api/sessions/{sid}/recover")
    assert early.status_code == 409 and early.json()["error"] == "SessionNotResumable"
    clock.advance(10)
    done = client.post(f"/api/sessions/{sid}/recover")
    assert done.status_code == 200 and done.json()["status"] == "ok"
    assert client.get(f"/api/sessions/{sid}").json()["status"] == "completed"
    assert client.post("/api/sessions/nope/recover").status_code == 404
