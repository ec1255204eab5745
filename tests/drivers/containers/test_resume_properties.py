"""Property tests of the resume invariants over random flows.

For random trees of ForEach / Loop / Branch / Graph / nested Flow / Gate / interrupting steps / steps that
fail and are retried (in place, or after a back-off that pauses the session until
`resume_due`), with aborts requested at random moments, every pause and the end satisfy: the state equals the fold of
the event log, seq is gap-free, no element completes twice, and the output equals that of the
same flow run without interruptions.

Steps return lists (mutable: every resume decodes the snapshot) or tuples (the Runtime keeps the
state it wrote and resumes from it undecoded); the reference run always decodes.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tarry import (
    Branch,
    Flow,
    ForEach,
    Gate,
    Graph,
    Loop,
    ManualClock,
    Retry,
    Route,
    Runtime,
    step,
)
from tarry.drivers.drive.statecache import StateCache

_names = itertools.count()


def _name(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


class Harness:
    """Counts step executions and requests aborts at chosen execution numbers."""

    def __init__(self, abort_at: frozenset[int], tuples: bool = False, big: bool = False) -> None:
        self.abort_at = abort_at
        self.tuples = tuples  # steps return tuples instead of lists
        # Steps return values over bounds.INLINE and the flow gets a large input: the state
        # refers to those of top-level steps (and to the input), kept out of line.
        self.big = big
        self.executions = 0
        self.rt: Runtime | None = None
        self.failures: dict[tuple[str, tuple[object, ...]], int] = {}

    def leaf(self, pauses: bool) -> Any:
        name = _name("s")

        def fn(ctx):
            self.executions += 1
            if self.rt is not None and self.executions in self.abort_at:
                self.rt.abort(ctx.session_id)
            value = [name, ctx.index, ctx.iteration]
            if self.big:
                value.append(len(ctx.input) * "p")
            if pauses:
                value.append(ctx.interrupt("ok?"))
            return tuple(value) if self.tuples else value

        return step(fn, name)

    def flaky(self, fails: int, durable: bool) -> Any:
        """A step that fails its first `fails` attempts at each position of each session."""
        name = _name("f")

        def fn(ctx):
            key = (ctx.session_id, ctx.path)
            seen = self.failures.get(key, 0)
            if seen < fails:
                self.failures[key] = seen + 1
                raise ConnectionError(f"{name} attempt {ctx.attempt}")
            value = [name, ctx.attempt, ctx.index]
            return tuple(value) if self.tuples else value

        initial = 600.0 if durable else 0.0
        policy = Retry(attempts=fails + 1, initial=initial, jitter=False, durable_after=60)
        return step(fn, name, retry=policy)


def elements(h: Harness, depth: int) -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.booleans().map(lambda p: h.leaf(p)),
        st.just(None).map(lambda _: Gate(_name("g"))),
        st.tuples(st.integers(1, 2), st.booleans()).map(lambda t: h.flaky(*t)),
    )
    if depth == 0:
        return leaves
    bodies = st.lists(elements(h, depth - 1), min_size=1, max_size=3)
    return st.one_of(
        leaves,
        st.tuples(st.integers(0, 3), bodies).map(
            lambda t: ForEach(_name("fe"), list(range(t[0])), t[1])
        ),
        st.tuples(st.integers(1, 3), bodies).map(
            lambda t: Loop(
                _name("lp"),
                t[1],
                until=lambda ctx, n=t[0]: ctx.iteration + 1 >= n,
                max_iterations=5,
            )
        ),
        st.tuples(st.booleans(), bodies, bodies).map(
            lambda t: Branch(_name("br"), when=lambda ctx, b=t[0]: b, then=t[1], otherwise=t[2])
        ),
        st.tuples(elements(h, depth - 1), elements(h, depth - 1)).map(lambda t: _graph(t[0], t[1])),
        bodies.map(lambda body: Flow(_name("fl"), body)),  # a Flow nested inline
    )


def _graph(first: Any, second: Any) -> Graph:
    router = step(lambda ctx: Route("next", ctx.prev), _name("r"))
    return Graph(
        _name("gr"),
        [router, first, second],
        start=router.name,
        routes={router.name: {"next": first.name}, first.name: {"default": second.name}},
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Harness, Flow]:
    h = Harness(
        draw(st.frozensets(st.integers(1, 40), max_size=4)),
        draw(st.booleans()),
        draw(st.booleans()),
    )
    body = draw(st.lists(elements(h, 2), min_size=1, max_size=3))
    return h, Flow(_name("flow"), body)


def check_invariants(rt: Runtime, sid: str) -> None:
    view = rt.session(sid)
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert view.derive_state() == view.state
    completed = [e.path for e in events if e.type == "node.completed"]
    assert len(completed) == len(set(completed)), "an element completed twice"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_state_is_the_fold_of_events_at_every_pause_and_the_end(scenario) -> None:
    h, flow = scenario
    reference_rt = Runtime()
    reference_rt._core.states = StateCache(max_snapshot=0)  # keeps nothing: every resume decodes
    data = "i" * (400 if h.big else 4)
    reference = reference_rt.run(flow, input=data)
    while reference.paused:
        reference = reference_rt.resume(reference.token, True)

    clock = ManualClock()
    rt = Runtime(clock=clock)
    h.rt, h.executions = rt, 0
    out = rt.run(flow, input=data)
    rounds = 0
    while out.paused:
        check_invariants(rt, out.session_id)
        if out.pause.reason == "retry":  # a back-off: its timer resumes it
            assert rt.resume_due() == []
            clock.advance(3600)
            [out] = rt.resume_due()
        else:
            out = rt.resume(out.token, True)
        rounds += 1
        assert rounds < 500
    h.rt = None
    assert out.ok, out.error
    check_invariants(rt, out.session_id)
    assert out.output == reference.output
