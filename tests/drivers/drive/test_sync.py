"""Sync stays sync: run/resume return an Outcome for all-sync flows, an awaitable otherwise."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys

import pytest
from support import WAIT, settle
from tarry import AsyncInSyncContext, Flow, ForEach, Gate, Outcome, Runtime, step


def sync_step(ctx):
    return (ctx.prev if isinstance(ctx.prev, int) else 0) + 1


async def async_step(ctx):
    await asyncio.sleep(0)
    return (ctx.prev if isinstance(ctx.prev, int) else 0) + 1


SYNC = Flow("sync", [sync_step, Gate("g"), step(sync_step, "again")])
MIXED = Flow("mixed", [sync_step, Gate("g"), async_step])


def test_all_sync_run_and_resume_return_outcomes(rt: Runtime) -> None:
    out = rt.run(SYNC)
    assert isinstance(out, Outcome) and out.paused
    done = rt.resume(out.token, True)
    assert isinstance(done, Outcome) and done.ok


def test_an_async_step_makes_run_and_resume_awaitable(rt: Runtime) -> None:
    flow = Flow("a", [async_step, Gate("g"), step(async_step, "again")])
    result = rt.run(flow)
    assert inspect.isawaitable(result)
    out = asyncio.run(_wait(result))
    assert out.paused
    resumed = rt.resume(out.token, True)
    assert inspect.isawaitable(resumed)
    assert asyncio.run(_wait(resumed)).ok


def test_resume_is_sync_when_only_steps_before_the_pause_were_async(rt: Runtime) -> None:
    flow = Flow("early", [async_step, Gate("g"), sync_step])
    out = settle(rt.run(flow))
    resumed = rt.resume(out.token, True)
    assert isinstance(resumed, Outcome) and resumed.ok


def test_arun_and_aresume_always_return_awaitables(rt: Runtime) -> None:
    result = rt.arun(SYNC)
    assert inspect.isawaitable(result)
    out = asyncio.run(_wait(result))
    again = rt.aresume(out.token, True)
    assert inspect.isawaitable(again)
    assert asyncio.run(_wait(again)).ok


def test_run_sync_drives_async_steps_on_a_private_loop(rt: Runtime) -> None:
    out = rt.run_sync(MIXED)
    assert isinstance(out, Outcome) and out.paused
    done = rt.resume_sync(out.token, True)
    assert isinstance(done, Outcome) and done.ok and done.output == 1


def test_run_sync_inside_a_running_loop_raises(rt: Runtime) -> None:
    async def inside() -> None:
        with pytest.raises(AsyncInSyncContext):
            rt.run_sync(MIXED)
        out = await rt.arun(MIXED)
        with pytest.raises(AsyncInSyncContext):
            rt.resume_sync(out.token, True)
        assert (await rt.aresume(out.token, True)).ok  # the refusal changed nothing

    asyncio.run(inside())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_foreach_outputs_are_the_same_for_sync_and_async_steps(rt: Runtime, kind: str) -> None:
    body = sync_step if kind == "sync" else async_step
    flow = Flow(f"fe-{kind}", [ForEach("f", [1, 2, 3], body)])
    assert settle(rt.run(flow)).output == [2, 3, 4]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_raising_step_gives_an_error_outcome(rt: Runtime, kind: str) -> None:
    def boom(ctx):
        raise ValueError("bad input 42")

    async def aboom(ctx):
        raise ValueError("bad input 42")

    flow = Flow(f"boom-{kind}", [sync_step, boom if kind == "sync" else aboom])
    out = settle(rt.run(flow))
    assert out.failed and out.token
    assert out.error.type == "ValueError" and out.error.message == "bad input 42"
    assert out.error.path == (("boom" if kind == "sync" else "aboom"),)
    assert "ValueError: bad input 42" in out.error.traceback


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_interrupt_pauses_and_returns_resume_values_in_order(rt: Runtime, kind: str) -> None:
    calls: list[int] = []

    def ask(ctx):
        calls.append(1)
        a = ctx.interrupt("first?")
        b = ctx.interrupt("second?", kind="external", payload={"n": 2})
        return [a, b]

    async def aask(ctx):
        return ask(ctx)

    flow = Flow(f"ask-{kind}", [ask if kind == "sync" else aask])
    out = settle(rt.run(flow))
    assert out.paused and out.pause.kind == "human" and out.pause.reason == "first?"
    out = settle(rt.resume(out.token, "A"))
    assert out.paused and out.pause.kind == "external" and out.pause.payload == {"n": 2}
    assert out.meta["pause_kind"] == "external"
    out = settle(rt.resume(out.token, "B"))
    assert out.ok and out.output == ["A", "B"]
    assert len(calls) == 3  # run again from its start on each resume


def test_async_step_timeout_fails_the_step(rt: Runtime) -> None:
    @step(timeout=0.01)
    async def slow(ctx):
        await asyncio.sleep(WAIT)  # a timeout that did not fire fails the test, late

    out = rt.run_sync(Flow("slow", [slow]))
    assert out.failed and out.error.type == "TimeoutError"
    # The message says which step and after how long (asyncio's TimeoutError has none).
    assert out.error.message == "step 'slow' timed out after 0.01 seconds"


def test_a_timeout_the_step_raises_itself_keeps_its_message(rt: Runtime) -> None:
    @step(timeout=5)
    async def calls_out(ctx):
        raise TimeoutError("the API did not answer")

    out = rt.run_sync(Flow("own", [calls_out]))
    assert out.failed and out.error.message == "the API did not answer"


def test_a_sync_run_gives_a_plain_outcome_and_async_code_uses_arun(rt: Runtime) -> None:
    """`run()` is typed `-> Outcome` (see tests/typed/), but at run time an Outcome is a plain
    value, never an awaitable: async code that may meet sync flows awaits `arun`/`aresume`."""
    out = rt.run(SYNC)
    assert type(out) is Outcome and not inspect.isawaitable(out) and out.paused

    async def go() -> Outcome:
        first = await rt.arun(SYNC)
        assert first.paused
        return await rt.aresume(first.token, True)

    assert asyncio.run(go()).ok


def test_a_sync_outcome_is_returned_as_it_is_never_driven_on_a_loop() -> None:
    code = (
        "import sys, tarry\n"
        "rt = tarry.Runtime()\n"
        "flow = tarry.Flow('f', [lambda ctx: 1, tarry.Gate('g')])\n"
        "out = rt.run_sync(flow)\n"
        "done = rt.resume_sync(out.token, True)\n"
        "assert type(done) is tarry.Outcome and done.ok\n"
        "print('asyncio' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


async def _wait(aw):
    return await aw
