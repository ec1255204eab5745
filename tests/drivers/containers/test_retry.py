"""Retry policies: back-off schedules on a ManualClock, in-place and durable waits, exhaustion,
non-retryable errors, the Runtime default, async runs, and attempts counted across processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
import tarry
from support import WAIT
from tarry import Flow, ManualClock, Retry, Runtime, step


class Flaky:
    """A step body that fails its first `failures` attempts, then returns "done"."""

    def __init__(self, failures: int, exc: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.exc = exc
        self.attempts: list[int] = []
        self.keys: set[str] = set()

    def __call__(self, ctx: tarry.Context) -> str:
        self.attempts.append(ctx.attempt)
        self.keys.add(ctx.idempotency_key)
        if len(self.attempts) <= self.failures:
            raise self.exc(f"attempt {ctx.attempt} failed")
        return "done"


def events_of(rt: Runtime, sid: str, type_: str) -> list[tarry.Event]:
    return [e for e in rt.session(sid).events() if e.type == type_]


def delays(rt: Runtime, sid: str) -> list[float]:
    return [e.data["delay"] for e in events_of(rt, sid, "node.retrying")]


def run_flaky(policy: Retry, failures: int, clock: ManualClock | None = None) -> tuple:
    clock = clock or ManualClock()
    rt = Runtime(clock=clock)
    body = Flaky(failures)
    flow = Flow("flaky", [step(name="call", retry=policy)(body)])
    start = clock.now()
    out = rt.run(flow)
    return rt, out, body, clock.now() - start


# -- schedules --------------------------------------------------------------------------------


def test_exponential_backoff_waits_1_2_4_8_in_place() -> None:
    policy = Retry(attempts=5, initial=1.0, max_delay=60.0, jitter=False, durable_after=100)
    rt, out, body, waited = run_flaky(policy, failures=4)
    assert out.ok and out.output == "done"
    assert body.attempts == [1, 2, 3, 4, 5]
    assert delays(rt, out.session_id) == [1.0, 2.0, 4.0, 8.0]
    assert waited == timedelta(seconds=15)
    # Each retry waited exactly its delay on the Runtime's clock.
    retrying = events_of(rt, out.session_id, "node.retrying")
    failed = events_of(rt, out.session_id, "node.failed")
    assert [e.data["attempt"] for e in failed] == [1, 2, 3, 4]
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(retrying, failed[1:], strict=False)]
    assert gaps == [1.0, 2.0, 4.0]


def test_exponential_backoff_is_capped_at_max_delay() -> None:
    policy = Retry(attempts=6, initial=1.0, max_delay=5.0, jitter=False, durable_after=100)
    rt, out, _, waited = run_flaky(policy, failures=5)
    assert out.ok
    assert delays(rt, out.session_id) == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert waited == timedelta(seconds=17)


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [("linear", [0.5, 1.0, 1.5, 2.0]), ("fixed", [0.5, 0.5, 0.5, 0.5])],
)
def test_linear_and_fixed_backoff(backoff: str, expected: list[float]) -> None:
    policy = Retry(attempts=5, backoff=backoff, initial=0.5, jitter=False, durable_after=100)
    rt, out, _, _ = run_flaky(policy, failures=4)
    assert out.ok
    assert delays(rt, out.session_id) == expected


def test_multiplier_is_used() -> None:
    policy = Retry(attempts=4, initial=1.0, multiplier=3, jitter=False, durable_after=100)
    rt, out, _, _ = run_flaky(policy, failures=3)
    assert delays(rt, out.session_id) == [1.0, 3.0, 9.0]


def test_jitter_stays_within_half_and_full_delay() -> None:
    policy = Retry(attempts=9, initial=1.0, max_delay=50.0, durable_after=1000)
    for _ in range(5):
        rt, out, _, waited = run_flaky(policy, failures=8)
        assert out.ok
        got = delays(rt, out.session_id)
        bases = [min(2.0**n, 50.0) for n in range(8)]
        assert all(b / 2 <= d <= b for d, b in zip(got, bases, strict=True)), got
        assert waited.total_seconds() == pytest.approx(sum(got))


# -- exhaustion and errors that are not retried -----------------------------------------------


def test_exhausted_attempts_give_an_error_with_attempts_and_retryable() -> None:
    policy = Retry(attempts=3, initial=0.1, jitter=False)
    rt, out, body, _ = run_flaky(policy, failures=10)
    assert out.failed
    assert out.error.type == "ConnectionError"
    assert out.error.attempts == 3
    assert out.error.retryable is True
    assert out.error.path == ("call",)
    assert body.attempts == [1, 2, 3]
    assert len(events_of(rt, out.session_id, "node.failed")) == 3
    assert len(events_of(rt, out.session_id, "node.retrying")) == 2
    assert len(body.keys) == 1  # one idempotency key across attempts


def test_an_exception_not_matching_on_fails_at_once() -> None:
    rt = Runtime(clock=ManualClock())
    body = Flaky(failures=5, exc=ValueError)
    flow = Flow("f", [step(name="s", retry=Retry(attempts=5, on=(ConnectionError,)))(body)])
    out = rt.run(flow)
    assert out.failed and out.error.type == "ValueError"
    assert out.error.attempts == 1 and out.error.retryable is False
    assert body.attempts == [1]
    assert events_of(rt, out.session_id, "node.retrying") == []


def test_on_accepts_a_single_exception_class() -> None:
    rt = Runtime(clock=ManualClock())
    body = Flaky(failures=1, exc=KeyError)
    flow = Flow("f", [step(name="s", retry=Retry(attempts=2, on=KeyError, jitter=False))(body)])
    assert rt.run(flow).ok
    assert body.attempts == [1, 2]


def test_runtime_default_retry_applies_to_steps_without_their_own() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock, retry=Retry(attempts=3, initial=2.0, jitter=False))
    plain = Flaky(failures=2)
    own = Flaky(failures=1)
    flow = Flow(
        "f",
        [
            step(name="plain")(plain),
            step(name="own", retry=Retry(attempts=2, initial=0.5, jitter=False))(own),
        ],
    )
    out = rt.run(flow)
    assert out.ok
    assert plain.attempts == [1, 2, 3] and own.attempts == [1, 2]
    assert delays(rt, out.session_id) == [2.0, 4.0, 0.5]


def test_without_a_policy_a_step_fails_on_its_first_error() -> None:
    rt = Runtime()
    body = Flaky(failures=1)
    out = rt.run(Flow("f", [step(name="s")(body)]))
    assert out.failed and out.error.attempts == 1 and body.attempts == [1]


def test_bad_policies_are_refused() -> None:
    with pytest.raises(tarry.InvalidFlow):
        Retry(attempts=0)
    with pytest.raises(tarry.InvalidFlow):
        Retry(backoff="random")
    with pytest.raises(tarry.InvalidFlow):
        Retry(initial=-1)
    with pytest.raises(tarry.InvalidFlow):
        step(retry=3)(lambda ctx: None)
    with pytest.raises(tarry.InvalidArgument):
        Runtime(retry="often")


# -- long back-offs pause the session ---------------------------------------------------------


def test_a_long_backoff_pauses_with_wake_at_and_resume_due_continues_it() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    body = Flaky(failures=2)
    policy = Retry(attempts=4, initial=60.0, max_delay=3600, jitter=False, durable_after=5.0)
    flow = Flow("f", [step(name="call", retry=policy)(body), lambda ctx: ctx.prev + "!"])
    out = rt.run(flow)
    assert out.paused
    assert out.pause.kind == "system" and out.pause.reason == "retry"
    assert out.pause.wake_at == clock.now() + timedelta(seconds=60)
    assert out.pause.payload["attempt"] == 2
    assert out.meta["pause_kind"] == "system"
    assert body.attempts == [1]

    clock.advance(59)
    assert rt.resume_due() == []  # not yet
    clock.advance(1)
    [second] = rt.resume_due()
    assert second.paused and second.pause.reason == "retry"
    assert second.pause.wake_at == clock.now() + timedelta(seconds=120)
    assert body.attempts == [1, 2]
    assert rt.resume_due() == []

    clock.advance(120)
    [third] = rt.resume_due()
    assert third.ok and third.output == "done!"
    assert body.attempts == [1, 2, 3]
    assert third.meta["pause_kind"] == "system" and third.meta["trigger"] == "timer"
    assert delays(rt, out.session_id) == [60.0, 120.0]
    view = rt.session(out.session_id)
    assert view.state == view.derive_state()


def test_a_short_backoff_in_an_async_run_awaits_instead_of_blocking() -> None:
    class AsyncOnlyClock(ManualClock):
        def sleep(self, seconds: float) -> None:
            raise AssertionError("an async run must not block its loop")

    clock = AsyncOnlyClock()
    rt = Runtime(clock=clock)
    body = Flaky(failures=2)
    flow = Flow("f", [step(name="s", retry=Retry(attempts=3, initial=1.0, jitter=False))(body)])
    out = asyncio.run(rt.arun(flow))
    assert out.ok and body.attempts == [1, 2, 3]
    assert delays(rt, out.session_id) == [1.0, 2.0]


def test_an_async_step_is_retried_after_its_timeout() -> None:
    calls: list[int] = []

    async def slow_then_fast(ctx: tarry.Context) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(WAIT)  # far longer than its timeout, however slow the machine
        return "fast"

    rt = Runtime()
    policy = Retry(attempts=2, initial=0.0, jitter=False, on=TimeoutError)
    flow = Flow("f", [step(name="s", timeout=0.05, retry=policy)(slow_then_fast)])
    out = asyncio.run(rt.arun(flow))
    assert out.ok and out.output == "fast" and calls == [1, 2]
    [failed] = events_of(rt, out.session_id, "node.failed")
    assert failed.data["error"]["type"] == "TimeoutError"


def test_resuming_an_exhausted_failure_starts_the_attempts_afresh() -> None:
    rt = Runtime(clock=ManualClock())
    body = Flaky(failures=3)
    flow = Flow("f", [step(name="s", retry=Retry(attempts=2, initial=0.1, jitter=False))(body)])
    out = rt.run(flow)
    assert out.failed and out.token and body.attempts == [1, 2]
    again = rt.resume(out.token)
    assert again.ok and body.attempts == [1, 2, 1, 2]


def test_a_step_completed_after_retries_does_not_leak_its_attempts_to_the_next_step() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    first = Flaky(failures=1)
    seen: list[int] = []

    def second(ctx: tarry.Context) -> None:
        seen.append(ctx.attempt)

    policy = Retry(attempts=3, initial=30.0, jitter=False)  # durable: pauses
    flow = Flow("f", [step(name="a", retry=policy)(first), step(name="b", retry=policy)(second)])
    out = rt.run(flow)
    assert out.paused
    clock.advance(30)
    [done] = rt.resume_due()
    assert done.ok and first.attempts == [1, 2] and seen == [1]
    assert rt.session(done.session_id).state.retries == 0


# -- across processes -------------------------------------------------------------------------

FLOW_MODULE = """
from pathlib import Path
from tarry import Flow, Retry, step

LOG = Path(__file__).with_name("attempts.txt")

@step(retry=Retry(attempts=4, initial=600.0, max_delay=3600, jitter=False))
def call(ctx):
    with LOG.open("a") as f:
        f.write(f"{ctx.attempt}\\n")
    if ctx.attempt < 3:
        raise ConnectionError(f"attempt {ctx.attempt}")
    return ctx.attempt

flow = Flow("remote", [call])
"""

DRIVER = """
import sys
from datetime import datetime
sys.path.insert(0, sys.argv[1])
import flowmod
from tarry import ManualClock, Runtime

db, when, action = sys.argv[2], datetime.fromisoformat(sys.argv[3]), sys.argv[4]
rt = Runtime(store="sqlite:///" + db, flows=[flowmod.flow], clock=ManualClock(when))
if action == "run":
    outs = [rt.run(flowmod.flow)]
else:
    outs = rt.resume_due()
for out in outs:
    print(out.status, out.pause.reason if out.pause else out.output)
"""


def test_attempts_are_counted_across_processes_on_sqlite(tmp_path: Path) -> None:
    (tmp_path / "flowmod.py").write_text(textwrap.dedent(FLOW_MODULE))
    db = tmp_path / "runs.db"
    t0 = tarry.ManualClock().now()

    def proc(at_seconds: float, action: str) -> str:
        when = (t0 + timedelta(seconds=at_seconds)).isoformat()
        result = subprocess.run(
            [sys.executable, "-c", DRIVER, str(tmp_path), str(db), when, action],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert proc(0, "run") == "paused retry"  # attempt 1 failed: 600 s back-off
    assert proc(599, "due") == ""  # not due yet
    assert proc(600, "due") == "paused retry"  # attempt 2 failed: 1,200 s back-off
    assert proc(1799, "due") == ""
    assert proc(1800, "due") == "ok 3"  # attempt 3, in a third process, succeeds
    assert (tmp_path / "attempts.txt").read_text().split() == ["1", "2", "3"]

    rt = Runtime(store=f"sqlite:///{db}")
    [summary] = rt.sessions()
    view = rt.session(summary.session_id)
    assert [e.data["attempt"] for e in view.events() if e.type == "node.retrying"] == [1, 2]
    assert view.state == view.derive_state()
