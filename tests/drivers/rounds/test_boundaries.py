"""One bad session never stops the others: `resume_due()`, `poll()` and `recover()` handle each
session inside its own error boundary, on every store.

A poisoned session — its flow changed or missing, its snapshot truncated or inconsistent — is
logged once, left exactly as it was (its token unused) or, when its token was used before the
resume raised, failed with a typed error; and the round goes on with the others.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from support import Crash
from tarry import Flow, ForEach, ManualClock, Runtime, Sleep, Wait
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.snapshots.records import decode_state, encode_state


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def nap(version: int = 1, seconds: float = 5) -> Flow:
    """A flow that sleeps, then answers; version 2 has a step more (a deploy)."""
    body: list[Any] = [Sleep("nap", seconds), lambda ctx: "awake"]
    if version == 2:
        body.append(lambda ctx: "and more")
    return Flow("nap", body)


HEALTHY = Flow("healthy", [Sleep("nap", 6), lambda ctx: "fine"])
GHOST = Flow("ghost", [Sleep("nap", 5), lambda ctx: "boo"])
LOOP = Flow("loop", [ForEach("items", [1, 2, 3], [lambda ctx: ctx.item, Sleep("nap", 5)])])


def everything(store: Any, sid: str) -> tuple:
    """All a store holds of a session: to check that a poisoned one was left exactly as it was."""
    record = store.load(sid)
    return record, store.events(sid), store.find_token(record.token)


def truncate(store: Any, sid: str) -> None:
    record = store.load(sid)
    record.state = record.state[: len(record.state) // 2]
    store.save(record, record.version)


def point_past_the_body(store: Any, sid: str) -> None:
    """An inconsistent snapshot: its ForEach frame points past the end of the loop's body. It
    decodes, but the check against its flow refuses it before its token is used."""
    record = store.load(sid)
    state = decode_state(record.state)
    frame = attrs.evolve(state.container_stack[0], child=7)
    state = attrs.evolve(state, container_stack=(frame, *state.container_stack[1:]))
    record.state = encode_state(
        state, fingerprint=record.fingerprint, flow_version=record.flow_version
    )
    store.save(record, record.version)


def logged(caplog: pytest.LogCaptureFixture, sid: str) -> int:
    return sum(sid in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def test_one_bad_session_never_stops_the_timers_of_the_others(
    store: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    starter = Runtime(store=store, clock=clock)
    changed = starter.run(nap(1)).session_id
    ghost = starter.run(GHOST).session_id
    truncated = starter.run(nap(1)).session_id
    inconsistent = starter.run(LOOP).session_id
    healthy = [starter.run(HEALTHY).session_id for _ in range(3)]
    truncate(store, truncated)
    point_past_the_body(store, inconsistent)
    poisoned = {sid: everything(store, sid) for sid in (changed, ghost, truncated, inconsistent)}

    # A worker deployed with version 2 of `nap`, which does not know `ghost`. Every poisoned
    # session wakes a second before the healthy ones, so they are first in line.
    worker = Runtime(store=store, clock=clock, flows=[nap(2), HEALTHY, LOOP])
    clock.advance(10)
    outcomes = {o.session_id: o for o in worker.resume_due()}
    assert sorted(outcomes) == sorted(healthy)
    assert all(outcomes[sid].output == "fine" for sid in healthy)

    for sid, before in poisoned.items():
        assert everything(store, sid) == before, sid  # token unused, nothing written

    # Later rounds skip them without a word more: each was logged once.
    assert worker.resume_due() == [] and worker.resume_due() == []
    for sid in (changed, ghost, truncated, inconsistent):
        assert logged(caplog, sid) == 1, sid
    assert "no flow 'ghost'" in caplog.text

    # Left as they were, they go on once a runtime that can continue them comes along.
    fixed = Runtime(store=store, clock=clock, flows=[nap(1), GHOST])
    assert sorted(o.output for o in fixed.resume_due()) == ["awake", "boo"]
    assert worker.cancel(inconsistent).error.type == "cancelled"  # what can be done with it


@pytest.mark.parametrize("store", ["memory", "sqlite"], indirect=True)
def test_a_step_that_raises_on_resume_fails_its_session_and_the_round_goes_on(
    store: Any, clock: ManualClock
) -> None:
    def explode(ctx):
        raise RuntimeError("not today")

    fragile = Flow("fragile", [Sleep("nap", 5), explode])
    rt = Runtime(store=store, clock=clock, flows=[fragile, HEALTHY])
    bad = rt.run(fragile).session_id
    good = rt.run(HEALTHY).session_id
    clock.advance(10)
    outcomes = {o.session_id: o for o in rt.resume_due()}
    assert outcomes[bad].error.type == "RuntimeError" and outcomes[good].output == "fine"


def test_poisoned_sessions_first_in_line_do_not_starve_the_others(
    store: Any, clock: ManualClock
) -> None:
    starter = Runtime(store=store, clock=clock)
    poisoned = [starter.run(nap(1)).session_id for _ in range(100)]
    healthy = [starter.run(HEALTHY).session_id for _ in range(5)]
    worker = Runtime(store=store, clock=clock, flows=[nap(2), HEALTHY])
    clock.advance(10)
    outcomes = worker.resume_due(limit=100)
    assert sorted(o.session_id for o in outcomes) == sorted(healthy)
    assert all(store.load(sid).status == "paused" for sid in poisoned)
    assert all(store.load(sid).lease_owner is None for sid in poisoned)  # claims given back


@pytest.mark.parametrize("store", ["memory", "sqlite"], indirect=True)
def test_limit_counts_the_sessions_resumed_and_the_rest_wait_for_the_next_round(
    store: Any, clock: ManualClock
) -> None:
    rt = Runtime(store=store, clock=clock, flows=[HEALTHY])
    sids = [rt.run(HEALTHY).session_id for _ in range(5)]
    clock.advance(10)
    first = rt.resume_due(limit=3)
    second = rt.resume_due(limit=3)
    assert len(first) == 3 and len(second) == 2
    assert sorted(o.session_id for o in first + second) == sorted(sids)


def test_poll_asks_the_adapters_about_the_others_when_one_is_poisoned(
    store: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    waiting = Flow("waiting", [Wait("job", reason="results"), lambda ctx: ctx.prev])
    rt = Runtime(
        store=store,
        clock=clock,
        flows=[waiting],
        adapters={"external": lambda request: {"rows": 3}},
    )
    starter = Runtime(store=store, clock=clock)
    bad = starter.run(waiting).session_id
    good = starter.run(waiting).session_id
    truncate(store, bad)
    before = everything(store, bad)
    [done] = rt.poll()
    assert done.session_id == good and done.output == {"rows": 3}
    assert rt.poll() == []
    assert everything(store, bad) == before and logged(caplog, bad) == 1


def crash_mid_run(store: Any, clock: ManualClock, flow: Flow) -> str:
    """A session whose process died while running it: paused at its Sleep once, then resumed
    by a process that used the token, wrote `run.resumed` and died (its lease lapsed)."""
    rt = Runtime(store=store, clock=clock, lease=5)
    out = rt.run(flow)
    record = store.load(out.session_id)
    state = decode_state(record.state)
    event = Event(
        state.last_seq + 1, ev.RUN_RESUMED, out.session_id, clock.now(), state.pause.path, {}
    )
    assert store.consume_token(record.token, owner="dead", until=clock.now(), events=[event])
    return out.session_id


def test_recover_continues_the_others_when_one_cannot_be_recovered(
    store: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    truncated = crash_mid_run(store, clock, nap(1, seconds=0))
    inconsistent = crash_mid_run(store, clock, LOOP)
    crashed: list[int] = []

    def crash_once(ctx):
        if not crashed:
            crashed.append(1)
            raise Crash  # the process dies mid-step
        return "recovered"

    crashy = Flow("crashy", [crash_once])
    with pytest.raises(Crash):
        Runtime(store=store, clock=clock, lease=5).run(crashy)
    [healthy] = [s.session_id for s in Runtime(store=store).sessions(flow="crashy")]
    truncate(store, truncated)
    point_past_the_body(store, inconsistent)
    clock.advance(6)
    rt = Runtime(store=store, clock=clock, flows=[nap(1, seconds=0), LOOP, crashy])
    outcomes = {o.session_id: o for o in rt.recover()}
    assert sorted(outcomes) == [healthy]
    assert outcomes[healthy].output == "recovered"

    # Those that cannot be continued stay listed as dead runs, for a runtime that can.
    listed = [r.session_id for r in store.expired(clock.now())]
    assert sorted(listed) == sorted([truncated, inconsistent])
    assert rt.recover() == [] and rt.recover() == []
    assert logged(caplog, truncated) == 1 and logged(caplog, inconsistent) == 1


def test_a_missing_flow_is_one_warning_per_session_not_one_per_round(
    store: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    starter = Runtime(store=store, clock=clock)
    ghosts = [starter.run(GHOST).session_id for _ in range(3)]
    rt = Runtime(store=store, clock=clock)
    clock.advance(10)
    for _ in range(4):
        assert rt.resume_due() == []
    warnings = [r.getMessage() for r in caplog.records if "no flow 'ghost'" in r.getMessage()]
    assert len(warnings) == 3 and all(any(s in w for w in warnings) for s in ghosts)


def test_a_corrupt_wait_row_stops_no_poll(tmp_path: Any) -> None:
    """One waiting branch whose stored row cannot be read is skipped (logged once); every other
    request of the adapter's kind is still asked about and resumed."""
    import sqlite3

    from tarry import Flow, Runtime, Wait
    from tarry.snapshots import SQLiteStore

    path = tmp_path / "w.db"
    flow = Flow("asked", [Wait("w", kind="external"), lambda ctx: ctx.prev])
    rt = Runtime(store=SQLiteStore(path), adapters={"external": lambda request: "ready"})
    bad, good = rt.run(flow), rt.run(flow)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE waits SET path = ? WHERE session_id = ?", (b"\xc1", bad.session_id))
    outcomes = rt.poll()
    assert [o.session_id for o in outcomes] == [good.session_id]
    assert outcomes[0].ok and outcomes[0].output == "ready"
    assert rt.session(bad.session_id).status == "paused"
