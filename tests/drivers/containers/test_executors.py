"""Where sync steps run: `Runtime(max_threads=N)` sizes the thread pool of concurrent lanes;
`Runtime(executor=...)` runs them on any executor, processes included, with the same events,
retries and exactly-once recording — through the public API."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator
from concurrent.futures import (
    BrokenExecutor,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
)
from pathlib import Path
from typing import Any

import pytest
import remote_steps
from support import WAIT
from tarry import Flow, ForEach, InvalidArgument, Parallel, Retry, Runtime, step
from tarry.snapshots import SQLiteStore


def consistent(rt: Runtime, sid: str) -> None:
    view = rt.session(sid)
    assert view.derive_state() == view.state
    seqs = [e.seq for e in view.events()]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.fixture(scope="module")
def processes() -> Iterator[ProcessPoolExecutor]:
    """Two worker processes for the module, started by a fork server (no fork of this
    process's threads); the steps they run come from `remote_steps`, imported by name."""
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver"))
    yield pool
    pool.shutdown()


# -- the thread pool ---------------------------------------------------------------------------


class Peak:
    """Counts the calls running at once; each waits at a barrier of `parties`, so that that
    many must run at once (or the barrier breaks) and the peak shows any more."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=WAIT)
        self.lock = threading.Lock()
        self.now = self.most = 0

    def __call__(self, ctx: Any) -> int:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        self.barrier.wait()
        with self.lock:
            self.now -= 1
        return ctx.item


@pytest.mark.parametrize(("max_threads", "peak"), [(4, 4), (None, 32)])
def test_max_threads_caps_the_sync_calls_running_at_once(max_threads: Any, peak: int) -> None:
    work = Peak(peak)
    n = peak * 4
    flow = Flow("peak", [ForEach("fe", list(range(n)), step(work, "work"), concurrency=100)])
    out = Runtime(max_threads=max_threads).run(flow)
    assert out.ok, out.error
    assert out.output == list(range(n))
    assert work.most == peak  # concurrency=100, but no more threads than the pool has


def test_max_threads_bounds_all_the_containers_of_a_runtime() -> None:
    work = Peak(3)
    body = ForEach("fe", list(range(6)), step(work, "work"), concurrency=10)
    flow = Flow("two", [Parallel("par", {"a": body, "b": body})])
    out = Runtime(max_threads=3).run(flow)
    assert out.ok, out.error
    assert work.most == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_threads": 0},
        {"max_threads": -1},
        {"max_threads": 2.0},
        {"max_threads": "4"},
        {"max_threads": True},
        {"executor": object()},
        {"executor": "threads"},
        {"max_threads": 4, "executor": ThreadPoolExecutor(1)},
    ],
)
def test_bad_executor_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        Runtime(**kwargs)


def test_a_thread_pool_given_is_used_and_left_running() -> None:
    names: list[str] = []

    def where(ctx: Any) -> int:
        names.append(threading.current_thread().name)
        ctx.state[f"s{ctx.item}"] = ctx.item  # the live ctx: in this process
        return ctx.item * 2

    with ThreadPoolExecutor(2, thread_name_prefix="mine") as pool:
        rt = Runtime(executor=pool)
        flow = Flow("mine", [ForEach("fe", list(range(6)), where, concurrency=4)])
        out = rt.run(flow)
        assert out.ok, out.error
        assert out.output == [0, 2, 4, 6, 8, 10]
        assert len(names) == 6 and all(name.startswith("mine") for name in names)
        assert rt.session(out.session_id).state.shared == {f"s{i}": i for i in range(6)}
        assert pool.submit(int, "7").result() == 7  # tarry did not shut it down


# -- processes ---------------------------------------------------------------------------------


def test_a_process_pool_runs_steps_in_other_processes(processes: ProcessPoolExecutor) -> None:
    rt = Runtime(executor=processes)
    flow = Flow("procs", [ForEach("fe", [10, 20, 30, 40], remote_steps.pid, concurrency=4)])
    out = rt.run(flow, {"model": "m"})
    assert out.ok, out.error
    assert [o["item"] for o in out.output] == [10, 20, 30, 40]  # item order
    assert [o["index"] for o in out.output] == [0, 1, 2, 3]
    assert all(o["pid"] != os.getpid() for o in out.output)
    assert all(o["input"] == {"model": "m"} and o["session"] == out.session_id for o in out.output)
    assert out.output[1]["path"] == ["fe", 1, "pid"]
    assert len({o["key"] for o in out.output}) == 4  # each position its own idempotency key
    consistent(rt, out.session_id)
    types = [e.type for e in rt.session(out.session_id).events()]
    assert types.count("node.started") == 4 + 1 and types.count("node.completed") == 4 + 1


def test_a_module_level_step_object_is_sent_by_name(processes: ProcessPoolExecutor) -> None:
    flow = Flow("named", [ForEach("fe", [1, 2], remote_steps.decorated, concurrency=2)])
    out = Runtime(executor=processes).run(flow)
    assert out.ok, out.error
    assert out.output == [2, 3]


def test_a_step_exception_comes_back_with_its_traceback(processes: ProcessPoolExecutor) -> None:
    flow = Flow("boom", [ForEach("fe", [1, 2, 3], remote_steps.boom, concurrency=3)])
    rt = Runtime(executor=processes)
    out = rt.run(flow)
    assert out.failed
    error = out.error
    assert error.type == "ValueError" and error.message.startswith("no 2 in pid ")
    assert int(error.message.rsplit(" ", 1)[1]) != os.getpid()
    assert error.path == ("fe", 1, "boom") and error.retryable
    assert "remote_steps.py" in error.traceback and "in boom" in error.traceback
    consistent(rt, out.session_id)


def test_the_retry_policy_applies_to_a_step_in_another_process(
    processes: ProcessPoolExecutor,
) -> None:
    retry = Retry(attempts=2, initial=0, jitter=False)
    flow = Flow(
        "flaky", [ForEach("fe", [1, 2], step(remote_steps.fail_first, retry=retry), concurrency=2)]
    )
    rt = Runtime(executor=processes)
    out = rt.run(flow)
    assert out.ok, out.error
    assert out.output == [102, 202]
    types = [e.type for e in rt.session(out.session_id).events()]
    assert types.count("node.failed") == 2 and types.count("node.retrying") == 2


@pytest.mark.parametrize("retry", [None, Retry(attempts=5, initial=0)])
def test_a_step_that_does_not_pickle_fails_at_once_typed_and_not_retried(
    processes: ProcessPoolExecutor, retry: Any
) -> None:
    factor = 3

    def closure(ctx: Any) -> int:
        return ctx.item * factor

    for fn in (lambda ctx: ctx.item, closure):
        flow = Flow("local", [ForEach("fe", [1, 2], step(fn, "local", retry=retry), concurrency=2)])
        rt = Runtime(executor=processes)
        out = rt.run(flow)
        assert out.failed
        error = out.error
        assert error.type == "NotSendable" and not error.retryable and error.attempts == 1
        assert error.path[0] == "fe" and error.path[2] == "local"
        assert "fe/" in error.message and "does not pickle" in error.message
        assert fn.__qualname__ in error.message
        types = [e.type for e in rt.session(out.session_id).events()]
        assert "node.retrying" not in types
        consistent(rt, out.session_id)


def test_a_step_the_worker_cannot_load_fails_at_once_typed_and_not_retried(
    processes: ProcessPoolExecutor,
) -> None:
    """A function that pickles here by its module and name but is not there in the worker (as
    one of __main__ defined after the pool's workers started) fails with NotSendable."""

    def missing(ctx: Any) -> int:
        return 1

    missing.__module__ = "remote_steps"
    missing.__qualname__ = missing.__name__ = "defined_here_only"
    remote_steps.defined_here_only = missing  # type: ignore[attr-defined]
    try:
        flow = Flow("unloadable", [ForEach("fe", [1, 2], step(missing, "gone"), concurrency=2)])
        rt = Runtime(executor=processes)
        out = rt.run(flow)
    finally:
        del remote_steps.defined_here_only  # type: ignore[attr-defined]
    assert out.failed
    error = out.error
    assert error.type == "NotSendable" and not error.retryable and error.attempts == 1
    assert "could not be loaded" in error.message and "defined_here_only" in error.message
    assert "node.retrying" not in [e.type for e in rt.session(out.session_id).events()]
    consistent(rt, out.session_id)


def test_what_only_the_driver_has_or_an_output_that_does_not_pickle_fails_typed(
    processes: ProcessPoolExecutor,
) -> None:
    rt = Runtime(executor=processes)
    flow = Flow(
        "outs",
        [
            step(lambda ctx: 1, "first"),  # sequential: runs in place
            ForEach("fe", [1], remote_steps.reads_outputs, concurrency=2),
        ],
    )
    out = rt.run(flow)
    assert out.failed and out.error.type == "NotSendable" and not out.error.retryable
    assert "ctx.outputs" in out.error.message
    flow = Flow("back", [ForEach("fe", [1], remote_steps.unsendable_output, concurrency=2)])
    out = rt.run(flow)
    assert out.failed and out.error.type == "NotSendable" and "its output" in out.error.message


def test_state_writes_and_metrics_of_a_remote_step_are_recorded(
    processes: ProcessPoolExecutor,
) -> None:
    def seed(ctx: Any) -> None:
        ctx.state["seed"] = 100
        ctx.state["drop"] = True

    flow = Flow(
        "effects",
        [step(seed, "seed"), ForEach("fe", [1, 2, 3], remote_steps.effects, concurrency=3)],
    )
    rt = Runtime(executor=processes)
    out = rt.run(flow)
    assert out.ok, out.error
    assert out.output == [100, 100, 100]
    view = rt.session(out.session_id)
    assert view.state.shared == {"seed": 100, "item1": 101, "item2": 102, "item3": 103}
    assert rt.stats().metrics["weight"] == 6
    consistent(rt, out.session_id)


def test_an_interrupt_in_another_process_pauses_and_resumes(
    processes: ProcessPoolExecutor, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    flow = Flow("ask", [ForEach("fe", [1, 2], remote_steps.ask, concurrency=2)])
    out = Runtime(store=store, executor=processes).run(flow)
    assert out.paused and len(out.pauses) == 2
    assert sorted(p.reason for p in out.pauses) == ["ok 1?", "ok 2?"]
    assert sorted(p.payload["item"] for p in out.pauses) == [1, 2]
    # Another Runtime (as in another process) resumes each branch, on the same executor.
    other = Runtime(store=store, executor=processes, flows=[flow])
    by_item = {p.payload["item"]: p.token for p in out.pauses}
    first = other.resume(by_item[1], "yes")
    assert first.paused and len(first.pauses) == 1
    done = other.resume(by_item[2], "no")
    assert done.ok, done.error
    assert [(o["item"], o["answer"]) for o in done.output] == [(1, "yes"), (2, "no")]
    assert all(o["pid"] != os.getpid() for o in done.output)
    consistent(other, out.session_id)


class Crash(BaseException):
    """The process dies here (escapes the step's error handling, as a kill would)."""


@pytest.mark.parametrize("where", ["processes", "shared submissions"])
def test_a_recovered_session_goes_on_on_the_executor_and_never_repeats_a_step(
    processes: ProcessPoolExecutor, tmp_path: Path, where: str
) -> None:
    # "shared submissions": 1 worker, so that the lanes' calls go 2 to a submission
    executor: Any = processes if where == "processes" else Inline(workers=1)
    died: list[bool] = []

    def make(crash: bool) -> Flow:
        def hook(ctx: Any) -> None:
            if crash and not died:
                died.append(True)
                raise Crash

        return Flow(
            "rec",
            [
                ForEach("a", [1, 2, 3, 4], remote_steps.pid, concurrency=4),
                step(hook, "hook"),
                ForEach("b", [5, 6, 7, 8], remote_steps.pid, concurrency=4),
            ],
        )

    from tarry import ManualClock

    clock = ManualClock()
    store = SQLiteStore(tmp_path / "r.db")
    rt = Runtime(store=store, durability="step", clock=clock, executor=executor)
    with pytest.raises(Crash):
        rt.run(make(True))
    clock.advance(3600)
    other = Runtime(
        store=store, durability="step", clock=clock, executor=executor, flows=[make(False)]
    )
    [out] = other.recover()
    assert out.ok, out.error
    assert [o["item"] for o in out.output] == [5, 6, 7, 8]
    view = other.session(out.session_id)
    started = [e.path for e in view.events() if e.type == "node.started" and len(e.path) == 3]
    assert sorted(started) == sorted(
        [("a", i, "pid") for i in range(4)] + [("b", i, "pid") for i in range(4)]
    )  # each item's step ran once: the completed ForEach was not run again
    assert view.derive_state() == view.state


# -- several calls to one submission --------------------------------------------------------


class Inline(Executor):
    """An executor that tarry takes to run steps elsewhere (it is no thread pool), which runs
    each submission at once, here, and notes how many steps it carried. `fail`: the error the
    executor itself fails its first submission with (a broken pool), running nothing."""

    def __init__(self, workers: int | None = 2, fail: BaseException | None = None) -> None:
        if workers is not None:  # as a ProcessPoolExecutor says how many workers it has
            self._max_workers = workers
        self.carried: list[list[Any]] = []
        self.fail = fail

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        before = len(remote_steps.RAN)
        if self.fail is not None:
            future.set_exception(self.fail)
            self.fail = None
            self.carried.append([])
            return future
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        self.carried.append(remote_steps.RAN[before:])
        return future


@pytest.fixture
def ran() -> Iterator[list[Any]]:
    remote_steps.RAN.clear()
    yield remote_steps.RAN
    remote_steps.RAN.clear()


def test_calls_ready_together_share_submissions_and_come_back_to_their_lanes(
    ran: list[Any],
) -> None:
    pool = Inline(workers=2)
    rt = Runtime(executor=pool)
    items = list(range(100, 116))
    out = rt.run(Flow("chunks", [ForEach("fe", items, remote_steps.noted, concurrency=8)]))
    assert out.ok, out.error
    assert out.output == [{"item": x, "index": i, "attempt": 1} for i, x in enumerate(items)]
    assert sorted(ran) == items  # each step ran once
    # 8 lanes ready at once, 2 workers: 4 submissions of 2 (a worker's next one queued while
    # it runs one), not 8 of 1, nor one that holds back every result until the last.
    assert [len(c) for c in pool.carried] == [2] * 8
    consistent(rt, out.session_id)


def test_an_executor_that_does_not_say_how_many_workers_it_has_gets_one_call_each(
    ran: list[Any],
) -> None:
    pool = Inline(workers=None)  # a Dask cluster may have many more than this machine's CPUs
    rt = Runtime(executor=pool)
    items = list(range(12))
    out = rt.run(Flow("one", [ForEach("fe", items, remote_steps.noted, concurrency=8)]))
    assert out.ok, out.error
    assert [o["item"] for o in out.output] == items
    assert [len(c) for c in pool.carried] == [1] * 12


def test_a_call_that_fails_in_a_submission_fails_alone_and_is_retried_alone(
    ran: list[Any],
) -> None:
    pool = Inline(workers=1)
    retry = Retry(attempts=2, initial=0, jitter=False)
    rt = Runtime(executor=pool)
    items = list(range(1, 9))
    flow = Flow(
        "thirds",
        [ForEach("fe", items, step(remote_steps.flaky_thirds, retry=retry), concurrency=8)],
    )
    out = rt.run(flow)
    assert out.ok, out.error
    assert out.output == [x * 100 + (2 if x % 3 == 0 else 1) for x in items]
    assert max(len(c) for c in pool.carried) > 1  # the failing calls shared submissions
    assert sorted(ran) == sorted(items + [3, 6])
    events = rt.session(out.session_id).events()
    retried = sorted(e.path[1] for e in events if e.type == "node.retrying")
    assert retried == [2, 5]  # the positions of 3 and 6
    completed = [e.path for e in events if e.type == "node.completed" and len(e.path) == 3]
    assert len(completed) == len(set(completed)) == 8  # no step completed twice
    consistent(rt, out.session_id)


def test_a_submission_the_executor_fails_fails_each_of_its_calls_by_the_retry_policy(
    ran: list[Any],
) -> None:
    pool = Inline(workers=1, fail=BrokenExecutor("a worker died"))
    retry = Retry(attempts=2, initial=0, jitter=False)
    rt = Runtime(executor=pool)
    items = list(range(4))
    flow = Flow(
        "broken", [ForEach("fe", items, step(remote_steps.noted, retry=retry), concurrency=4)]
    )
    out = rt.run(flow)
    assert out.ok, out.error
    lost = 2  # 4 ready, 1 worker: 2 submissions of 2, the first of which the executor failed
    assert [o["attempt"] for o in out.output] == [2] * lost + [1] * (4 - lost)
    assert sorted(ran) == items  # what the broken submission carried ran on the retry only
    events = rt.session(out.session_id).events()
    failed = [e for e in events if e.type == "node.failed"]
    assert len(failed) == lost and all("a worker died" in str(e.data) for e in failed)
    # without a retry the run fails with the executor's error, typed as it raised it
    pool = Inline(workers=1, fail=BrokenExecutor("a worker died"))
    out = Runtime(executor=pool).run(
        Flow("b2", [ForEach("fe", items, remote_steps.noted, concurrency=4)])
    )
    assert out.failed and out.error.type == "BrokenExecutor"


def test_a_submission_the_executor_cancels_fails_each_of_its_calls(ran: list[Any]) -> None:
    class Cancelling(Inline):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            future: Future[Any] = Future()
            future.cancel()
            self.carried.append([])
            return future

    pool = Cancelling(workers=1)
    out = Runtime(executor=pool).run(
        Flow("cancel", [ForEach("fe", [1, 2, 3, 4], remote_steps.noted, concurrency=4)])
    )
    assert out.failed and out.error.type == "CancelledError"
    assert ran == []


def test_calls_sharing_a_submission_pause_and_resume_each_in_its_lane(tmp_path: Path) -> None:
    pool = Inline(workers=1)
    store = SQLiteStore(tmp_path / "s.db")
    flow = Flow("asks", [ForEach("fe", [1, 2, 3, 4], remote_steps.ask, concurrency=4)])
    rt = Runtime(store=store, executor=pool, flows=[flow])
    out = rt.run(flow)
    assert out.paused and sorted(p.payload["item"] for p in out.pauses) == [1, 2, 3, 4]
    assert [len(c) for c in pool.carried] == [0, 0]  # 2 submissions of 2 (ask notes nothing)
    by_item = {p.payload["item"]: p.token for p in out.pauses}
    for item in (3, 1, 4):
        assert rt.resume(by_item[item], f"a{item}").paused
    done = rt.resume(by_item[2], "a2")
    assert done.ok, done.error
    assert [(o["item"], o["answer"]) for o in done.output] == [(x, f"a{x}") for x in [1, 2, 3, 4]]
    consistent(rt, out.session_id)


def test_an_async_run_sends_the_calls_it_holds_before_it_waits(ran: list[Any]) -> None:
    import asyncio

    async def beside(ctx: Any) -> str:
        for _ in range(3):
            await asyncio.sleep(0)
        return "async"

    pool = Inline(workers=2)
    rt = Runtime(executor=pool)
    items = list(range(24))  # lanes start after the run went async, too
    flow = Flow(
        "mixed",
        [
            Parallel(
                "par",
                {
                    "a": step(beside, "beside"),
                    "b": ForEach("fe", items, remote_steps.noted, concurrency=8),
                },
            )
        ],
    )

    async def main() -> Any:
        return await asyncio.wait_for(rt.arun(flow), WAIT)

    out = asyncio.run(main())
    assert out.ok, out.error
    assert out.output["a"] == "async"
    assert [o["item"] for o in out.output["b"]] == items
    assert sorted(ran) == items and max(len(c) for c in pool.carried) == 2


def test_a_process_pool_runs_calls_several_to_a_submission_with_per_call_outcomes(
    ran: list[Any],
) -> None:
    class Counting(ProcessPoolExecutor):
        submitted = 0

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            self.submitted += 1
            return super().submit(fn, *args, **kwargs)

    retry = Retry(attempts=2, initial=0, jitter=False)
    items = list(range(1, 17))
    flow = Flow(
        "thirds",
        [ForEach("fe", items, step(remote_steps.flaky_thirds, retry=retry), concurrency=8)],
    )
    with Counting(2, mp_context=multiprocessing.get_context("forkserver")) as pool:
        rt = Runtime(executor=pool)
        out = rt.run(flow)
    assert out.ok, out.error
    assert out.output == [x * 100 + (2 if x % 3 == 0 else 1) for x in items]
    attempts = len(items) + len([x for x in items if x % 3 == 0])
    assert pool.submitted <= attempts - 4  # the first 8 went 2 to a submission
    events = rt.session(out.session_id).events()
    retried = sorted(e.path[1] for e in events if e.type == "node.retrying")
    assert retried == [i for i, x in enumerate(items) if x % 3 == 0]
    consistent(rt, out.session_id)


def test_a_crash_inside_a_shared_submission_reruns_only_what_did_not_complete(
    ran: list[Any], tmp_path: Path
) -> None:
    from tarry import ManualClock

    remote_steps.CRASHED.clear()
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "c.db")
    items = list(range(1, 9))
    flow = Flow("crash", [ForEach("fe", items, remote_steps.crash_once, concurrency=4)])
    pool = Inline(workers=1)  # submissions of 2
    rt = Runtime(store=store, durability="step", clock=clock, executor=pool)
    with pytest.raises(remote_steps.Crash):
        rt.run(flow)
    assert [sorted(c) for c in pool.carried] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    clock.advance(3600)
    other = Runtime(store=store, durability="step", clock=clock, executor=pool, flows=[flow])
    [sid] = [s.session_id for s in other.sessions()]
    recorded = {
        items[e.path[1]]
        for e in other.session(sid).events()
        if e.type == "node.completed" and len(e.path) == 3
    }
    assert recorded >= {1, 2, 3, 4}  # written before the lanes that crashed began
    [out] = other.recover()
    assert out.ok, out.error
    assert out.output == [x * 10 for x in items]
    # What completed is never run again; the crashed call, and the one that shared its
    # submission (run, but not recorded), run again.
    assert sorted(ran) == sorted(items + [x for x in items if x not in recorded])
    assert 7 not in recorded and 8 not in recorded
    view = other.session(out.session_id)
    completed = [e.path for e in view.events() if e.type == "node.completed" and len(e.path) == 3]
    assert sorted(completed) == [("fe", i, "crash_once") for i in range(8)]
    assert view.derive_state() == view.state
    remote_steps.CRASHED.clear()


# -- a Dask cluster ----------------------------------------------------------------------------


def test_a_dask_cluster_runs_steps_on_its_workers() -> None:
    distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed")
    try:
        cluster = distributed.LocalCluster(
            processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None
        )
    except Exception as exc:  # no sockets, no processes: nothing of tarry's to test
        pytest.skip(f"a local Dask cluster cannot start here: {exc!r}")
    with cluster, distributed.Client(cluster) as client:
        rt = Runtime(executor=client.get_executor())
        flow = Flow("dask", [ForEach("fe", [1, 2, 3, 4], remote_steps.pid, concurrency=4)])
        out = rt.run(flow)
        assert out.ok, out.error
        assert [o["item"] for o in out.output] == [1, 2, 3, 4]
        assert all(o["pid"] != os.getpid() for o in out.output)
        flow = Flow("dask_boom", [ForEach("fe", [1, 2], remote_steps.boom, concurrency=2)])
        out = rt.run(flow)
        assert out.failed and out.error.type == "ValueError" and "in boom" in out.error.traceback
        consistent(rt, out.session_id)
