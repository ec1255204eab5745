"""Who did it (`actor=` on every control method), sessions a page at a time, stats of a period."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import tarry
from support import WAIT
from tarry import Flow, ForEach, Gate, ManualClock, Runtime, Wait
from tarry.engine.errors import InvalidArgument


def explode(ctx):
    raise RuntimeError("boom")


GATED = Flow("gated", [Gate("approve")])
KEYED = Flow("keyed", [Wait("result", key=lambda ctx: ctx.input)])
FRAGILE = Flow("fragile", [explode])


def data_of(rt: Runtime, sid: str, type_: str) -> list[dict]:
    return [e.data for e in rt.session(sid).events() if e.type == type_]


def test_every_control_method_records_its_actor() -> None:
    rt = Runtime()
    out = rt.run(GATED, actor="ann")
    assert data_of(rt, out.session_id, "run.started")[0]["actor"] == "ann"
    rt.resume(out.token, {"approved": True}, actor="bob")
    assert data_of(rt, out.session_id, "run.resumed")[0]["actor"] == "bob"

    out = rt.run(GATED)
    assert "actor" not in data_of(rt, out.session_id, "run.started")[0]
    rt.cancel(out.session_id, actor="cy")
    assert data_of(rt, out.session_id, "run.cancelled") == [{"actor": "cy"}]

    out = rt.run(FRAGILE)
    rt.skip(out.token, 1, actor="dee")
    assert data_of(rt, out.session_id, "run.resumed")[0]["actor"] == "dee"

    out = rt.run(KEYED, "job-1")
    rt.deliver("job-1", 5, actor="eve")
    assert data_of(rt, out.session_id, "run.resumed")[0]["actor"] == "eve"
    out = rt.run(KEYED, "job-2")
    rt.deliver_many({"job-2": 5}, actor="fay")
    assert data_of(rt, out.session_id, "run.resumed")[0]["actor"] == "fay"


def test_an_abort_records_its_actor() -> None:
    gate, reached = threading.Event(), threading.Event()

    def hold(ctx):
        reached.set()
        assert gate.wait(WAIT)

    rt = Runtime()
    flow = Flow("held", [ForEach("items", [0, 1], hold)])
    result: list[tarry.Outcome] = []
    thread = threading.Thread(target=lambda: result.append(rt.run(flow)))
    thread.start()
    assert reached.wait(WAIT)
    (sid,) = [s.session_id for s in rt.sessions(status="running")]
    rt.abort(sid, actor="gus")
    gate.set()
    thread.join(WAIT)
    assert result[0].paused
    (paused,) = data_of(rt, sid, "run.paused")
    assert paused["reason"] == "aborted" and paused["actor"] == "gus"


@pytest.mark.parametrize("actor", ["", 7, "x" * 300])
def test_a_bad_actor_is_refused_and_changes_nothing(actor) -> None:
    rt = Runtime()
    out = rt.run(GATED)
    with pytest.raises(InvalidArgument, match="actor"):
        rt.resume(out.token, True, actor=actor)
    with pytest.raises(InvalidArgument, match="actor"):
        rt.run(GATED, actor=actor)
    assert rt.session(out.session_id).status == "paused"
    assert len(rt.sessions()) == 1


def test_sessions_page_by_cursor_is_stable_under_inserts() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    ids = []
    for i in range(7):
        clock.advance(1)
        ids.append(rt.run(GATED, session_id=f"s{i}").session_id)
    newest = ids[::-1]
    page = rt.sessions_page(limit=3)
    assert [s.session_id for s in page.sessions] == newest[:3]
    clock.advance(1)
    rt.run(GATED, session_id="late")  # created between two pages: not on the next ones
    second = rt.sessions_page(limit=3, cursor=page.next_cursor)
    assert [s.session_id for s in second.sessions] == newest[3:6]
    last = rt.sessions_page(limit=3, cursor=second.next_cursor)
    assert [s.session_id for s in last.sessions] == newest[6:]
    assert last.next_cursor is None
    assert [s.session_id for s in rt.sessions_page(q="s1").sessions] == ["s1"]
    assert [s.session_id for s in rt.sessions_page(q="gat", limit=2).sessions] == ["late", "s6"]


@pytest.mark.parametrize("cursor", ["nope", "", "eyJ4IjogMX0", 5])
def test_a_malformed_cursor_is_refused(cursor) -> None:
    with pytest.raises(InvalidArgument, match="cursor"):
        Runtime().sessions_page(cursor=cursor)


def test_stats_of_a_period() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    start = clock.now()
    rt.run(GATED)
    clock.advance(3600)
    rt.run(FRAGILE)
    assert rt.stats().by_status == {"paused": 1, "failed": 1}
    hour = dt.timedelta(hours=1)
    assert rt.stats(since=start + hour).by_status == {"failed": 1}
    assert rt.stats(until=start + hour).by_status == {"paused": 1}
    assert rt.stats(since=start, until=start + hour, flow="fragile").by_status == {}
    with pytest.raises(InvalidArgument, match="since"):
        rt.stats(since=dt.datetime(2024, 1, 1))  # naive: which zone?
    with pytest.raises(InvalidArgument, match="until"):
        rt.stats(since=start + hour, until=start)
