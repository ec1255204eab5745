"""History and stats: sessions(), events(), ctx.metric, stats() against a hand count, and the
JSON Lines export."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import tarry
from tarry import Flow, ForEach, Gate, ManualClock, Retry, Runtime, step


def scoring_flow(clock: ManualClock) -> Flow:
    @step(retry=Retry(attempts=3, initial=1.0, jitter=False))
    def ask(ctx: tarry.Context) -> int:
        clock.advance(2)  # every attempt takes 2 s
        ctx.metric("tokens", 10)
        ctx.metric("cost", 0.5)
        if ctx.item == "bad" and ctx.attempt < 2:
            raise ConnectionError("rate limited")
        if ctx.item == "worse":
            raise ConnectionError("down")
        return len(ctx.item)

    def total(ctx: tarry.Context) -> int:
        clock.advance(1)
        ctx.metric("tokens", 1)
        return sum(ctx.prev)

    return Flow("score", [ForEach("prompts", lambda ctx: ctx.input, [ask]), total])


def test_stats_add_up_against_a_hand_count() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    flow = scoring_flow(clock)
    assert rt.run(flow, ["ab", "cde"]).ok  # ask x2, total x1
    assert rt.run(flow, ["bad"]).ok  # ask fails once then succeeds, total x1
    assert rt.run(flow, ["worse"]).failed  # ask fails 3 times
    paused = rt.run(Flow("other", [Gate("g")]))

    stats = rt.stats()
    assert stats.sessions == 4
    assert stats.by_status == {"completed": 2, "failed": 1, "paused": 1}
    ask = stats.nodes["ask"]
    # attempts: 2 + (1 failed + 1 ok) + 3 failed = 7 executions, 4 failures
    assert (ask.executions, ask.failures) == (7, 4)
    assert ask.mean_seconds == pytest.approx(2.0)
    assert ask.metrics == {"tokens": 70, "cost": 3.5}
    total = stats.nodes["total"]
    assert (total.executions, total.failures, total.mean_seconds) == (2, 0, 1.0)
    assert stats.metrics == {"tokens": 72, "cost": 3.5}
    # The per-run sums are in each session's state.
    summed = {"tokens": 0.0, "cost": 0.0}
    for s in rt.sessions():
        for name, value in rt.session(s.session_id).state.metrics.items():
            summed[name] += value
    assert summed == stats.metrics
    assert rt.session(paused.session_id).state.metrics == {}

    only = rt.stats(flow="other")
    assert only.by_status == {"paused": 1} and only.metrics == {}
    assert rt.stats(flow=flow).sessions == 3


def test_stats_on_sqlite_match_memory(tmp_path: Path) -> None:
    results = []
    for store in (None, f"sqlite:///{tmp_path / 's.db'}"):
        clock = ManualClock()
        rt = Runtime(store=store, clock=clock)
        flow = scoring_flow(clock)
        rt.run(flow, ["a", "bad"])
        rt.run(flow, ["worse"])
        results.append(rt.stats())
    assert results[0] == results[1]


def test_metric_values_must_be_numbers() -> None:
    rt = Runtime()

    def bad(ctx: tarry.Context) -> None:
        ctx.metric("tokens", "many")

    out = rt.run(Flow("f", [bad]))
    assert out.failed and out.error.type == "TypeError" and "number" in out.error.message


def test_sessions_newest_first_with_filters_and_paging() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    a, b = Flow("a", [lambda ctx: 1]), Flow("b", [Gate("g")])
    ids = []
    for flow in (a, b, a, b, a):
        ids.append(rt.run(flow).session_id)
        clock.advance(1)
    assert [s.session_id for s in rt.sessions()] == ids[::-1]
    assert [s.session_id for s in rt.sessions(flow="a")] == [ids[4], ids[2], ids[0]]
    assert [s.session_id for s in rt.sessions(flow=b, status="paused")] == [ids[3], ids[1]]
    assert [s.session_id for s in rt.sessions(limit=2, offset=1)] == [ids[3], ids[2]]
    assert rt.sessions(status="completed", flow="b") == []
    for bad in ({"status": "done"}, {"limit": 0}, {"offset": -1}, {"flow": 3}):
        with pytest.raises(tarry.InvalidArgument):
            rt.sessions(**bad)


def test_export_events_as_json_lines(tmp_path: Path) -> None:
    rt = Runtime()
    out = rt.run(Flow("f", [lambda ctx: b"\x00bytes", Gate("g", "Check")]), {"n": (1, 2)})
    rt.resume(out.token, {"approved": True, "by": "ann"})
    view = rt.session(out.session_id)

    path = tmp_path / "events.jsonl"
    count = tarry.export_events(view, path)
    lines = path.read_text().splitlines()
    assert count == len(lines) == len(view.events())
    rows = [json.loads(line) for line in lines]
    assert [r["seq"] for r in rows] == list(range(1, count + 1))
    assert rows[0]["type"] == "run.started" and rows[0]["data"]["input"] == {"n": [1, 2]}
    assert rows[-1]["type"] == "run.completed"
    assert all(r["session_id"] == out.session_id for r in rows)
    bytes_out = next(r for r in rows if r["type"] == "node.completed")
    assert bytes_out["data"]["output"] == {"$bytes": "AGJ5dGVz"}
    assert "tk_" not in path.read_text()  # tokens never appear in events

    buffer = io.StringIO()
    assert tarry.export_events(view.events(after_seq=count - 2), buffer) == 2
    assert buffer.getvalue() == "\n".join(lines[-2:]) + "\n"


# -- stats on big and damaged stores --------------------------------------------------------------


def corrupt_an_event(store, session_id: str) -> None:
    """Overwrite the stored bytes of the session's second event with something undecodable."""
    junk = b"\xc1"  # never valid msgpack
    if hasattr(store, "_sessions"):  # MemoryStore: one blob per write
        entry = store._sessions[session_id]
        if type(entry.batches) is list:
            entry.batches[-1] = junk
        else:
            entry.batches = junk
    elif hasattr(store, "_pool"):  # PostgresStore
        with store._pool.connection() as conn:
            conn.execute(
                "UPDATE tarry_events SET blob = %s WHERE session_id = %s AND seq = 2",
                (junk, session_id),
            )
    else:
        with store._lock:
            store._db.execute(
                "UPDATE events SET blob = ? WHERE session_id = ? AND seq = 2", (junk, session_id)
            )


def test_one_unreadable_session_does_not_stop_stats(store, caplog) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)
    flow = scoring_flow(clock)
    assert rt.run(flow, ["ab"]).ok
    broken = rt.run(flow, ["cd"])
    assert rt.run(flow, ["efg"]).ok
    corrupt_an_event(store, broken.session_id)
    with pytest.raises(tarry.SnapshotError):
        rt.session(broken.session_id).events()
    stats = rt.stats()
    assert stats.by_status == {"completed": 3}  # still counted by status
    assert stats.nodes["ask"].executions == 2  # left out of the node figures
    assert stats.metrics == {"tokens": 22, "cost": 1.0}
    assert broken.session_id in caplog.text and "left out" in caplog.text
    assert rt.stats() == stats  # and again, the same


def test_stats_read_only_new_events(store) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)
    flow = scoring_flow(clock)
    for items in (["a"] * 30, ["b"] * 30):
        assert rt.run(flow, items).ok
    first = rt.stats()
    assert first.nodes["ask"].executions == 60
    reads: list[tuple[str, int, int | None]] = []
    events = store.events

    def spy(session_id, after_seq=0, limit=None):
        reads.append((session_id, after_seq, limit))
        return events(session_id, after_seq, limit)

    store.events = spy
    assert rt.stats() == first
    assert reads == []  # every tally is up to date: no event is read
    out = rt.run(flow, ["c"])
    second = rt.stats()
    assert second.nodes["ask"].executions == 61
    assert {sid for sid, _, _ in reads} == {out.session_id}
    assert all(limit is not None for _, _, limit in reads)
