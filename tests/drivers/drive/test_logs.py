"""Python `logging` records emitted inside steps are captured and kept with the session."""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tarry
from support import WAIT, settle
from tarry import ForEach, Gate, ManualClock, Parallel, Runtime
from tarry.snapshots import SQLiteStore

log = logging.getLogger("app.jobs")
T0 = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def app_logs_enabled() -> Iterator[None]:
    # Logging creates a record only for a logger enabled for its level: under pytest, as in a
    # program that configures nothing, the root logger is at WARNING.
    log.setLevel(logging.DEBUG)
    yield
    log.setLevel(logging.NOTSET)


def both(fn: Any, asynchronous: bool) -> Any:
    """`fn` as a step of its own kind: sync, or `async def` doing the same."""
    if not asynchronous:
        return tarry.step(fn, name=fn.__name__)

    async def run(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return fn(ctx)

    return tarry.step(run, name=fn.__name__)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_records_of_a_step_are_kept_with_their_step(asynchronous: bool) -> None:
    def fetch(ctx: Any) -> int:
        log.info("fetched %d rows", 3)
        log.debug("below the capture level")
        return 3

    def check(ctx: Any) -> None:
        log.warning("only %s rows", ctx.prev)

    rt = Runtime(clock=ManualClock(T0))
    flow = tarry.Flow("logged", [both(fetch, asynchronous), both(check, asynchronous)])
    out = settle(rt.run(flow))
    assert out.ok
    assert rt.logs(out.session_id) == [
        tarry.LogRecord(1, T0, "INFO", 20, "app.jobs", "fetched 3 rows", ("fetch",)),
        tarry.LogRecord(2, T0, "WARNING", 30, "app.jobs", "only 3 rows", ("check",)),
    ]
    assert [r.seq for r in rt.logs(out.session_id, level="WARNING")] == [2]
    assert [r.seq for r in rt.logs(out.session_id, level=logging.INFO, after=1)] == [2]
    assert [r.seq for r in rt.logs(out.session_id, limit=1)] == [1]
    assert rt.dropped_logs(out.session_id) == 0


def test_the_capture_level_and_bound_are_the_runtimes(tmp_path: Path) -> None:
    def chatty(ctx: Any) -> None:
        for i in range(5):
            log.warning("record %d", i)
            log.info("info %d", i)

    flow = tarry.Flow("chatty", [chatty])
    rt = Runtime(log_level="WARNING", max_logs=3)
    out = rt.run(flow)
    kept = rt.logs(out.session_id)
    # The last 3, numbered among all 5 captured: the 2 dropped are counted.
    assert [(r.seq, r.message) for r in kept] == [(3, "record 2"), (4, "record 3"), (5, "record 4")]
    assert rt.dropped_logs(out.session_id) == 2
    nothing = Runtime(max_logs=0)
    assert nothing.logs(nothing.run(flow).session_id) == []


def test_records_go_on_across_pauses_and_processes(tmp_path: Path) -> None:
    def before(ctx: Any) -> None:
        log.info("before the gate")

    def after(ctx: Any) -> None:
        log.error("after the gate: %s", ctx.prev["by"])

    flow = tarry.Flow("gated", [before, Gate("ok"), after])
    out = Runtime(store=SQLiteStore(tmp_path / "s.db")).run(flow)
    assert out.paused
    other = Runtime(store=SQLiteStore(tmp_path / "s.db"), flows=[flow])
    other.resume(out.token, {"approved": True, "by": "ann"})
    got = other.logs(out.session_id)
    assert [(r.seq, r.path, r.message) for r in got] == [
        (1, ("before",), "before the gate"),
        (2, ("after",), "after the gate: ann"),
    ]


def test_exceptions_are_kept_and_long_messages_cut() -> None:
    def fails(ctx: Any) -> None:
        try:
            raise ValueError("bad row 7")
        except ValueError:
            log.exception("could not parse")
        log.warning("x" * 10_000)

    rt = Runtime()
    out = rt.run(tarry.Flow("fails", [fails]))
    first, long = rt.logs(out.session_id)
    assert first.level == "ERROR"
    assert first.message.startswith("could not parse\nTraceback")
    assert "ValueError: bad row 7" in first.message
    assert len(long.message.encode()) <= 4096 and long.message.endswith("bytes cut]")


def test_records_from_outside_its_steps_are_not_kept() -> None:
    seen: list[str] = []

    def step_with_thread(ctx: Any) -> None:
        log.warning("mine")
        # A thread the step starts does not inherit its context: not this session's...
        plain = threading.Thread(target=log.warning, args=("from a plain thread",))
        plain.start()
        plain.join()
        # ...unless the step hands its context on.
        carried = contextvars.copy_context()
        handed = threading.Thread(target=carried.run, args=(log.warning, "handed on"))
        handed.start()
        handed.join()
        logging.getLogger("tarry").warning("the runtime's own")
        seen.append(ctx.session_id)

    rt = Runtime()
    log.warning("before any run")
    out = rt.run(tarry.Flow("threads", [step_with_thread]))
    log.warning("after the run")
    assert [r.message for r in rt.logs(out.session_id)] == ["mine", "handed on"]
    assert seen == [out.session_id]


def test_sessions_running_at_once_keep_their_own_records() -> None:
    barrier = threading.Barrier(2, timeout=WAIT)

    def work(ctx: Any) -> None:
        barrier.wait()  # both sessions are inside their step now
        for i in range(20):
            log.warning("%s %d", ctx.input, i)

    rt = Runtime()
    flow = tarry.Flow("both", [work])
    outs: dict[str, Any] = {}

    def run(name: str) -> None:
        outs[name] = rt.run(flow, input=name)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, out in outs.items():
        messages = [r.message for r in rt.logs(out.session_id)]
        assert messages == [f"{name} {i}" for i in range(20)]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_concurrent_lanes_name_their_own_step(asynchronous: bool) -> None:
    def work(ctx: Any) -> int:
        log.warning("item %s", ctx.item)
        return int(ctx.item)

    def side(ctx: Any) -> str:
        log.warning("side %s", ctx.path[1])
        return "ok"

    flow = tarry.Flow(
        "lanes",
        [
            ForEach("items", list(range(8)), [both(work, asynchronous)], concurrency=4),
            Parallel(
                "sides", {"left": both(side, asynchronous), "right": both(side, asynchronous)}
            ),
        ],
    )
    rt = Runtime()
    out = settle(rt.run(flow))
    assert out.ok, out.error
    got = rt.logs(out.session_id)
    items = {r.message: r.path for r in got if r.message.startswith("item")}
    assert items == {f"item {i}": ("items", i, "work") for i in range(8)}
    sides = {r.message: r.path for r in got if r.message.startswith("side")}
    assert sides == {
        "side left": ("sides", "left", "side"),
        "side right": ("sides", "right", "side"),
    }
    assert [r.seq for r in got] == list(range(1, 11))


def test_logging_configuration_is_left_alone() -> None:
    handlers = list(logging.root.handlers)
    level = logging.root.level
    rt = Runtime()
    rt.run(tarry.Flow("quiet", [lambda ctx: log.warning("hi")]))
    assert logging.root.handlers == handlers and logging.root.level == level


def test_bad_arguments_are_refused() -> None:
    rt = Runtime()
    out = rt.run(tarry.Flow("one", [lambda ctx: None]))
    with pytest.raises(tarry.UnknownSession):
        rt.logs("no-such-session")
    with pytest.raises(tarry.UnknownSession):
        rt.logs("")
    for bad in ({"level": "LOUD"}, {"level": -1}, {"after": -1}, {"after": "1"}, {"limit": 0}):
        with pytest.raises(tarry.InvalidArgument):
            rt.logs(out.session_id, **bad)
    with pytest.raises(tarry.InvalidArgument, match="log_level"):
        Runtime(log_level="LOUD")
    with pytest.raises(tarry.InvalidArgument, match="max_logs"):
        Runtime(max_logs=-1)


def test_async_sessions_interleaved_on_one_loop_keep_their_own_records() -> None:
    async def work(ctx: Any) -> None:
        for i in range(10):
            log.warning("%s %d", ctx.input, i)
            await asyncio.sleep(0)  # the other session's step runs here

    rt = Runtime()
    flow = tarry.Flow("interleaved", [tarry.step(work, name="work")])

    async def both_sessions() -> list[Any]:
        return list(await asyncio.gather(rt.arun(flow, input="a"), rt.arun(flow, input="b")))

    for out, name in zip(asyncio.run(both_sessions()), "ab", strict=True):
        assert [r.message for r in rt.logs(out.session_id)] == [f"{name} {i}" for i in range(10)]


def test_dropped_logs_of_an_unknown_session_is_refused_as_logs_is(store: Any) -> None:
    rt = Runtime(store)
    out = rt.run(tarry.Flow("quiet", [lambda ctx: None]))
    assert rt.dropped_logs(out.session_id) == 0  # a session with no records at all
    for unknown in ("no-such-session", ""):
        with pytest.raises(tarry.UnknownSession):
            rt.dropped_logs(unknown)
