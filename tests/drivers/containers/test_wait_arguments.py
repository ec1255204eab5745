"""Gate, Wait and Sleep arguments given as `fn(ctx)`: evaluated once when the element is
reached, checked then, and recorded with the pause, which is all a resume, a timer or a timeout
in another process reads. Keys of Waits, and the action on timeout in `run.paused`."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import tarry
from tarry import Flow, ForEach, Gate, ManualClock, Runtime, Sleep, Wait


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def paused_data(rt: Runtime, sid: str) -> dict[str, Any]:
    [event] = [e for e in rt.session(sid).events() if e.type == "run.paused"][-1:]
    return event.data


# -- evaluated when reached -------------------------------------------------------------------


def test_gate_arguments_built_from_the_item(clock: ManualClock) -> None:
    rt = Runtime(clock=clock)
    gate = Gate(
        "review",
        lambda ctx: f"review ticket {ctx.item['id']}",
        assignee=lambda ctx: ctx.item["owner"],
        timeout=lambda ctx: ctx.input["hours"] * 3600,
    )
    tickets = [{"id": 7, "owner": "ana"}, {"id": 8, "owner": "bo"}]
    flow = Flow("f", [ForEach("tickets", tickets, [gate])])
    out = rt.run(flow, input={"hours": 2})
    assert out.pause.reason == "review ticket 7"
    assert out.pause.payload == {"message": "review ticket 7", "assignee": "ana"}
    assert out.pause.expires_at == clock.now() + timedelta(hours=2)
    out = rt.resume(out.token, True)
    assert out.pause.payload == {"message": "review ticket 8", "assignee": "bo"}
    assert rt.resume(out.token, True).output == [{"approved": True}, {"approved": True}]


def test_wait_arguments_and_key_are_recorded_with_the_pause(clock: ManualClock) -> None:
    rt = Runtime(clock=clock)
    wait = Wait(
        "result",
        kind=lambda ctx: ctx.input["kind"],
        reason=lambda ctx: f"batch {ctx.input['batch']}",
        payload=lambda ctx: {"batch": ctx.input["batch"], "prev": ctx.prev},
        key=lambda ctx: f"batch-{ctx.input['batch']}/item-{ctx.prev}",
        timeout=lambda ctx: timedelta(minutes=ctx.input["minutes"]),
    )
    flow = Flow("f", [lambda ctx: 42, wait])
    out = rt.run(flow, input={"kind": "system", "batch": 7, "minutes": 5})
    pause = out.pause
    assert (pause.kind, pause.reason) == ("system", "batch 7")
    assert pause.payload == {"batch": 7, "prev": 42}
    assert pause.expires_at == clock.now() + timedelta(minutes=5)
    state = rt.session(out.session_id).state
    assert state.pause.key == "batch-7/item-42"
    data = paused_data(rt, out.session_id)
    assert data["key"] == "batch-7/item-42" and data["on_timeout"] == "fail"
    assert rt.session(out.session_id).derive_state() == state
    assert rt.resume(out.token, {"score": 1}).output == {"score": 1}


def test_sleep_seconds_and_until_from_the_input(clock: ManualClock) -> None:
    rt = Runtime(clock=clock)
    flow = Flow("f", [Sleep("nap", lambda ctx: ctx.input["seconds"]), lambda ctx: "woke"])
    out = rt.run(flow, input={"seconds": 90})
    assert out.pause.wake_at == clock.now() + timedelta(seconds=90)
    clock.advance(90)
    [done] = rt.resume_due()
    assert done.output == "woke"

    when = clock.now() + timedelta(days=1)
    flow = Flow("g", [Sleep("nap", until=lambda ctx: when)])
    assert rt.run(flow).pause.wake_at == when


def test_an_argument_is_evaluated_once_never_on_resume() -> None:
    rt = Runtime()
    calls: list[int] = []

    def message(ctx: Any) -> str:
        calls.append(1)
        return "ok?"

    out = rt.run(Flow("f", [Gate("g", message), lambda ctx: ctx.prev]))
    assert calls == [1]
    assert rt.resume(out.token, {"approved": False}).output == {"approved": False}
    assert calls == [1]


def test_an_async_argument_is_awaited() -> None:
    rt = Runtime()

    async def seconds(ctx: Any) -> float:
        await asyncio.sleep(0)
        return 30

    async def main() -> Any:
        return await rt.arun(Flow("f", [Sleep("nap", seconds)]))

    out = asyncio.run(main())
    assert out.paused and out.pause.wake_at is not None


# -- bad arguments ------------------------------------------------------------------------------


def test_a_bad_literal_is_refused_when_the_flow_is_built() -> None:
    with pytest.raises(tarry.InvalidFlow) as info:
        Sleep("nap", "x")
    assert str(info.value) == "Sleep 'nap': seconds must be a number >= 0 (got 'x')"
    with pytest.raises(
        tarry.InvalidFlow, match=r"Wait 'w': key must be a str of 1 to 512 characters \(got ''\)"
    ):
        Wait("w", key="")
    with pytest.raises(tarry.InvalidFlow, match=r"Wait 'w': key must be a str \(got 5\)"):
        Wait("w", key=5)
    with pytest.raises(tarry.InvalidFlow, match="timeout must be a positive number"):
        Gate("g", timeout=-1)
    with pytest.raises(tarry.InvalidFlow, match="kind must be one of"):
        Wait("w", kind="robot")


def test_a_bad_result_fails_the_element_resumably() -> None:
    rt = Runtime()
    answers = iter(["x", 0])
    flow = Flow("f", [Sleep("nap", lambda ctx: next(answers)), lambda ctx: "after"])
    out = rt.run(flow)
    assert out.failed and out.token is not None
    assert out.error.type == "InvalidFlow" and out.error.path == ("nap",)
    assert out.error.message == "Sleep 'nap': seconds returned 'x', expected a number >= 0"
    done = rt.resume(out.token)  # evaluated again: the element never paused
    assert done.paused and done.pause.reason == "sleep"


@pytest.mark.parametrize("key", ["", 5, ["a"]])
def test_a_key_that_is_not_a_non_empty_str_fails_the_wait(key: Any) -> None:
    out = Runtime().run(Flow("f", [Wait("w", key=lambda ctx: key)]))
    # Computed from data: typed, and retryable (a retry after the data is fixed may do).
    assert out.failed and out.error.type == "InvalidArgument" and out.error.retryable
    assert out.error.message.startswith("Wait 'w': key returned ")
    assert "expected a str" in out.error.message


def test_an_argument_callable_that_raises_fails_the_element() -> None:
    def boom(ctx: Any) -> str:
        raise KeyError("missing")

    out = Runtime().run(Flow("f", [Gate("g", boom)]))
    assert out.failed and out.error.type == "KeyError" and out.error.path == ("g",)


# -- timeouts read what the pause recorded -------------------------------------------------------


def test_run_paused_carries_the_action_on_timeout(clock: ManualClock) -> None:
    rt = Runtime(clock=clock)
    cases = [
        (Gate("g", timeout=60, on_timeout="approve"), "approve"),
        (Gate("g", timeout=60), "reject"),
        (Wait("g", timeout=60), "fail"),
        (Wait("g", timeout=60, on_timeout={"results": []}), {"value": {"results": []}}),
    ]
    for element, action in cases:
        out = rt.run(Flow("f", [element]))
        assert paused_data(rt, out.session_id)["on_timeout"] == action
        assert rt.session(out.session_id).state.pause.on_timeout == action
    for element in (Gate("g"), Wait("g"), Sleep("g", 5)):
        out = rt.run(Flow("f", [element]))
        assert "on_timeout" not in paused_data(rt, out.session_id)


@pytest.mark.parametrize(
    "element, check",
    [
        (
            Gate("g", timeout=lambda ctx: ctx.input, on_timeout="approve"),
            lambda out: out.ok and out.output == {"approved": True, "by": "timeout"},
        ),
        (
            Gate("g", timeout=lambda ctx: ctx.input),
            lambda out: out.error.type == "gate_timeout" and "deadline" in out.error.message,
        ),
        (
            Wait("g", timeout=lambda ctx: ctx.input, on_timeout=[1, 2]),
            lambda out: out.ok and out.output == [1, 2],
        ),
        (
            Wait("g", timeout=lambda ctx: ctx.input),
            lambda out: out.error.type == "wait_timeout",
        ),
    ],
)
def test_a_timeout_fires_in_another_process_from_what_the_pause_recorded(
    store: Any, clock: ManualClock, element: Any, check: Any
) -> None:
    flow = Flow("f", [element])
    out = Runtime(store=store, clock=clock).run(flow, input=120)
    assert out.pause.expires_at == clock.now() + timedelta(seconds=120)
    other = Runtime(store=store, clock=clock, flows=[flow])  # evaluates nothing
    clock.advance(119)
    assert other.resume_due() == []
    clock.advance(1)
    [done] = other.resume_due()
    assert check(done), done


def test_an_on_timeout_value_that_cannot_be_stored_fails_the_wait() -> None:
    out = Runtime().run(Flow("f", [Wait("w", timeout=5, on_timeout=object())]))
    assert out.failed and out.error.type == "NotSerializable"
