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
from typing import Any, TypeAlias, TypeVar

from tarry.engine.context import Interrupted
from tarry.engine.failure import NodeFailure
from tarry.engine.signals import Await, Backoff, Checkpoint, Pause, PauseMany, Select

T = TypeVar("T")
AwaitableOrValue: TypeAlias = Awaitable[T] | T  # TypeAlias: else mypy reads a variable

DONE, PAUSED, STOPPED, FAILED = "done", "paused", "stopped", "failed"
Result = tuple[str, Any]


Wanted = Await | Backoff | Select


def pump(
    gen: Generator[Any, Any, Any], value: Any, throw: BaseException | None = None
) -> Result | Wanted:
    """Send `value` (or throw `throw`) into `gen` and return what it comes to: it returned,
    failed, paused or stopped at a checkpoint, or needs something awaited or waited for."""
    try:
        signal = gen.send(value) if throw is None else gen.throw(throw)
    except StopIteration as stop:
        return (DONE, stop.value)
    except NodeFailure as failure:
        return (FAILED, failure.error)
    kind = type(signal)
    if kind is Pause or kind is PauseMany:
        return (PAUSED, signal)
    if kind is Checkpoint:
        return (STOPPED, signal)
    if kind is Await or kind is Backoff or kind is Select:
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
    while True:
        kind = type(result)
        if kind is Backoff and not asynchronous:
            sleep(result.seconds)
            result = pump(gen, None)
        elif kind is Select and _threads_only(result):
            # Sync steps of a concurrent container, on its pool: waited for in place.
            result = pump(gen, _wait_threads(result.items))
        else:
            break
    if kind is Await or kind is Backoff or kind is Select:
        return _pump_async(gen, result, finish, asleep)
    return finish(result)


def _threads_only(select: Select) -> bool:
    from concurrent.futures import Future

    return all(type(item) is Future for item in select.items)


def _wait_threads(items: tuple[Any, ...]) -> list[tuple[int, bool, Any]]:
    from concurrent.futures import FIRST_COMPLETED, wait

    wait(items, return_when=FIRST_COMPLETED)
    return [_answer(i, item) for i, item in enumerate(items) if item.done()]


def _answer(position: int, done: Any) -> tuple[int, bool, Any]:
    """What a finished future or task gives a container: (position, True, result) or
    (position, False, exception)."""
    exc = done.exception()
    return (position, False, exc) if exc is not None else (position, True, done.result())


async def _pump_async(
    gen: Generator[Any, Any, Any],
    signal: Wanted,
    finish: Callable[[Result], T],
    asleep: Callable[[float], Awaitable[None]],
) -> T:
    # The tasks of a concurrent container's Select, by the identity of what they wait for: a
    # Select asks again for what is still in flight, which must not be awaited twice.
    tasks: dict[int, Any] = {}
    while True:
        if type(signal) is Backoff:
            await asleep(signal.seconds)
            result = pump(gen, None)
        elif type(signal) is Select:
            result = pump(gen, await _select(signal.items, tasks))
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
        kind = type(result)
        if kind is not Await and kind is not Backoff and kind is not Select:
            return finish(result)
        signal = result


async def _select(items: tuple[Any, ...], tasks: dict[int, Any]) -> list[tuple[int, bool, Any]]:
    """Wait until at least one of `items` (awaitables, thread-pool futures) has finished."""
    import asyncio
    from concurrent.futures import Future

    mine = []
    for item in items:
        task = tasks.get(id(item))
        if task is None:
            if type(item) is Future:
                task = asyncio.wrap_future(item)
            else:
                task = asyncio.ensure_future(item)
            tasks[id(item)] = task
        mine.append(task)
    await asyncio.wait(mine, return_when=asyncio.FIRST_COMPLETED)
    answers = []
    for i, task in enumerate(mine):
        if task.done():
            del tasks[id(items[i])]
            answers.append(_answer(i, task))
    return answers
