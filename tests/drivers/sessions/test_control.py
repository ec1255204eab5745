"""Control from any process: abort and cancel a running session through the store, see it live,
and keep each session's own durability. On memory (another Runtime over the same store), SQLite
and PostgreSQL (other processes).

This file is also the script the child processes run:
    python test_control.py run URL SID LOG N DELAY [DURABILITY [LEASE]]  -> the outcome as JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import WAIT, Ticks, wait_until
from tarry import (
    Flow,
    ForEach,
    Gate,
    InvalidArgument,
    ManualClock,
    Runtime,
    UnknownSession,
    step,
)
from tarry.drivers.drive.drive import TICK

HERE = str(Path(__file__).resolve())


def make_flow() -> Flow:
    """N items, each a side effect logged to a file: no completed item may ever run twice. Each
    takes `delay` seconds while the file LOG.slow exists (`start_child` makes it): a test
    removes it to have the rest run quickly."""

    @step(name="work")
    def work(ctx: Any) -> int:
        with open(ctx.input["log"], "a") as f:
            f.write(f"{ctx.index}\n")
        if os.path.exists(ctx.input["log"] + ".slow"):
            time.sleep(ctx.input["delay"])  # the work that an abort cuts short
        return ctx.item * 2

    return Flow("slow", [ForEach("items", lambda ctx: list(range(ctx.input["n"])), work)])


def child(
    url: str, sid: str, log: str, n: str, delay: str, durability: str = "pause", lease: str = "30"
) -> None:
    rt = Runtime(store=url, lease=float(lease))
    value = {"log": log, "n": int(n), "delay": float(delay)}
    out = rt.run_sync(make_flow(), value, session_id=sid, durability=durability)
    reason = out.pause.reason if out.pause else None
    error = out.error.type if out.error else None
    print(json.dumps({"status": out.status, "reason": reason, "error": error}), flush=True)


if __name__ == "__main__":
    child(*sys.argv[2:])
    sys.exit(0)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'control.db'}"
        return
    import pgserver

    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def start_child(
    url: str,
    sid: str,
    log: Path,
    n: int,
    delay: float,
    durability: str = "pause",
    lease: float = 30.0,
) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        HERE,
        "run",
        url,
        sid,
        str(log),
        str(n),
        str(delay),
        durability,
        str(lease),
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(HERE).parents[2])}
    fast(log, False)
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def fast(log: Path, on: bool = True) -> None:
    """The items of the run logging to `log` take no time from now on (or `delay`, if not on)."""
    slow = Path(f"{log}.slow")
    if on:
        slow.unlink(missing_ok=True)
    else:
        slow.touch()


def lines(log: Path) -> list[int]:
    return [int(x) for x in log.read_text().split()] if log.exists() else []


wait_for = wait_until


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


# -- abort and cancel from another process -----------------------------------------------------

N = 400  # items of DELAY seconds: a minute of work at the least, unless the abort works
DELAY = 0.15


def test_abort_from_another_process_stops_the_run_resumably(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc = start_child(url, "s1", log, N, DELAY)
    wait_for(lambda: len(lines(log)) >= 3, "the child's first items")
    rt = Runtime(store=url, flows=[make_flow()])
    assert rt.session("s1").status == "running"
    rt.abort("s1")
    result = finish(proc)
    assert result == {"status": "paused", "reason": "aborted", "error": None}
    done = lines(log)
    assert 3 <= len(done) < N  # stopped early, not after the whole run
    fast(log)
    out = rt.resume(rt.session("s1").outcome.token)
    assert out.ok and out.output == [2 * i for i in range(N)]
    assert sorted(lines(log)) == list(range(N))  # every item ran exactly once


def test_cancel_from_another_process_ends_the_run_as_cancelled(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc = start_child(url, "s1", log, N, DELAY)
    wait_for(lambda: len(lines(log)) >= 3, "the child's first items")
    rt = Runtime(store=url)
    asked = rt.cancel("s1")
    assert asked.status == "running" and asked.meta == {"stop_requested": "cancel"}
    assert finish(proc) == {"status": "error", "reason": None, "error": "cancelled"}
    assert rt.session("s1").status == "cancelled"
    assert len(lines(log)) < N


def test_abort_not_resumable_from_another_process_cancels(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    proc = start_child(url, "s1", log, N, DELAY)
    wait_for(lambda: len(lines(log)) >= 3, "the child's first items")
    Runtime(store=url).abort("s1", resumable=False)
    assert finish(proc)["error"] == "cancelled"


def test_a_running_session_is_live_from_another_process(url: str, tmp_path: Path) -> None:
    """Default durability: the run still writes its progress at least once a second."""
    log = tmp_path / "log"
    proc = start_child(url, "s1", log, N, DELAY)
    try:
        rt = Runtime(store=url)
        wait_for(lambda: len(lines(log)) >= 1, "the child's first item")
        # The first progress write comes within a second of the start.
        wait_for(lambda: rt.session("s1").state.container_stack, "a stored container frame")
        view = rt.session("s1")
        assert view.status == "running" and view.state.status == "running"
        (frame,) = view.state.container_stack
        assert frame.node == "items" and frame.kind == "foreach"
        assert frame.completed_iterations >= 1
        assert view.derive_state() == view.state
        later = len(view.events())
        wait_for(lambda: len(rt.session("s1").events()) > later, "more events written")
    finally:
        Runtime(store=url).abort("s1")
        finish(proc)


def test_the_session_keeps_its_own_durability_when_another_process_continues_it(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    proc = start_child(url, "s1", log, N, DELAY, durability="step")
    wait_for(lambda: len(lines(log)) >= 3, "the child's first items")
    proc.kill()  # no write at all after this: what is stored is what step durability wrote
    proc.communicate(timeout=WAIT)
    # By this Runtime's clock the dead run's lease (30 s) has lapsed: no waiting it out. The
    # clock stands still; the recovered run's own lease is renewed by it all the same.
    fast(log)
    later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
    # This Runtime's default durability: "pause".
    rt = Runtime(store=url, flows=[make_flow()], clock=later)
    view = rt.session("s1")
    assert view.durability == "step"
    stored = {e.data["index"] for e in view.events() if e.type == "container.iteration_completed"}
    assert stored == set(range(len(stored))) and len(lines(log)) - len(stored) <= 1
    # Recovered with step durability: each item is written as it completes, so the events are
    # in the store while the recovered run is still going.
    seen: dict[int, int] = {}
    reader = Runtime(store=url)

    def watch(event: Any) -> None:
        index = event.data.get("index")
        if event.type == "container.iteration_completed" and index % 50 == 49:
            seen[index] = len(reader.session("s1").events())

    rt.subscribe(watch)
    (out,) = rt.recover()
    assert out.ok and out.output == [2 * i for i in range(N)]
    # Every earlier item's four events were written by then ("pause" would lag up to a second).
    assert len(seen) == N // 50 and all(n >= 4 * i for i, n in seen.items()), seen


# -- in one process: another Runtime over the same store, and the live view --------------------


@pytest.fixture(params=["memory", "sqlite"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    from tarry.snapshots import MemoryStore, SQLiteStore

    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")


def blocked_flow(gate: threading.Event, reached: threading.Event) -> Flow:
    def wait_here(ctx: Any) -> str:
        if ctx.index == 2:
            reached.set()
            assert gate.wait(WAIT)
        return f"item {ctx.index}"

    return Flow("blocked", [ForEach("items", [0, 1, 2, 3], wait_here)])


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    return thread, result


def test_a_session_running_in_this_process_is_seen_live(shared_store: Any) -> None:
    gate, reached = threading.Event(), threading.Event()
    rt = Runtime(store=shared_store)
    flow = blocked_flow(gate, reached)
    thread, result = in_thread(lambda: rt.run(flow, session_id="s1"))
    try:
        assert reached.wait(WAIT)
        view = rt.session("s1")
        assert view.status == "running"
        (frame,) = view.state.container_stack
        assert (frame.iteration, frame.completed_iterations) == (2, 2)
        assert view.derive_state() == view.state
        last = view.events()[-1]
        assert (last.type, last.path) == ("node.started", ("items", 2, "wait_here"))
        assert view.outcome.status == "running"
    finally:
        gate.set()
        thread.join(WAIT)
    assert result[0].ok


def test_abort_and_cancel_through_another_runtime_over_the_same_store(
    shared_store: Any, ticks: Ticks
) -> None:
    gate, reached = threading.Event(), threading.Event()
    rt = Runtime(store=shared_store)
    other = Runtime(store=shared_store)
    thread, result = in_thread(lambda: rt.run(blocked_flow(gate, reached), session_id="s1"))
    assert reached.wait(WAIT)
    other.abort("s1")  # stored; seen at the first checkpoint a TICK or more from the start
    ticks.advance(TICK)
    gate.set()
    thread.join(WAIT)
    out = result[0]
    assert out.paused and out.pause.reason == "aborted"
    assert rt.resume(out.token).ok


def test_unknown_sessions_are_refused(rt: Runtime) -> None:
    with pytest.raises(UnknownSession):
        rt.abort("nope")
    with pytest.raises(UnknownSession):
        rt.abort("nope", resumable=False)
    with pytest.raises(UnknownSession):
        rt.cancel("nope")
    with pytest.raises(UnknownSession):
        rt.abort("")


def test_a_resumed_session_is_stored_as_running(shared_store: Any) -> None:
    gate, reached = threading.Event(), threading.Event()

    def wait_here(ctx: Any) -> str:
        reached.set()
        assert gate.wait(WAIT)
        return "done"

    rt = Runtime(store=shared_store)
    other = Runtime(store=shared_store)
    paused = rt.run(Flow("gated", [Gate("ok"), wait_here]), session_id="s1")
    assert other.session("s1").status == "paused"
    thread, result = in_thread(lambda: rt.resume(paused.token, True))
    try:
        assert reached.wait(WAIT)
        assert other.session("s1").status == "running"
    finally:
        gate.set()
        thread.join(WAIT)
    assert result[0].ok and other.session("s1").status == "completed"


def test_durability_is_the_sessions_own(shared_store: Any) -> None:
    rt = Runtime(store=shared_store)  # default "pause"
    out = rt.run(Flow("g", [Gate("ok")]), durability="step")
    assert rt.session(out.session_id).durability == "step"
    assert rt.session(rt.run(Flow("h", [lambda ctx: 1])).session_id).durability == "pause"
    with pytest.raises(InvalidArgument, match="durability"):
        rt.run(Flow("i", [lambda ctx: 1]), durability="always")
