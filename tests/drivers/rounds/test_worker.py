"""The worker loop from Python, and flow references `MODULE:FLOW`."""

from __future__ import annotations

import sys
import threading
import uuid
from pathlib import Path

import pytest
from support import WAIT, wait_until
from tarry import NOT_READY, Flow, ForEach, ManualClock, Runtime, Sleep, Wait
from tarry.drivers.worker import FlowRefError, Worker, load_flow
from tarry.snapshots import SQLiteStore


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a module into a fresh current directory; returns a function that writes one and
    gives its (unique) name. sys.path is restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])

    def write(source: str) -> str:
        name = f"flows_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(source)
        return name

    return write


def waiting_flow() -> Flow:
    return Flow("waiting", [Wait("batch", reason="the batch job"), lambda ctx: ctx.prev["rows"]])


def test_run_once_resumes_sessions_whose_adapter_is_ready() -> None:
    ready: dict[str, int] = {}
    asked: list[str] = []

    def batch_done(request):
        asked.append(request.reason)
        return {"rows": ready["rows"]} if ready else NOT_READY

    rt = Runtime(adapters={"external": batch_done})
    out = rt.run(waiting_flow())
    reported: list[tuple[str, str]] = []
    worker = Worker(rt, report=lambda source, o: reported.append((source, o.status)))
    assert worker.run_once() == [] and asked == ["the batch job"]
    ready["rows"] = 7
    [done] = worker.run_once()
    assert done.session_id == out.session_id and done.ok and done.output == 7
    assert reported == [("resumed", "ok")]
    assert worker.run_once() == []


def test_run_forever_stops_between_rounds() -> None:
    rt = Runtime(adapters={"external": lambda request: {"rows": 1}})
    out = rt.run(waiting_flow())
    resumed = threading.Event()
    worker = Worker(rt, interval=0.05, report=lambda source, o: resumed.set())
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    assert resumed.wait(WAIT)
    worker.stop()
    thread.join(WAIT)
    assert not thread.is_alive() and worker.stopping
    assert rt.session(out.session_id).status == "completed"


def test_a_failing_round_is_logged_and_the_loop_goes_on(caplog, monkeypatch) -> None:
    rt = Runtime()
    rounds: list[int] = []
    worker = Worker(rt, interval=0.01)

    def flaky(*args, **kwargs) -> list:
        rounds.append(1)
        if len(rounds) == 1:
            raise OSError("store briefly away")
        worker.stop()
        return []

    monkeypatch.setattr(rt.store, "expired", flaky)
    worker.run_forever()
    assert len(rounds) == 2 and "a round failed" in caplog.text


def test_the_worker_imports_the_flows_its_sessions_recorded(tmp_path: Path, module) -> None:
    name = module(
        "from tarry import Flow, Sleep\n"
        "nap = Flow('nap', [Sleep('s', seconds=60), lambda ctx: 'up'])\n"
    )
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "w.db")
    starter = Runtime(store=store, clock=clock)
    out = starter.run(load_flow(f"{name}:nap"), meta={"flow_ref": f"{name}:nap"})
    assert out.paused

    other = Runtime(store=store, clock=clock)  # knows no flows
    worker = Worker(other)
    assert worker.run_once() == []  # not due yet
    clock.advance(61)
    [done] = worker.run_once()
    assert done.ok and done.output == "up"

    clock.advance(61)
    assert Worker(other, import_flows=False).run_once() == []  # nothing else due


def test_a_session_of_a_flow_it_cannot_import_is_left_alone(
    tmp_path: Path, caplog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # importing puts the current folder on sys.path: keep it clean
    monkeypatch.setattr(sys, "path", list(sys.path))
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "w.db")
    flow = Flow("nap", [Sleep("s", seconds=1)])
    Runtime(store=store, clock=clock).run(flow, meta={"flow_ref": "gone_module:nap"})
    clock.advance(2)
    worker = Worker(Runtime(store=store, clock=clock))
    assert worker.run_once() == [] and worker.run_once() == []
    assert caplog.text.count("no module named 'gone_module'") == 1  # tried once, not per round
    assert Runtime(store=store, clock=clock, flows=[flow]).resume_due()[0].ok


def test_load_flow_explains_each_bad_reference(module) -> None:
    name = module(
        "from tarry import Flow\n"
        "class Box:\n"
        "    flow = Flow('boxed', [lambda ctx: 1])\n"
        "number = 42\n"
    )
    broken = module("raise RuntimeError('half-written module')\n")
    assert load_flow(f"{name}:Box.flow").name == "boxed"
    cases = {
        name: "expected MODULE:FLOW",
        f"{name}:": "expected MODULE:FLOW",
        "no_such_module_x:flow": "no module named 'no_such_module_x'",
        f"{name}:missing": "has no attribute 'missing'",
        f"{name}:number": "must be a tarry.Flow (got int 42)",
        f"{broken}:flow": "RuntimeError: half-written module",
    }
    for ref, message in cases.items():
        with pytest.raises(FlowRefError) as info:
            load_flow(ref)
        assert message in str(info.value) and info.value.ref == ref


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be a positive number"):
        Worker(Runtime(), interval=0)


def test_stop_from_another_thread_wakes_a_long_wait() -> None:
    waiting = threading.Event()
    # After its first round the worker waits out its interval (an hour) ...
    worker = Worker(Runtime(), interval=3600, on_round=lambda seconds, failed: waiting.set())
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    assert waiting.wait(WAIT)
    worker.stop()
    thread.join(WAIT)
    # ... unless woken: it ended within WAIT (a bound against a hang, not a speed requirement).
    assert not thread.is_alive()


# --- batches, stopping ---------------------------------------------------------------------------


def test_a_round_that_handled_a_full_batch_starts_the_next_at_once() -> None:
    clock = ManualClock()
    flow = Flow("nap", [Sleep("s", seconds=1), lambda ctx: "up"])
    rt = Runtime(clock=clock, flows=[flow])
    sids = [rt.run(flow).session_id for _ in range(5)]
    clock.advance(2)
    done: list[str] = []
    all_done = threading.Event()

    def report(source: str, outcome) -> None:
        done.append(outcome.session_id)
        if len(done) == len(sids):
            all_done.set()

    # Two sessions a round, and an hour between rounds that were not full: all five are
    # resumed in three rounds back to back (2, 2, 1), and only then does the worker wait.
    worker = Worker(rt, interval=3600, limit=2, report=report)
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    try:
        assert all_done.wait(WAIT), f"resumed {len(done)} of {len(sids)}, then waited"
    finally:
        worker.stop()
        thread.join(WAIT)
    assert sorted(done) == sorted(sids) and not thread.is_alive()


def test_stop_pauses_the_session_in_progress_and_hands_it_back() -> None:
    started, go = threading.Event(), threading.Event()
    ran: list[int] = []

    def item(ctx):
        ran.append(ctx.item)
        if ctx.item == 3:
            started.set()  # the worker is told to stop while this step runs
            assert go.wait(WAIT)
        return ctx.item

    flow = Flow("long", [Sleep("nap", seconds=0), ForEach("items", list(range(50)), item)])
    rt = Runtime(flows=[flow])
    sid = rt.run(flow).session_id
    worker = Worker(rt, interval=3600)
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    assert started.wait(WAIT)
    worker.stop()
    # The stop is asked from a thread of its own.
    wait_until(lambda: sid in rt._core.running.aborts, "the stop to reach the run")
    go.set()
    thread.join(WAIT)
    assert not thread.is_alive()

    view = rt.session(sid)
    assert view.status == "paused" and view.state.pause.reason == "aborted"
    assert ran == [0, 1, 2, 3]  # the step in flight finished; no other started
    assert rt.store.load(sid).wake_at is not None  # handed back: due for any worker

    [done] = Worker(rt).run_once()
    assert done.ok and done.output == list(range(50))
    assert sorted(ran) == [0, 1, 2, 3, *range(4, 50)]  # nothing ran twice


def test_flows_are_imported_when_a_round_meets_their_sessions(tmp_path: Path, module) -> None:
    name = module(
        "from tarry import Flow, Sleep\n"
        "nap = Flow('nap', [Sleep('s', seconds=60), lambda ctx: 'up'])\n"
    )
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "w.db")
    starter = Runtime(store=store, clock=clock)
    broken = Flow("broken", [Sleep("s", seconds=30)])
    for _ in range(3):  # first in line, with a flow reference that cannot be imported
        starter.run(broken, meta={"flow_ref": "gone_module:broken"})
    healthy = {
        starter.run(load_flow(f"{name}:nap"), meta={"flow_ref": f"{name}:nap"}).session_id
        for _ in range(3)
    }
    clock.advance(61)
    worker = Worker(Runtime(store=store, clock=clock), limit=2)
    assert {o.session_id for o in worker.run_once() + worker.run_once()} == healthy
