"""Property tests of the resume invariants with concurrent containers and many pauses.

Random trees mixing `ForEach(concurrency=1..4 or None)`, `Parallel`, sequential ForEach, Loop,
Branch and nested Flows, with sync and async steps, Gates, Waits and `ctx.interrupt` in random places, and
aborts requested at random moments, are run and resumed in random orders: one token at a
time (`resume`) or random subsets of `out.pauses` at once (`resume_many`). At every pause and
at the end:

- the state equals the fold of the event log, and `seq` is gap-free;
- no step ran again after it had completed (calls counted by path);
- every token is single-use (a used one raises TokenAlreadyUsed), and the tokens of the waits
  left alone stay valid and unchanged;
- the container stack holds only what is in flight or waiting: each frame lies on the way to a
  wait (or under the abort that stopped it), and a concurrent frame has at most `concurrency`
  lanes;

and the output equals that of a reference run of the same flow with every container
sequential, resumed with the same values by path.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support import settle
from tarry import (
    Branch,
    Flow,
    ForEach,
    Gate,
    Loop,
    Parallel,
    Runtime,
    TokenAlreadyUsed,
    Wait,
    step,
)
from tarry.drivers.drive.statecache import StateCache
from tarry.engine.state.lanes import frames

_names = itertools.count()


def _name(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


# A flow is drawn as a description (nested tuples), then built twice: as drawn, and with every
# container sequential (the reference). Step names are the same in both, so are the outputs.


def leaves() -> st.SearchStrategy[tuple[Any, ...]]:
    return st.one_of(
        st.tuples(st.just("step"), st.booleans(), st.booleans()),  # (pauses, is_async)
        st.just(("gate",)),
        st.just(("wait",)),
    )


def descriptions(depth: int) -> st.SearchStrategy[tuple[Any, ...]]:
    """A leaf or container, its (unique) name last: steps start with "s", Gates with "g"."""
    if depth == 0:
        return leaves().map(lambda t: (*t, _name(t[0][0])))
    bodies = st.lists(descriptions(depth - 1), min_size=1, max_size=3)
    concurrency = st.sampled_from([1, 2, 3, 4, None])
    containers = st.one_of(
        st.tuples(st.just("foreach"), st.integers(0, 4), concurrency, bodies),
        st.tuples(st.just("parallel"), concurrency, st.lists(bodies, min_size=1, max_size=3)),
        st.tuples(st.just("loop"), st.integers(1, 2), bodies),
        st.tuples(st.just("branch"), st.booleans(), bodies, bodies),
        st.tuples(st.just("flow"), bodies),  # a Flow nested inline
    )
    named = containers.map(lambda t: (*t, _name(t[0][:2])))
    return st.one_of(descriptions(0), named, named)  # containers twice as likely as leaves


class Harness:
    """Builds flows from descriptions; counts step calls and completions by path, and requests
    aborts at chosen call numbers. Steps of concurrent lanes run on pool threads: a lock."""

    def __init__(self, abort_at: frozenset[int]) -> None:
        self.abort_at = abort_at
        self.lock = threading.Lock()
        self.calls = 0
        self.completed: list[tuple[Any, ...]] = []
        self.rt: Runtime | None = None
        #: The concurrency of each concurrent container, by path (of the real run).
        self.bounds: dict[tuple[Any, ...], int | None] = {}

    def build(self, desc: tuple[Any, ...], sequential: bool) -> Any:
        kind, name = desc[0], desc[-1]
        if kind == "step":
            return self.leaf(name, pauses=desc[1], is_async=desc[2])
        if kind == "gate":
            return Gate(name)
        if kind == "wait":
            return Wait(name)
        if kind == "foreach":
            _, n, concurrency, body, _ = desc
            return ForEach(
                name,
                list(range(n)),
                [self.build(d, sequential) for d in body],
                concurrency=1 if sequential else concurrency,
            )
        if kind == "parallel":
            _, concurrency, branches, _ = desc
            return Parallel(
                name,
                {f"b{i}": [self.build(d, sequential) for d in b] for i, b in enumerate(branches)},
                concurrency=1 if sequential else concurrency,
            )
        if kind == "loop":
            _, n, body, _ = desc
            return Loop(
                name,
                [self.build(d, sequential) for d in body],
                until=lambda ctx, n=n: ctx.iteration + 1 >= n,
                max_iterations=3,
            )
        if kind == "flow":
            return Flow(name, [self.build(d, sequential) for d in desc[1]])
        _, taken, then, otherwise, _ = desc
        return Branch(
            name,
            when=lambda ctx, b=taken: b,
            then=[self.build(d, sequential) for d in then],
            otherwise=[self.build(d, sequential) for d in otherwise],
        )

    def leaf(self, name: str, *, pauses: bool, is_async: bool) -> Any:
        def body(ctx: Any) -> list[Any]:
            with self.lock:
                self.calls += 1
                abort = self.rt is not None and self.calls in self.abort_at
            if abort:
                self.rt.abort(ctx.session_id)  # type: ignore[union-attr]
            value = [name, ctx.index, ctx.iteration]
            if pauses:
                value.append(ctx.interrupt("ok?"))
            with self.lock:
                self.completed.append(ctx.path)
            return value

        if is_async:

            async def fn(ctx: Any) -> list[Any]:
                await asyncio.sleep(0)
                return body(ctx)

        else:

            def fn(ctx: Any) -> list[Any]:
                return body(ctx)

        return step(fn, name)


def value_for(pause: Any) -> Any:
    """The resume value of a wait, by its path: the same in the real and the reference run."""
    if pause.reason == "aborted":
        return None
    if pause.path[-1].startswith("g"):  # a Gate
        return True
    return "/".join(map(str, pause.path))


def flow_of(h: Harness, name: str, body: list[tuple[Any, ...]], sequential: bool) -> Flow:
    names = [d[-1] for d in body]

    def gather(ctx: Any) -> dict[str, Any]:
        return {n: ctx.outputs[n] for n in names}

    return Flow(name, [*(h.build(d, sequential) for d in body), step(gather, "gather")])


def concurrency_by_path(body: list[tuple[Any, ...]]) -> dict[str, int | None]:
    """The concurrency of each concurrent container, by name (names are unique)."""
    found: dict[str, int | None] = {}

    def walk(desc: tuple[Any, ...]) -> None:
        kind = desc[0]
        if kind == "foreach":
            if desc[2] != 1:
                found[desc[-1]] = desc[2]
            for d in desc[3]:
                walk(d)
        elif kind == "parallel":
            found[desc[-1]] = desc[1]
            for b in desc[2]:
                for d in b:
                    walk(d)
        elif kind == "loop":
            for d in desc[2]:
                walk(d)
        elif kind == "branch":
            for d in (*desc[2], *desc[3]):
                walk(d)
        elif kind == "flow":
            for d in desc[1]:
                walk(d)

    for d in body:
        walk(d)
    return found


def prefix(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return b[: len(a)] == a


def check_invariants(rt: Runtime, sid: str, h: Harness, bounds: dict[str, int | None]) -> None:
    view = rt.session(sid)
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    state = view.state
    assert view.derive_state() == state
    assert len(h.completed) == len(set(h.completed)), "a step ran again after it completed"
    completed = [e.path for e in events if e.type == "node.completed"]
    assert len(completed) == len(set(completed)), "an element completed twice"
    if state.status != "paused":
        assert state.container_stack == ()
        return
    waits = [p.path for p in view.outcome.pauses]
    aborted = state.pause is not None and state.pause.reason == "aborted"
    for frame in frames(state.container_stack):
        # On the way to a wait, or under the container an abort stopped.
        assert any(prefix(frame.path, w) or (aborted and prefix(w, frame.path)) for w in waits), (
            frame.path,
            waits,
        )
        if frame.lanes is not None:
            limit = bounds[frame.node]
            assert limit is None or len(frame.lanes) <= limit, (frame.path, len(frame.lanes))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Harness, list[tuple[Any, ...]]]:
    h = Harness(draw(st.frozensets(st.integers(1, 40), max_size=3)))
    body = draw(st.lists(descriptions(2), min_size=1, max_size=3))
    return h, body


def reference_output(h: Harness, body: list[tuple[Any, ...]]) -> Any:
    rt = Runtime()
    rt._core.states = StateCache(max_snapshot=0)  # keeps nothing: every resume decodes
    out = settle(rt.run(flow_of(h, _name("ref"), body, sequential=True)))
    while out.paused:
        assert len(out.pauses) == 1  # a sequential flow waits in one place at a time
        out = settle(rt.resume(out.token, value_for(out.pause)))
    assert out.ok, out.error
    return out.output


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans(), st.sampled_from(["pause", "step"]), st.data())
def test_concurrent_containers_keep_the_resume_invariants(
    scenario: tuple[Harness, list[tuple[Any, ...]]],
    decode: bool,
    durability: str,
    data: st.DataObject,
) -> None:
    h, body = scenario
    expected = reference_output(h, body)
    h.completed = []
    h.calls = 0
    bounds = concurrency_by_path(body)

    rt = Runtime(durability=durability)
    if decode:
        rt._core.states = StateCache(max_snapshot=0)
    h.rt = rt
    out = settle(rt.run(flow_of(h, _name("flow"), body, sequential=False)))
    sid = out.session_id
    used: list[str] = []
    rounds = 0
    while out.paused:
        check_invariants(rt, sid, h, bounds)
        live = [p for p in out.pauses if p.token is not None]
        event(f"pauses {min(len(out.pauses), 5)}")
        event(f"reason {out.pause.reason}")
        assert live and out.token == out.pauses[0].token
        chosen = data.draw(
            st.lists(st.sampled_from(live), min_size=1, max_size=len(live), unique_by=id)
        )
        if len(chosen) == 1 and data.draw(st.booleans()):
            [pause] = chosen
            after = settle(rt.resume(pause.token, value_for(pause)))
        else:
            [after] = settle(rt.resume_many({p.token: value_for(p) for p in chosen}))
        event(f"chosen {min(len(chosen), 4)}")
        used += [p.token for p in chosen]
        # The waits left alone keep their tokens.
        kept = {p.path: p.token for p in live if p not in chosen}
        if after.paused and after.pause.reason != "aborted":
            now = {p.path: p.token for p in after.pauses}
            for path, token in kept.items():
                assert now.get(path) == token, (path, token, now.get(path))
        token = data.draw(st.sampled_from(used))
        with pytest.raises(TokenAlreadyUsed):
            rt.resume(token, None)
        out = after
        rounds += 1
        assert rounds < 500
    h.rt = None
    assert out.ok, out.error
    check_invariants(rt, sid, h, bounds)
    assert out.output == expected
