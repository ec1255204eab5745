"""Bad input gets a typed error and changes nothing; failures can be retried or cancelled."""

from __future__ import annotations

import pytest
import tarry
from tarry import (
    Flow,
    FlowMismatch,
    ForEach,
    Gate,
    InvalidFlow,
    InvalidResumeValue,
    NotSerializable,
    Runtime,
    SessionExists,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownToken,
    Wait,
)


def gated() -> Flow:
    return Flow("gated", [lambda ctx: "before", Gate("approve", "ship it?"), lambda ctx: ctx.prev])


def snapshot(rt: Runtime, sid: str) -> tuple:
    view = rt.session(sid)
    return (view.status, view.state, len(view.events()), view.outcome.token)


def test_unknown_token(rt: Runtime) -> None:
    with pytest.raises(UnknownToken):
        rt.resume("tk_not-a-real-token")
    with pytest.raises(UnknownToken):
        rt.resume("nonsense")


def test_reused_token_is_rejected_and_changes_nothing(rt: Runtime) -> None:
    out = rt.run(Flow("w", [Wait("a"), Wait("b")]))
    second = rt.resume(out.token, 1)
    before = snapshot(rt, out.session_id)
    with pytest.raises(TokenAlreadyUsed):
        rt.resume(out.token, 2)
    assert snapshot(rt, out.session_id) == before
    assert rt.resume(second.token, 3).output == 3


@pytest.mark.parametrize(
    "decision",
    [
        "yes",
        None,
        1,
        {"approved": "yes"},
        {"ok": True},
        {"approved": True, "extra": 1},
        {"approved": True, "by": 5},
    ],
)
def test_invalid_gate_decision_leaves_the_session_resumable(rt: Runtime, decision) -> None:
    out = rt.run(gated())
    before = snapshot(rt, out.session_id)
    with pytest.raises(InvalidResumeValue):
        rt.resume(out.token, decision)
    assert snapshot(rt, out.session_id) == before
    done = rt.resume(out.token, {"approved": False, "by": "bo", "comment": "not yet"})
    assert done.ok and done.output == {"approved": False, "by": "bo", "comment": "not yet"}


def test_bare_bool_gate_decision(rt: Runtime) -> None:
    out = rt.run(gated())
    assert rt.resume(out.token, True).output == {"approved": True}


def test_unencodable_resume_value_is_rejected_and_changes_nothing(rt: Runtime) -> None:
    out = rt.run(Flow("w1", [Wait("w")]))
    before = snapshot(rt, out.session_id)
    with pytest.raises(NotSerializable):
        rt.resume(out.token, object())
    assert snapshot(rt, out.session_id) == before


def test_unencodable_output_fails_the_step_naming_path_and_type(rt: Runtime) -> None:
    class Opaque:
        pass

    flow = Flow("opaque", [ForEach("f", [1, 2], lambda ctx: {"v": [1, Opaque()]})])
    out = rt.run(flow)
    assert out.failed and out.error.type == "NotSerializable"
    assert out.error.path == ("f", 0, "<lambda>")
    assert "f/0/<lambda>" in out.error.message and "['output']['v'][1]" in out.error.message
    assert "Opaque" in out.error.message


def test_unencodable_input_is_refused_before_anything_is_stored(rt: Runtime) -> None:
    with pytest.raises(NotSerializable):
        rt.run(gated(), object())
    assert rt.sessions() == []


def test_unencodable_state_fails_the_step(rt: Runtime) -> None:
    def put(ctx):
        ctx.state["x"] = lambda: 1
        return 1

    out = rt.run(Flow("st", [put]))
    assert (
        out.failed and out.error.type == "NotSerializable" and "['state']['x']" in out.error.message
    )


def test_session_id_makes_run_idempotent(rt: Runtime) -> None:
    rt.run(gated(), session_id="job-1")
    before = snapshot(rt, "job-1")
    with pytest.raises(SessionExists):
        rt.run(gated(), session_id="job-1")
    assert snapshot(rt, "job-1") == before


def test_flow_mismatch_and_unknown_flow(rt: Runtime) -> None:
    out = rt.run(gated())
    other = Flow("gated", [lambda ctx: 1, Gate("approve"), lambda ctx: 2, lambda ctx: 3])
    with pytest.raises(FlowMismatch):
        rt.resume(out.token, True, flow=other)
    fresh = Runtime(store=rt.store)
    with pytest.raises(UnknownFlow):
        fresh.resume(out.token, True)
    assert fresh.resume(out.token, True, flow=gated()).ok


def test_allow_changed_refuses_when_the_paused_position_is_gone(rt: Runtime) -> None:
    out = rt.run(Flow("moved", [ForEach("f", [1], Gate("g"))]))
    gone = Flow("moved", [ForEach("f", [1], Gate("renamed"))])
    with pytest.raises(FlowMismatch):
        rt.resume(out.token, True, flow=gone, allow_changed=True)
    no_container = Flow("moved", [Gate("g")])
    with pytest.raises(FlowMismatch):
        rt.resume(out.token, True, flow=no_container, allow_changed=True)
    assert rt.resume(out.token, True).ok


def test_failed_step_is_retried_with_a_fixed_flow_without_rerunning_completed_steps(
    rt: Runtime,
) -> None:
    ran: list[str] = []

    def fetch(ctx):
        ran.append("fetch")
        return {"id": 7}

    def send(ctx):
        ran.append("send")
        return "sent"

    def stamp_broken(ctx):
        ran.append("stamp")
        raise RuntimeError("clock unavailable")

    def stamp(ctx):
        ran.append("stamp-fixed")
        return ("stamped", ctx.outputs["fetch"]["id"], ctx.prev)

    broken = Flow(
        "pipeline", [fetch, send, ForEach("each", [1, 2], [lambda ctx: ctx.item, stamp_broken])]
    )
    out = rt.run(broken)
    assert out.failed and out.token and out.error.path == ("each", 0, "stamp_broken")
    stamp.__name__ = "stamp_broken"
    fixed = Flow("pipeline", [fetch, send, ForEach("each", [1, 2], [lambda ctx: ctx.item, stamp])])
    done = rt.resume(out.token, flow=fixed, allow_changed=True)
    assert done.ok
    assert ran == ["fetch", "send", "stamp", "stamp-fixed", "stamp-fixed"]
    assert done.output == [("stamped", 7, 1), ("stamped", 7, 2)]


def test_cancel_ends_paused_and_failed_sessions(rt: Runtime) -> None:
    paused = rt.run(gated())
    cancelled = rt.cancel(paused.token)
    assert cancelled.failed and cancelled.error.type == "cancelled"
    assert rt.session(paused.session_id).status == "cancelled"
    with pytest.raises(TokenAlreadyUsed):
        rt.resume(paused.token, True)

    failed = rt.run(Flow("bad", [lambda ctx: 1 / 0]))
    assert rt.cancel(failed.session_id).error.type == "cancelled"
    with pytest.raises(tarry.SessionNotResumable):
        rt.cancel(failed.session_id)


def test_skip_records_the_failed_step_and_goes_on(rt: Runtime) -> None:
    flow = Flow("skippy", [lambda ctx: 1 / 0, lambda ctx: ("after", ctx.prev)])
    out = rt.run(flow)
    done = rt.skip(out.token, output="patched")
    assert done.ok and done.output == ("after", "patched")


def test_invalid_flow_definitions() -> None:
    with pytest.raises(InvalidFlow):
        Flow("dup", [Gate("a"), Gate("a")])
    with pytest.raises(InvalidFlow):
        Flow("", [Gate("a")])
    with pytest.raises(InvalidFlow):
        Gate("g", on_timeout="maybe")
    with pytest.raises(InvalidFlow):
        tarry.Graph("g", [Gate("a")], start="b", routes={})
    with pytest.raises(InvalidFlow):
        tarry.Loop("l", Gate("a"), until=lambda ctx: True, max_iterations=0)
    with pytest.raises(InvalidFlow):
        Flow("x", [42])
    assert issubclass(InvalidFlow, tarry.TarryError)


def test_an_int_too_large_for_msgpack_fails_the_step(rt: Runtime) -> None:
    out = rt.run(Flow("big", [lambda ctx: 2**64]))
    assert out.failed and out.error.type == "NotSerializable" and "int" in out.error.message
    assert rt.run(Flow("edge", [lambda ctx: 2**64 - 1])).output == 2**64 - 1
