"""Many things in flight: ForEach(concurrency=N), Parallel, many pauses per session, and
resume_many — through the public API, on every store."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import tarry
from support import WAIT
from tarry import (
    Flow,
    ForEach,
    Gate,
    InvalidFlow,
    InvalidResumeValue,
    Loop,
    ManualClock,
    Parallel,
    Retry,
    Runtime,
    Sleep,
    TokenAlreadyUsed,
    UnknownToken,
    Wait,
    step,
)
from tarry.engine.state.lanes import frames


def consistent(rt: Runtime, sid: str) -> None:
    view = rt.session(sid)
    assert view.derive_state() == view.state
    seqs = [e.seq for e in view.events()]
    assert seqs == list(range(1, len(seqs) + 1))


# -- running at once ----------------------------------------------------------------------------


def test_async_steps_of_in_flight_iterations_overlap(store: Any) -> None:
    n = 8
    arrived: list[int] = []

    async def call(ctx: Any) -> int:
        # Every iteration waits until all n are in flight: one at a time would never get here.
        arrived.append(ctx.index)
        deadline = time.monotonic() + WAIT
        while len(arrived) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert len(arrived) >= n, "the iterations did not run at once"
        await asyncio.sleep(0.001 * (n - ctx.index))  # finish in reverse order
        return ctx.item * 10

    flow = Flow("overlap", [ForEach("fe", list(range(n)), call, concurrency=n)])
    out = Runtime(store=store).run_sync(flow)
    assert out.ok, out.error
    assert out.output == [i * 10 for i in range(n)]  # item order, whatever the completion order


def test_sync_steps_run_on_a_pool_and_run_stays_sync(store: Any) -> None:
    barrier = threading.Barrier(4, timeout=WAIT)
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def work(ctx: Any) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running)
        barrier.wait()  # all four at once, or BrokenBarrierError
        with lock:
            running[0] -= 1
        return ctx.item + 1

    flow = Flow("pool", [ForEach("fe", list(range(8)), work, concurrency=4)])
    out = Runtime(store=store).run(flow)
    assert isinstance(out, tarry.Outcome)  # an all-sync flow: a plain Outcome
    assert out.ok, out.error
    assert out.output == list(range(1, 9))
    assert running[1] == 4  # four at once, never more than concurrency


def test_sync_calls_in_flight_when_the_run_turns_async_run_once() -> None:
    # Odd items' sync step returns at once and their async step follows, which turns the run
    # async while the even items' sync steps are still on the pool: those calls are awaited
    # as they are, never started again.
    calls: list[tuple[str, int]] = []
    release = threading.Event()

    def first(ctx: Any) -> int:
        calls.append(("first", ctx.item))
        if ctx.item % 2 == 0:
            assert release.wait(WAIT)
        return int(ctx.item)

    async def second(ctx: Any) -> int:
        calls.append(("second", ctx.item))
        release.set()
        await asyncio.sleep(0)
        return int(ctx.prev) * 10

    flow = Flow("mixed", [ForEach("fe", list(range(6)), [first, second], concurrency=4)])
    out = Runtime().run_sync(flow)
    assert out.ok, out.error
    assert out.output == [i * 10 for i in range(6)]
    assert sorted(calls) == sorted([(name, i) for name in ("first", "second") for i in range(6)])


def test_concurrency_one_is_the_sequential_foreach_event_for_event() -> None:
    def double(ctx: Any) -> int:
        return ctx.item * 2

    def run(foreach: ForEach) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
        rt = Runtime()
        out = rt.run(Flow("f", [foreach]))
        return [(e.type, e.path, e.data) for e in rt.session(out.session_id).events()]

    def triple(ctx: Any) -> int:
        return ctx.prev * 3

    plain = run(ForEach("fe", [1, 2, 3], [double, triple]))
    one = run(ForEach("fe", [1, 2, 3], [double, triple], concurrency=1))
    assert plain == one
    assert (
        Flow("f", [ForEach("fe", [1], double)]).fingerprint
        == Flow("f", [ForEach("fe", [1], double, concurrency=1)]).fingerprint
    )


def test_parallel_runs_named_branches_and_returns_a_dict_in_their_order(store: Any) -> None:
    async def slow(ctx: Any) -> str:
        await asyncio.sleep(0.02)
        return "slow"

    flow = Flow(
        "par",
        [
            lambda ctx: 5,
            Parallel("p", {"a": slow, "b": [lambda ctx: ctx.prev + 1, lambda ctx: ctx.prev * 2]}),
            lambda ctx: ctx.prev,
        ],
    )
    out = Runtime(store=store).run_sync(flow)
    assert out.ok, out.error
    assert out.output == {"a": "slow", "b": 12}
    assert list(out.output) == ["a", "b"]


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5, True])
def test_a_bad_concurrency_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(InvalidFlow, match="concurrency"):
        ForEach("fe", [1], lambda ctx: 1, concurrency=bad)
    with pytest.raises(InvalidFlow, match="concurrency"):
        Parallel("p", {"a": lambda ctx: 1}, concurrency=bad)


def test_parallel_refuses_bad_branches() -> None:
    with pytest.raises(InvalidFlow):
        Parallel("p", {})
    with pytest.raises(InvalidFlow):
        Parallel("p", [lambda ctx: 1])  # type: ignore[arg-type]


def test_a_sync_step_returning_an_awaitable_on_the_pool_fails_typed() -> None:
    async def inner() -> int:
        return 1

    def sneaky(ctx: Any) -> Any:
        return inner()

    out = Runtime().run(Flow("f", [ForEach("fe", [1, 2], sneaky, concurrency=2)]))
    assert out.failed
    assert out.error.type == "InvalidFlow" and "async def" in out.error.message


# -- many pauses ----------------------------------------------------------------------------------


def waits_flow(n: int = 5) -> Flow:
    return Flow(
        "waits",
        [
            ForEach(
                "fe",
                list(range(n)),
                [lambda ctx: ctx.item * 2, Wait("w"), lambda ctx: ctx.prev + 1],
                concurrency=None,
            )
        ],
    )


def test_every_waiting_branch_has_its_own_token(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(waits_flow())
    assert out.paused
    assert [p.path for p in out.pauses] == [("fe", i, "w") for i in range(5)]
    tokens = [p.token for p in out.pauses]
    assert len(set(tokens)) == 5 and all(tokens)
    assert out.token == tokens[0] and out.pause == out.pauses[0]
    consistent(rt, out.session_id)


def test_resuming_one_branch_leaves_the_other_tokens_valid(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(waits_flow())
    tokens = [p.token for p in out.pauses]
    again = rt.resume(tokens[2], 100)
    assert again.paused
    assert [p.path for p in again.pauses] == [("fe", i, "w") for i in (0, 1, 3, 4)]
    assert [p.token for p in again.pauses] == [t for i, t in enumerate(tokens) if i != 2]
    with pytest.raises(TokenAlreadyUsed):
        rt.resume(tokens[2], 1)
    consistent(rt, out.session_id)
    last = rt.resume_many({t: i for i, t in enumerate(tokens) if i != 2})
    assert len(last) == 1 and last[0].ok
    assert last[0].output == [1, 2, 101, 4, 5]
    consistent(rt, out.session_id)


def test_resume_many_spans_sessions_one_outcome_each_in_token_order(store: Any) -> None:
    rt = Runtime(store=store)
    a = rt.run(waits_flow(2))
    b = rt.run(waits_flow(3))
    values = {b.pauses[0].token: 1, a.pauses[1].token: 2, b.pauses[2].token: 3}
    outs = rt.resume_many(values)
    assert [o.session_id for o in outs] == [b.session_id, a.session_id]
    assert len(outs[0].pauses) == 1 and len(outs[1].pauses) == 1


def test_resume_many_with_a_bad_token_uses_none(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(waits_flow(3))
    before = rt.session(out.session_id).state
    good = {p.token: 1 for p in out.pauses}
    with pytest.raises(UnknownToken, match="tk_"):
        rt.resume_many({**good, "tk_nonesuch": 2})
    used = rt.resume(out.pauses[0].token, 0)
    with pytest.raises(TokenAlreadyUsed):
        rt.resume_many(good)  # one of them is used now: none of the others is
    after = rt.session(out.session_id)
    assert after.state.last_seq == used_seq(rt, out.session_id)
    rest = rt.resume_many({p.token: 1 for p in used.pauses})
    assert rest[0].ok
    assert before.status == "paused"


def used_seq(rt: Runtime, sid: str) -> int:
    return rt.session(sid).events()[-1].seq


def test_resume_many_with_a_refused_value_uses_none(store: Any) -> None:
    rt = Runtime(store=store)
    flow = Flow("gates", [ForEach("fe", [1, 2], Gate("ok"), concurrency=2)])
    out = rt.run(flow)
    before = rt.session(out.session_id).events()
    with pytest.raises(InvalidResumeValue):
        rt.resume_many({out.pauses[0].token: True, out.pauses[1].token: "yes"})
    assert rt.session(out.session_id).events() == before
    done = rt.resume_many({p.token: True for p in out.pauses})
    assert done[0].ok and done[0].output == [{"approved": True}, {"approved": True}]


def test_a_branch_that_waits_does_not_block_its_siblings() -> None:
    ran: list[int] = []

    def work(ctx: Any) -> int:
        ran.append(ctx.item)
        return ctx.item

    flow = Flow(
        "f",
        [
            Parallel(
                "p",
                {
                    "human": Gate("approve"),
                    "work": ForEach("fe", list(range(20)), work, concurrency=3),
                },
            )
        ],
    )
    rt = Runtime()
    out = rt.run(flow)
    assert out.paused and len(out.pauses) == 1
    assert sorted(ran) == list(range(20))  # all the work ran while the gate waited
    done = rt.resume(out.token, True)
    assert done.ok and done.output == {"human": {"approved": True}, "work": list(range(20))}
    assert sorted(ran) == list(range(20))  # and none of it again


def test_the_frame_holds_what_is_in_flight_or_waiting_never_what_completed() -> None:
    flow = Flow(
        "f",
        [ForEach("fe", list(range(300)), [lambda ctx: ctx.item, Wait("w")], concurrency=7)],
    )
    rt = Runtime()
    out = rt.run(flow)
    rounds = 0
    while out.paused:
        state = rt.session(out.session_id).state
        assert sum(1 for _ in frames(state.container_stack)) <= 1 + 7
        out = rt.resume_many({p.token: p.path[1] for p in out.pauses})[0]
        rounds += 1
    assert out.ok and out.output == list(range(300))
    assert rounds == 300 // 7 + 1


def test_nested_concurrent_and_sequential_containers_with_waits(store: Any) -> None:
    inner = ForEach(
        "inner", lambda ctx: [ctx.item * 10, ctx.item * 10 + 1], [Wait("w")], concurrency=None
    )
    flow = Flow(
        "nested",
        [
            ForEach(
                "outer",
                [1, 2, 3],
                [Loop("loop", [inner], until=lambda ctx: True, max_iterations=2)],
                concurrency=2,
            )
        ],
    )
    rt = Runtime(store=store)
    out = rt.run(flow)
    seen = 0
    while out.paused:
        consistent(rt, out.session_id)
        values = {p.token: [p.path[1], p.path[-2]] for p in out.pauses}
        seen += len(values)
        out = rt.resume_many(values)[0]
    assert out.ok, out.error
    assert seen == 6
    assert out.output == [[[i, 0], [i, 1]] for i in (0, 1, 2)]
    consistent(rt, out.session_id)


# -- control, failure, retries, timers ------------------------------------------------------------


def test_abort_stops_new_iterations_and_resume_continues_them(store: Any) -> None:
    rt = Runtime(store=store)
    started: list[int] = []
    gate = threading.Event()

    def work(ctx: Any) -> int:
        started.append(ctx.item)
        if ctx.item == 2:
            rt.abort(ctx.session_id)
        return ctx.item

    flow = Flow("ab", [ForEach("fe", list(range(10)), work, concurrency=2)])
    out = rt.run(flow)
    assert out.paused and out.pause.reason == "aborted"
    assert len(started) < 10
    gate.set()
    done = rt.resume(out.token)
    assert done.ok and done.output == list(range(10))
    assert sorted(started) == list(range(10))  # each ran once
    consistent(rt, out.session_id)


def test_a_failing_branch_fails_the_node_and_resume_goes_on_without_rerunning(store: Any) -> None:
    calls: dict[int, int] = {}
    broken = {"on": True}

    def work(ctx: Any) -> int:
        calls[ctx.item] = calls.get(ctx.item, 0) + 1
        if ctx.item == 3 and broken["on"]:
            raise RuntimeError("item 3 broke")
        return ctx.item

    flow = Flow("fail", [ForEach("fe", list(range(6)), [work], concurrency=3)])
    rt = Runtime(store=store)
    out = rt.run(flow)
    assert out.failed and out.error.path == ("fe", 3, "work")
    assert "item 3 broke" in out.error.message
    consistent(rt, out.session_id)
    broken["on"] = False
    done = rt.resume(out.token)
    assert done.ok and done.output == list(range(6))
    assert calls[3] == 2
    assert all(calls[i] == 1 for i in range(6) if i != 3)


def test_retries_count_per_branch(store: Any) -> None:
    attempts: dict[int, list[int]] = {}

    @step(retry=Retry(attempts=3, initial=0, jitter=False))
    def flaky(ctx: Any) -> int:
        attempts.setdefault(ctx.item, []).append(ctx.attempt)
        if ctx.attempt < 2 + ctx.item % 2:
            raise ValueError("again")
        return ctx.item

    flow = Flow("retry", [ForEach("fe", [0, 1, 2, 3], flaky, concurrency=4)])
    out = Runtime(store=store).run(flow)
    assert out.ok, out.error
    assert attempts == {0: [1, 2], 1: [1, 2, 3], 2: [1, 2], 3: [1, 2, 3]}


def test_an_interrupt_in_a_branch_pauses_that_branch(store: Any) -> None:
    def ask(ctx: Any) -> str:
        return f"{ctx.item}:{ctx.interrupt('name?')}"

    flow = Flow("ask", [ForEach("fe", ["a", "b"], ask, concurrency=2)])
    rt = Runtime(store=store)
    out = rt.run(flow)
    assert [p.path for p in out.pauses] == [("fe", 0, "ask"), ("fe", 1, "ask")]
    done = rt.resume_many({out.pauses[0].token: "x", out.pauses[1].token: "y"})[0]
    assert done.ok and done.output == ["a:x", "b:y"]


def test_sleeps_in_several_branches_each_fire_on_their_own(store: Any) -> None:
    clock = ManualClock()
    flow = Flow(
        "naps",
        [
            Parallel(
                "p",
                {
                    "short": [Sleep("nap", 10), lambda ctx: "short"],
                    "long": [Sleep("nap", 100), lambda ctx: "long"],
                    "gate": Gate("g"),
                },
            )
        ],
    )
    rt = Runtime(store=store, clock=clock)
    out = rt.run(flow)
    assert len(out.pauses) == 3
    clock.advance(11)
    fired = rt.resume_due()
    assert len(fired) == 1 and fired[0].paused and len(fired[0].pauses) == 2
    clock.advance(100)
    fired = rt.resume_due()
    assert len(fired) == 1 and len(fired[0].pauses) == 1 and fired[0].pause.kind == "human"
    done = rt.resume(fired[0].token, True)
    assert done.ok and done.output == {"short": "short", "long": "long", "gate": {"approved": True}}
    consistent(rt, out.session_id)


def test_aresume_many_is_awaitable() -> None:
    async def call(ctx: Any) -> int:
        await asyncio.sleep(0)
        return ctx.prev

    rt = Runtime()
    flow = Flow("a", [ForEach("fe", [1, 2], [Wait("w"), call], concurrency=2)])

    async def main() -> list[Any]:
        out = await rt.arun(flow)
        return await rt.aresume_many({p.token: i for i, p in enumerate(out.pauses)})

    outs = asyncio.run(main())
    assert outs[0].ok and outs[0].output == [0, 1]


class Crash(BaseException):
    """Stands for the process dying: nothing in tarry catches it."""


def test_step_durability_and_recover_inside_concurrent_iterations(store: Any) -> None:
    clock = ManualClock()
    ran: list[int] = []

    def make(crash: bool) -> Flow:
        def work(ctx: Any) -> int:
            ran.append(ctx.item)
            if crash and ctx.item == 12:
                raise Crash
            return ctx.item * 3

        return Flow("rec", [ForEach("fe", list(range(20)), [work], concurrency=3)])

    rt = Runtime(store=store, durability="step", clock=clock, lease=30)
    with pytest.raises(Crash):
        rt.run(make(True))
    sid = store.list(limit=1)[0].session_id
    stored = {e.path[1] for e in store.events(sid) if e.type == "node.completed"}
    other = Runtime(store=store, durability="step", clock=clock, lease=30, flows=[make(False)])
    clock.advance(31)
    [out] = other.recover()
    assert out.ok, out.error
    assert out.output == [i * 3 for i in range(20)]
    for item in range(20):
        assert ran.count(item) == (1 if item in stored else ran.count(item))
        assert ran.count(item) <= 2  # at most the steps in flight ran again
    consistent(other, sid)


def test_skip_a_failed_branch_and_go_on(store: Any) -> None:
    def work(ctx: Any) -> int:
        if ctx.item == 1:
            raise ValueError("no")
        return ctx.item

    rt = Runtime(store=store)
    out = rt.run(Flow("skip", [ForEach("fe", [0, 1, 2, 3], work, concurrency=2)]))
    assert out.failed and out.error.path == ("fe", 1, "work")
    done = rt.skip(out.token, -1)
    assert done.ok and done.output == [0, -1, 2, 3]
    consistent(rt, out.session_id)


def test_timeouts_of_waits_in_branches_fire_each_on_its_own(store: Any) -> None:
    clock = ManualClock()
    flow = Flow(
        "timeouts",
        [
            Parallel(
                "p",
                {
                    "soon": Wait("w", timeout=5, on_timeout="late"),
                    "later": Wait("w", timeout=50, on_timeout="later"),
                    "gate": Gate("g", timeout=500, on_timeout="approve"),
                },
            )
        ],
    )
    rt = Runtime(store=store, clock=clock)
    out = rt.run(flow)
    assert len(out.pauses) == 3
    clock.advance(6)
    [one] = rt.resume_due()
    # The branches that still wait: the outcome's own first (the one whose token the session
    # keeps), then the others in the order of the tree.
    assert one.paused and one.pauses[0] == one.pause and one.token == one.pause.token
    assert {p.path for p in one.pauses} == {("p", "later", "w"), ("p", "gate", "g")}
    clock.advance(1000)
    [done] = rt.resume_due()
    assert done.ok, done
    assert done.output == {
        "soon": "late",
        "later": "later",
        "gate": {"approved": True, "by": "timeout"},
    }
    consistent(rt, out.session_id)


def test_deliver_many_to_waiting_branches_writes_once_per_session(store: Any) -> None:
    flow = Flow(
        "keyed",
        [
            ForEach(
                "fe",
                list(range(20)),
                [Wait("w", key=lambda ctx: f"job-{ctx.item}"), lambda ctx: ctx.prev["n"] + 1],
                concurrency=None,
            )
        ],
    )
    rt = Runtime(store=store)
    out = rt.run(flow)
    assert len(out.pauses) == 20
    saves = []
    real = store.save

    def counting(*args: Any, **kwargs: Any) -> Any:
        saves.append(args[0].session_id)
        return real(*args, **kwargs)

    store.save = counting  # type: ignore[method-assign]
    try:
        outs = rt.deliver_many({f"job-{i}": {"n": i} for i in range(20)}).outcomes
    finally:
        store.save = real  # type: ignore[method-assign]
    assert len(outs) == 1 and outs[0].ok
    assert outs[0].output == [i + 1 for i in range(20)]
    assert saves == [out.session_id]  # one drive, one write
    consistent(rt, out.session_id)


class Reads:
    """A store that counts the calls to its methods that read one row each."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in ("get_value", "find_token"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


def test_resume_many_reads_tokens_and_the_items_of_resumed_branches_in_bulk(store: Any) -> None:
    reads = Reads(store)
    rt = Runtime(store=reads)
    n = 40
    flow = Flow("w", [ForEach("fe", [f"item{i}" for i in range(n)],
                              [Wait("r"), lambda ctx: (ctx.item, ctx.prev)],
                              concurrency=None)])  # fmt: skip
    out = rt.run(flow)
    some = {p.token: p.path[1] for p in out.pauses[:3]}
    [part] = rt.resume_many(some)  # a few of many: read one by one
    assert part.paused and len(part.pauses) == n - 3
    reads.calls.clear()
    [done] = rt.resume_many({p.token: p.path[1] for p in part.pauses})
    assert done.ok and done.output == [(f"item{i}", i) for i in range(n)]
    assert reads.calls == {}
    consistent(rt, out.session_id)
