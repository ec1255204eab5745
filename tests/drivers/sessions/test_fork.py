"""`Runtime.fork`: a new session from the fold of an existing one's events up to a point, run
from there — on every store kind (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from tarry import (
    Flow,
    FlowMismatch,
    ForEach,
    Gate,
    InvalidArgument,
    Loop,
    ManualClock,
    Runtime,
    SessionExists,
    UnknownSession,
    Wait,
    step,
)

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    RUNS.clear()


def counted(name: str) -> Any:
    @step(name=name)
    def run(ctx: Any) -> int:
        RUNS[name] += 1
        return (ctx.prev if isinstance(ctx.prev, int) else 0) + 1

    return run


def chain() -> Flow:
    return Flow("chain", [counted("a"), counted("b"), counted("c"), counted("d")])


def seq_of(rt: Runtime, sid: str, type_: str, path: tuple[Any, ...]) -> int:
    """The seq of the first event of `type_` at `path` in the session's log."""
    return next(e.seq for e in rt.session(sid).events() if e.type == type_ and e.path == path)


def snapshot(rt: Runtime, sid: str) -> tuple[Any, ...]:
    """What must not change in the original: its status, state and events."""
    view = rt.session(sid)
    return view.status, view.state, view.events(), view.meta


def count_sessions(rt: Runtime) -> int:
    return len(rt.sessions(limit=1000))


# -- a chain ------------------------------------------------------------------------------------


def test_fork_mid_chain_runs_only_the_later_steps(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(chain(), session_id="orig")
    assert out.ok and out.output == 4
    before = snapshot(rt, "orig")
    RUNS.clear()
    at = seq_of(rt, "orig", "node.completed", ("b",))
    forked = rt.fork("orig", at_seq=at, session_id="copy")
    assert forked.ok and forked.output == 4 and forked.session_id == "copy"
    assert Counter({"c": 1, "d": 1}) == RUNS
    view = rt.session("copy")
    assert view.forked_from == {"session_id": "orig", "seq": at}
    assert view.meta["forked_from"] == {"session_id": "orig", "seq": at}
    events = view.events()
    assert events[0].type == "run.started"
    assert events[0].data["forked_from"] == {"session_id": "orig", "seq": at}
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[at].type == "run.resumed" and events[at].data["forked_from"]["seq"] == at
    assert view.derive_state() == view.state
    assert view.state.outputs == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert snapshot(rt, "orig") == before
    assert rt.session("orig").forked_from is None


def test_fork_at_a_path_is_just_before_it_first_started(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(chain(), session_id="orig")
    RUNS.clear()
    forked = rt.fork("orig", at=("c",))
    assert forked.ok and forked.output == 4
    assert Counter({"c": 1, "d": 1}) == RUNS
    started = seq_of(rt, "orig", "node.started", ("c",))
    assert rt.session(forked.session_id).forked_from == {"session_id": "orig", "seq": started - 1}
    assert forked.session_id != "orig" and len(forked.session_id) >= 16  # generated


def test_fork_with_a_step_in_flight_runs_it_again(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(chain(), session_id="orig")
    RUNS.clear()
    at = seq_of(rt, "orig", "node.started", ("c",))  # c started, not completed
    assert rt.fork("orig", at_seq=at).output == 4
    assert Counter({"c": 1, "d": 1}) == RUNS


def test_fork_at_the_end_of_a_completed_session_runs_nothing(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(chain(), session_id="orig")
    RUNS.clear()
    last = rt.session("orig").events()[-1].seq
    out = rt.fork("orig", at_seq=last, session_id="copy")
    assert out.ok and out.output == 4 and not RUNS
    view = rt.session("copy")
    assert view.status == "completed" and view.derive_state() == view.state


def test_fork_of_a_paused_session_pauses_again_with_a_new_token(store: Any) -> None:
    flow = Flow("gated", [counted("a"), Gate("ok"), counted("b")])
    rt = Runtime(store=store)
    out = rt.run(flow, session_id="orig")
    assert out.paused
    RUNS.clear()
    last = rt.session("orig").events()[-1].seq
    forked = rt.fork("orig", at_seq=last, session_id="copy")
    assert forked.paused and forked.pause.path == ("ok",) and forked.token != out.token
    assert not RUNS
    done = rt.resume(forked.token, True)
    assert done.ok and done.output == 1 and Counter({"b": 1}) == RUNS
    # The original's token is its own, still valid.
    assert rt.session("orig").status == "paused"
    assert rt.resume(out.token, True).ok


def test_fork_of_a_failed_session_runs_the_failed_step_again(store: Any) -> None:
    state = {"fail": True}

    @step(name="flaky")
    def flaky(ctx: Any) -> str:
        RUNS["flaky"] += 1
        if state["fail"]:
            raise RuntimeError("down")
        return "up"

    flow = Flow("flaky", [counted("a"), flaky])
    rt = Runtime(store=store)
    out = rt.run(flow, session_id="orig")
    assert out.failed
    state["fail"] = False
    RUNS.clear()
    last = rt.session("orig").events()[-1].seq
    forked = rt.fork("orig", at_seq=last)
    assert forked.ok and forked.output == "up" and Counter({"flaky": 1}) == RUNS
    assert rt.session("orig").status == "failed"


# -- containers -----------------------------------------------------------------------------------


def gated_foreach() -> Flow:
    @step(name="work")
    def work(ctx: Any) -> int:
        RUNS[f"work{ctx.item}"] += 1
        return ctx.item * 10

    return Flow(
        "tickets",
        [ForEach("items", [1, 2, 3], [work, Gate("ok")]), counted("after")],
    )


def test_fork_inside_a_foreach_mid_iteration(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(gated_foreach(), session_id="orig")
    out = rt.resume(out.token, True)  # item 1 approved; item 2 waits
    assert out.paused and out.pause.path == ("items", 1, "ok")
    out = rt.resume(out.token, True)
    out = rt.resume(out.token, True)
    assert out.ok
    before = snapshot(rt, "orig")
    RUNS.clear()
    # After item 2's work completed, before its Gate was entered.
    at = seq_of(rt, "orig", "node.completed", ("items", 1, "work"))
    forked = rt.fork("orig", at_seq=at, session_id="copy")
    assert forked.paused and forked.pause.path == ("items", 1, "ok")
    assert not RUNS
    forked = rt.resume(forked.token, {"approved": False})
    forked = rt.resume(forked.token, True)
    assert forked.ok
    assert Counter({"work3": 1, "after": 1}) == RUNS
    view = rt.session("copy")
    assert view.state.outputs["items"] == [
        {"approved": True},
        {"approved": False},
        {"approved": True},
    ]
    assert view.derive_state() == view.state
    assert snapshot(rt, "orig") == before


def test_fork_of_a_paused_foreach_copies_its_values(store: Any) -> None:
    """The original waits in the ForEach (its items and results are stored values, not all in
    its events): the fork finds them."""
    rt = Runtime(store=store)
    out = rt.run(gated_foreach(), session_id="orig")
    out = rt.resume(out.token, True)
    assert out.paused and out.pause.path == ("items", 1, "ok")
    RUNS.clear()
    last = rt.session("orig").events()[-1].seq
    forked = rt.fork("orig", at_seq=last)
    assert forked.paused and forked.pause.path == ("items", 1, "ok")
    forked = rt.resume(forked.token, True)
    forked = rt.resume(forked.token, True)
    assert forked.ok and Counter({"work3": 1, "after": 1}) == RUNS
    assert rt.session(forked.session_id).state.outputs["items"] == [{"approved": True}] * 3
    assert rt.session("orig").status == "paused"


def test_fork_inside_a_loop_mid_iteration(store: Any) -> None:
    @step(name="bump")
    def bump(ctx: Any) -> None:
        RUNS["bump"] += 1
        ctx.state["n"] = ctx.state.get("n", 0) + 1

    @step(name="check")
    def check(ctx: Any) -> int:
        RUNS["check"] += 1
        return ctx.state["n"]

    flow = Flow(
        "looping",
        [Loop("again", [bump, check], until=lambda ctx: ctx.state["n"] >= 3, max_iterations=5)],
    )
    rt = Runtime(store=store)
    assert rt.run(flow, session_id="orig").output == 3
    RUNS.clear()
    # The second iteration's bump completed, its check not started.
    bumps = [
        e.seq
        for e in rt.session("orig").events()
        if e.type == "node.completed" and e.path[-1] == "bump"
    ]
    forked = rt.fork("orig", at_seq=bumps[1])
    assert forked.ok and forked.output == 3
    assert Counter({"check": 2, "bump": 1}) == RUNS
    view = rt.session(forked.session_id)
    assert view.state.shared == {"n": 3} and view.derive_state() == view.state


def test_fork_of_concurrent_waits_gives_each_a_new_token(store: Any) -> None:
    @step(name="pre")
    def pre(ctx: Any) -> int:
        RUNS[f"pre{ctx.item}"] += 1
        return ctx.item

    flow = Flow(
        "fanout",
        [
            ForEach(
                "xs",
                [1, 2, 3, 4],
                [pre, Wait("w", key=lambda ctx: f"fo-{ctx.item}")],
                concurrency=2,
            )
        ],
    )
    rt = Runtime(store=store)
    out = rt.run(flow, session_id="orig")
    assert len(out.pauses) == 2
    rt.deliver("fo-1", 100)  # item 1 done; item 3 starts and waits
    assert rt.session("orig").status == "paused"
    before = snapshot(rt, "orig")
    original_tokens = {p.path: p.token for p in rt.session("orig").outcome.pauses}
    RUNS.clear()
    last = rt.session("orig").events()[-1].seq
    forked = rt.fork("orig", at_seq=last, session_id="copy")
    assert forked.paused and not RUNS
    assert [p.path for p in forked.pauses] == [("xs", 1, "w"), ("xs", 2, "w")]
    assert not {p.token for p in forked.pauses} & set(original_tokens.values())
    tokens = {p.path: p.token for p in forked.pauses}
    forked = rt.resume(tokens[("xs", 1, "w")], 2)
    forked = rt.resume(tokens[("xs", 2, "w")], 3)
    assert forked.paused and forked.pause.path == ("xs", 3, "w")
    forked = rt.resume(forked.token, 4)
    assert forked.ok and forked.output == [100, 2, 3, 4]
    assert Counter({"pre4": 1}) == RUNS
    view = rt.session("copy")
    assert view.derive_state() == view.state
    assert snapshot(rt, "orig") == before


def test_fork_with_async_steps_is_awaitable(store: Any) -> None:
    @step(name="slow")
    async def slow(ctx: Any) -> int:
        RUNS["slow"] += 1
        return (ctx.prev or 0) + 1

    flow = Flow("async_chain", [counted("a"), slow, counted("b")])
    rt = Runtime(store=store)
    assert asyncio.run(rt.arun(flow, session_id="orig")).output == 3
    RUNS.clear()
    result = rt.fork("orig", at=("slow",))
    assert asyncio.iscoroutine(result) or hasattr(result, "__await__")

    async def wait() -> Any:
        return await result  # type: ignore[misc]

    assert asyncio.run(wait()).output == 3
    assert Counter({"slow": 1, "b": 1}) == RUNS


def test_fork_with_a_changed_flow(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(chain(), session_id="orig")
    RUNS.clear()
    fixed = Flow("chain", [counted("a"), counted("b"), counted("c"), counted("e")])
    out = rt.fork("orig", at=("c",), flow=fixed, session_id="copy")
    assert out.ok and Counter({"c": 1, "e": 1}) == RUNS
    assert rt.session("copy").fingerprint == fixed.fingerprint
    other = Flow("other", [counted("a")])
    with pytest.raises(FlowMismatch):
        rt.fork("orig", at=("c",), flow=other)


# -- refused ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"at_seq": 3, "at": ("b",)},
        {"at_seq": 0},
        {"at_seq": -1},
        {"at_seq": True},
        {"at_seq": "3"},
        {"at_seq": 99},
        {"at": ("nope",)},
        {"at": ()},
        {"at": "b"},
        {"at": ("b", 1.5)},
        {"at_seq": 3, "session_id": ""},
        {"at_seq": 3, "session_id": 7},
        {"at_seq": 3, "meta": "x"},
    ],
)
def test_bad_input_raises_and_writes_nothing(store: Any, kwargs: dict[str, Any]) -> None:
    rt = Runtime(store=store)
    rt.run(chain(), session_id="orig")
    before = snapshot(rt, "orig")
    with pytest.raises(InvalidArgument):
        rt.fork("orig", **kwargs)
    assert count_sessions(rt) == 1
    assert snapshot(rt, "orig") == before


def test_unknown_session(store: Any) -> None:
    rt = Runtime(store=store)
    with pytest.raises(UnknownSession):
        rt.fork("missing", at_seq=1)
    assert count_sessions(rt) == 0


def test_taken_id_raises_session_exists(store: Any) -> None:
    rt = Runtime(store=store)
    rt.run(chain(), session_id="orig")
    rt.run(chain(), session_id="taken")
    before = snapshot(rt, "taken")
    RUNS.clear()
    with pytest.raises(SessionExists):
        rt.fork("orig", at_seq=3, session_id="taken")
    assert snapshot(rt, "taken") == before and not RUNS


def test_a_pruned_session_cannot_be_forked(store: Any) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)
    rt.run(chain(), session_id="orig")
    clock.advance(3600)
    assert rt.prune(older_than=timedelta(minutes=1)) == 1
    with pytest.raises(UnknownSession):
        rt.fork("orig", at_seq=3)
    assert count_sessions(rt) == 0


# -- more points ------------------------------------------------------------------------------


def test_fork_right_after_a_resume_keeps_its_value(store: Any) -> None:
    flow = Flow("waiting", [counted("a"), Wait("w"), counted("b")])
    rt = Runtime(store=store)
    out = rt.run(flow, session_id="orig")
    rt.resume(out.token, 41)
    RUNS.clear()
    at = seq_of(rt, "orig", "run.resumed", ("w",))
    forked = rt.fork("orig", at_seq=at)
    assert forked.ok and Counter({"b": 1}) == RUNS
    assert rt.session(forked.session_id).state.outputs["w"] == 41


def test_fork_of_a_cancelled_session_goes_on(store: Any) -> None:
    flow = Flow("gated", [counted("a"), Gate("ok"), counted("b")])
    rt = Runtime(store=store)
    out = rt.run(flow, session_id="orig")
    rt.cancel("orig")
    last = rt.session("orig").events()[-1]
    assert last.type == "run.cancelled"
    forked = rt.fork("orig", at_seq=last.seq)
    assert forked.paused and forked.pause.path == ("ok",) and forked.meta["trigger"] == "fork"
    assert rt.session("orig").status == "cancelled"
    assert out.token != forked.token


def test_fork_at_a_parallel_branch_and_a_large_input(store: Any) -> None:
    from tarry import Parallel

    big = {"text": "x" * 200_000}
    flow = Flow(
        "both",
        [
            Parallel("p", {"left": counted("l"), "right": counted("r")}, concurrency=1),
            counted("after"),
        ],
    )
    rt = Runtime(store=store, durability="step")
    rt.run(flow, big, session_id="orig")
    RUNS.clear()
    forked = rt.fork("orig", at=("p", "right"))
    assert forked.ok and Counter({"r": 1, "after": 1}) == RUNS
    view = rt.session(forked.session_id)
    assert view.state.input == big and view.durability == "step"
    assert view.state.outputs["p"] == {"left": 1, "right": 1}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_fork_mid_foreach_of_a_session_that_never_stored_its_values(
    store: Any, concurrency: int
) -> None:
    """A run that completed without a pause never wrote its ForEach's items and results to
    the store: the fork takes them from the original's events."""

    @step(name="sq")
    def sq(ctx: Any) -> int:
        RUNS[f"sq{ctx.item}"] += 1
        return ctx.item * ctx.item

    flow = Flow("squares", [ForEach("xs", lambda ctx: list(range(6)), sq, concurrency=concurrency)])
    rt = Runtime(store=store)
    assert rt.run(flow, session_id="orig").output == [0, 1, 4, 9, 16, 25]
    RUNS.clear()
    at = next(
        e.seq
        for e in rt.session("orig").events()
        if e.type == "container.iteration_completed" and e.data["index"] == 2
    )
    forked = rt.fork("orig", at_seq=at)
    assert forked.ok and forked.output == [0, 1, 4, 9, 16, 25]
    done = {e.data["index"] for e in rt.session("orig").events()[:at]
            if e.type == "container.iteration_completed"}  # fmt: skip
    assert set(RUNS) == {f"sq{i}" for i in range(6) if i not in done}
    assert all(n == 1 for n in RUNS.values())
