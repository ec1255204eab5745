"""Bounds: a value an event carries and a waiting session's snapshot have configurable maximum
sizes; going over them is a clear, typed error that loses nothing."""

from __future__ import annotations

import pytest
from tarry import (
    Branch,
    Flow,
    Gate,
    InvalidArgument,
    NotSerializable,
    PayloadTooLarge,
    Runtime,
    SnapshotTooLarge,
    TarryError,
    Wait,
    step,
)

LIMIT = 1000


def gated() -> Flow:
    return Flow("gated", [lambda ctx: "before", Gate("approve", "ship it?"), lambda ctx: "after"])


def stored(rt: Runtime, sid: str) -> tuple:
    view = rt.session(sid)
    return (view.status, view.state, view.events(), rt.store.load(sid).token)


@pytest.fixture
def small() -> Runtime:
    return Runtime(max_value_bytes=LIMIT, max_snapshot_bytes=20 * LIMIT)


def test_errors_are_typed() -> None:
    assert issubclass(PayloadTooLarge, NotSerializable) and issubclass(PayloadTooLarge, TarryError)
    assert issubclass(SnapshotTooLarge, TarryError)


@pytest.mark.parametrize(
    "output",
    [
        pytest.param("x" * (LIMIT + 1), id="ascii text"),
        pytest.param("é" * (LIMIT // 2 + 1), id="text over the limit only once encoded"),
        pytest.param(b"\0" * (LIMIT + 1), id="bytes"),
        pytest.param(list(range(LIMIT)), id="a list"),
        pytest.param({"k": "v" * LIMIT}, id="a dict"),
    ],
)
def test_a_step_output_over_the_limit_fails_the_step_naming_it(small: Runtime, output) -> None:
    flow = Flow("big", [lambda ctx: "small", step(lambda ctx: output, name="huge")])
    out = small.run(flow)
    assert out.failed and out.error.type == "PayloadTooLarge"
    assert out.error.path == ("huge",)
    assert "huge" in out.error.message and str(LIMIT) in out.error.message
    assert out.token is not None  # a failed step can be retried with a repaired flow or skipped
    fixed = Flow("big", [lambda ctx: "small", step(lambda ctx: "fine", name="huge")])
    assert small.resume(out.token, flow=fixed, allow_changed=True).output == "fine"


@pytest.mark.parametrize("size", [LIMIT // 4, LIMIT - 8])
def test_values_within_the_limit_pass(small: Runtime, size: int) -> None:
    out = small.run(Flow("ok", [lambda ctx: "y" * size, lambda ctx: [ctx.prev[:size]]]))
    assert out.ok and out.output == ["y" * size]


def test_a_ctx_state_value_over_the_limit_fails_the_step(small: Runtime) -> None:
    def hoard(ctx):
        ctx.state["blob"] = "z" * (LIMIT * 2)
        return 1

    out = small.run(Flow("hoarder", [hoard]))
    assert out.failed and out.error.type == "PayloadTooLarge"


def test_a_pause_payload_over_the_limit_fails_the_run(small: Runtime) -> None:
    out = small.run(Flow("asks", [Wait("batch", payload={"prompts": ["p" * 100] * 20})]))
    assert out.failed and out.error.type == "PayloadTooLarge"


def test_an_input_over_the_limit_is_refused_before_anything_is_stored(small: Runtime) -> None:
    with pytest.raises(PayloadTooLarge) as info:
        small.run(gated(), {"data": "d" * LIMIT}, session_id="s1")
    assert info.value.size > LIMIT and info.value.limit == LIMIT
    assert small.sessions() == []


def test_a_resume_value_over_the_limit_is_refused_and_changes_nothing(small: Runtime) -> None:
    flow = Flow("waits", [Wait("answer"), lambda ctx: ctx.prev])
    out = small.run(flow)
    before = stored(small, out.session_id)
    with pytest.raises(PayloadTooLarge):
        small.resume(out.token, "a" * (LIMIT + 1))
    assert stored(small, out.session_id) == before
    assert small.resume(out.token, "fits").output == "fits"


def test_a_snapshot_over_the_limit_fails_at_the_pause_and_keeps_everything() -> None:
    rt = Runtime(max_value_bytes=LIMIT, max_snapshot_bytes=4 * LIMIT)
    parts = [step(lambda ctx: "p" * (LIMIT - 50), name=f"part{i}") for i in range(3)]
    # Inside a container, whose frame holds the outputs: a large top-level output would be
    # kept out of the state (test_out_of_line.py).
    flow = Flow("grows", [grow([*parts, Wait("look", payload="q" * (LIMIT - 50))])])
    out = rt.run(flow)
    assert out.failed and out.error.type == "SnapshotTooLarge"
    assert out.error.path == ("grow", "look") and not out.error.retryable
    assert "max_snapshot_bytes" in out.error.message
    view = rt.session(out.session_id)
    # Nothing is lost: every part's output and event is kept, and the state is the fold.
    assert sorted(view.state.container_stack[0].child_outputs) == [f"part{i}" for i in range(3)]
    assert [e.type for e in view.events()][-2:] == ["run.paused", "run.failed"]
    assert view.derive_state() == view.state
    assert rt.cancel(out.token).error.type == "cancelled"


def test_a_run_whose_state_would_outgrow_the_limit_fails_at_the_step_that_would_do_it() -> None:
    rt = Runtime(max_value_bytes=LIMIT, max_snapshot_bytes=4 * LIMIT)
    parts = [step(lambda ctx: "p" * (LIMIT - 50), name=f"part{i}") for i in range(6)]
    out = rt.run(Flow("grows", [grow(parts)]))
    assert out.failed and out.error.type == "SnapshotTooLarge" and out.token is not None
    assert out.error.path == ("grow", "part3") and "part3" in out.error.message
    frame = rt.session(out.session_id).state.container_stack[0]
    assert sorted(frame.child_outputs) == ["part0", "part1", "part2"]


def test_large_top_level_outputs_are_kept_out_of_the_state() -> None:
    rt = Runtime(max_value_bytes=LIMIT, max_snapshot_bytes=4 * LIMIT)
    parts = [step(lambda ctx: "p" * (LIMIT - 50), name=f"part{i}") for i in range(6)]
    out = rt.run(Flow("grows", [*parts, Gate("look")]))
    assert out.paused and len(out.pause.partial) == 6
    assert len(rt.store.load(out.session_id).state) < LIMIT


def grow(body: list) -> Branch:
    return Branch("grow", lambda ctx: True, body)


def test_the_same_flow_pauses_under_the_default_bounds() -> None:
    rt = Runtime()
    parts = [step(lambda ctx: "p" * (LIMIT - 50), name=f"part{i}") for i in range(6)]
    assert rt.run(Flow("grows", [*parts, Gate("look")])).paused


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_value_bytes": 0},
        {"max_value_bytes": -1},
        {"max_value_bytes": 1.5},
        {"max_value_bytes": True},
        {"max_snapshot_bytes": "1000"},
        {"max_snapshot_bytes": 2**40},  # more than a reader accepts
    ],
)
def test_bad_bounds_are_refused(kwargs) -> None:
    with pytest.raises(InvalidArgument):
        Runtime(**kwargs)
