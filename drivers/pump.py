"""The one pump: steps a flow's generator chain into a result, switching to async only when
an async step hands it an awaitable (`AwaitableOrValue`: a plain value when nothing awaited).

`pump` is the one place that steps the generator: one send runs the flow until it returns,
fails, pauses, stops or needs something awaited or waited for. The async path (`_pump_async`)
only awaits what `pump` hands it and then calls `pump` again, so sync and async runs share
every line of dispatch. A short retry back-off (`Backoff`) is waited in place by whoever
called `pump`: `sleep` in a sync run, `asleep` (an `asyncio.sleep`) in an async one.
Checkpoints never reach the pump unless the run stops there: the engine asks the driver at
each one (`Execution.stop`) and yields a `Checkpoint` only to stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from tarry.engine.context import Interrupted
from tarry.engine.failure import NodeFailure
from tarry.engine.signals import Await, Backoff, Checkpoint, Pause

T = TypeVar("T")
AwaitableOrValue = Awaitable[T] | T

DONE, PAUSED, STOPPED, FAILED = "done", "paused", "stopped", "failed"
Result = tuple[str, Any]


def pump(
    gen: Generator[Any, Any, Any], value: Any, throw: BaseException | None = None
) -> Result | Await | Backoff:
    """Send `value` (or throw `throw`) into `gen` and return what it comes to: it returned,
    failed, paused or stopped at a checkpoint, or needs something awaited or waited for."""
    try:
        signal = gen.send(value) if throw is None else gen.throw(throw)
    except StopIteration as stop:
        return (DONE, stop.value)
    except NodeFailure as failure:
        return (FAILED, failure.error)
    kind = type(signal)
    if kind is Pause:
        return (PAUSED, signal)
    if kind is Checkpoint:
        return (STOPPED, signal)
    if kind is Await or kind is Backoff:
        return signal
    msg = (
        f"a flow element yielded {signal!r}; only Checkpoint, Pause, Await and Backoff may "
        f"be yielded (is a step a generator function? steps must return values)"
    )
    raise TypeError(msg)


def drive(
    gen: Generator[Any, Any, Any],
    finish: Callable[[Result], T],
    sleep: Callable[[float], None],
    asleep: Callable[[float], Awaitable[None]],
    asynchronous: bool = False,
) -> AwaitableOrValue[T]:
    """Run `gen` to a result and return `finish(result)`; an awaitable of it as soon as an
    async step is met (or a back-off, when the caller is `asynchronous`: it then waits with
    `asleep` rather than blocking its event loop)."""
    result = pump(gen, None)
    while type(result) is Backoff and not asynchronous:
        sleep(result.seconds)
        result = pump(gen, None)
    if type(result) is Await or type(result) is Backoff:
        return _pump_async(gen, result, finish, asleep)
    return finish(result)


async def _pump_async(
    gen: Generator[Any, Any, Any],
    signal: Await | Backoff,
    finish: Callable[[Result], T],
    asleep: Callable[[float], Awaitable[None]],
) -> T:
    while True:
        if type(signal) is Backoff:
            await asleep(signal.seconds)
            result = pump(gen, None)
        else:
            try:
                if signal.timeout is not None:
                    import asyncio  # only async runs need it; `import tarry` stays light

                    value = await asyncio.wait_for(signal.awaitable, signal.timeout)
                else:
                    value = await signal.awaitable
            except (Exception, Interrupted) as exc:
                result = pump(gen, None, throw=exc)
            else:
                result = pump(gen, value)
        if type(result) is not Await and type(result) is not Backoff:
            return finish(result)
        signal = result
