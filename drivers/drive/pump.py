"""The one pump: steps a flow's generator chain into a result, switching to async only when
an async step hands it an awaitable (`AwaitableOrValue`: a plain value when nothing awaited);
and `settle`, the sync entry points' way from such a result to a value.

`pump` is the one place that steps the generator: one send runs the flow until it returns,
fails, pauses, stops or needs something awaited or waited for. The async path (`_pump_async`)
only awaits what `pump` hands it and then calls `pump` again, so sync and async runs share
every line of dispatch. A short retry back-off (`Backoff`) is waited in place by whoever
called `pump`: `sleep` in a sync run, `asleep` (an `asyncio.sleep`) in an async one.
Checkpoints never reach the pump unless the run stops there: the engine asks the driver at
each one (`Execution.stop`) and yields a `Checkpoint` only to stop.

A sync step of a concurrent container's lane asks for its call to start on the Runtime's
executor (`Offload`, answered by `start`: see executors.py) and is answered at once with its
future; the container then yields a `Select` of what its lanes wait for, those futures and
async steps' `Await`s. A sync run waits for the futures in place; the first `Await` among them
makes the run async, and then everything in flight is awaited together on the event loop. The
executor and the event loop are the driver's: the engine owns neither. A `start` that holds
the calls to send them together (executors.py `Batch`) has a `flush`, which the pump calls
before it waits for anything.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeAlias, TypeVar

from tarry.drivers.drive.outcome import Outcome
from tarry.engine.context import Interrupted
from tarry.engine.errors import AsyncInSyncContext
from tarry.engine.failure import NodeFailure
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.observed import WATCHER, await_in_lane
from tarry.engine.signals import Await, Backoff, Checkpoint, Offload, Pause, PauseMany, Select

T = TypeVar("T")
AwaitableOrValue: TypeAlias = Awaitable[T] | T  # TypeAlias: else mypy reads a variable

DONE, PAUSED, STOPPED, FAILED = "done", "paused", "stopped", "failed"
Result = tuple[str, Any]


Wanted = Await | Backoff | Offload | Select
#: Starts a lane's sync step (`Executors.start`): the future of its result.
Start = Callable[[Offload], Any]


def pump(
    gen: Generator[Any, Any, Any], value: Any, throw: BaseException | None = None
) -> Result | Wanted:
    """Send `value` (or throw `throw`) into `gen` and return what it comes to: it returned,
    failed, paused or stopped at a checkpoint, or needs something awaited, waited for or
    started."""
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
    if kind is Await or kind is Backoff or kind is Select or kind is Offload:
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
    asynchronous: bool,
    start: Start,
) -> AwaitableOrValue[T]:
    """Run `gen` to a result and return `finish(result)`; an awaitable of it as soon as an
    async step is met (or a back-off, when the caller is `asynchronous`: it then waits with
    `asleep` rather than blocking its event loop). `start` starts the sync steps of concurrent
    lanes on the Runtime's executor."""
    flush = getattr(start, "flush", None)
    result = pump(gen, None)
    while True:
        kind = type(result)
        if kind is Offload:
            result = pump(gen, start(result))
            continue
        if flush is not None:
            flush()  # the calls started are sent before anything is waited for
        if kind is Backoff and not asynchronous:
            sleep(result.seconds)
            result = pump(gen, None)
        elif kind is Select and _threads_only(result):
            # Sync steps of a concurrent container, on the executor: waited for in place.
            result = pump(gen, _wait_threads(result.items))
        else:
            break
    if kind is Await or kind is Backoff or kind is Select:
        return _pump_async(gen, result, finish, asleep, start)
    return finish(result)


def _threads_only(select: Select) -> bool:
    return all(type(item) is not Await for item in select.items)


def _wait_threads(items: tuple[Any, ...]) -> list[tuple[int, bool, Any]]:
    from concurrent.futures import FIRST_COMPLETED, wait

    wait(items, return_when=FIRST_COMPLETED)
    return [_answer(i, item) for i, item in enumerate(items) if item.done()]


def _answer(position: int, done: Any) -> tuple[int, bool, Any]:
    """What a finished future or task gives a container: (position, True, result) or
    (position, False, exception)."""
    exc = done.exception()
    return (position, False, exc) if exc is not None else (position, True, done.result())


def _awaited(request: Await, path: tuple[Any, ...] | None = None) -> Awaitable[Any]:
    """What to await for an async step: its awaitable, within its timeout. `path`: the step's,
    when it runs in a lane of a concurrent container (as a task of its own), for the records it
    logs."""
    awaitable = request.awaitable
    if request.timeout is not None:
        import asyncio  # only async runs need it; `import tarry` stays light

        awaitable = asyncio.wait_for(awaitable, request.timeout)
    if path is not None and WATCHER.get() is not None:  # logs are captured: whose step it is
        awaitable = await_in_lane(awaitable, path)
    return awaitable


async def _pump_async(
    gen: Generator[Any, Any, Any],
    signal: Wanted,
    finish: Callable[[Result], T],
    asleep: Callable[[float], Awaitable[None]],
    start: Start,
) -> T:
    # The tasks of a concurrent container's Select, by the identity of what they wait for: a
    # Select asks again for what is still in flight, which must not be awaited twice.
    tasks: dict[int, Any] = {}
    flush = getattr(start, "flush", None)
    while True:
        kind = type(signal)
        if flush is not None and kind is not Offload:
            flush()  # the calls started are sent before anything is awaited
        if kind is Offload:
            result = pump(gen, start(signal))
        elif kind is Backoff:
            await asleep(signal.seconds)
            result = pump(gen, None)
        elif kind is Select:
            result = pump(gen, await _select(signal, tasks))
        else:
            try:
                value = await _awaited(signal)
            except (Exception, Interrupted) as exc:
                result = pump(gen, None, throw=exc)
            else:
                result = pump(gen, value)
        kind = type(result)
        if kind is not Await and kind is not Backoff and kind is not Select and kind is not Offload:
            done = finish(result)
            # `finish` may go on with another generator (a flow's cleanup, see drive.py),
            # which may hand back an awaitable of its own.
            return await done if is_awaitable(done) else done  # type: ignore[no-any-return]
        signal = result


async def _select(select: Select, tasks: dict[int, Any]) -> list[tuple[int, bool, Any]]:
    """Wait until at least one of the select's items (`Await`s, calls on the executor) has
    finished."""
    import asyncio

    items = select.items
    mine = []
    for i, item in enumerate(items):
        task = tasks.get(id(item))
        if task is None:
            if type(item) is Await:
                task = asyncio.ensure_future(_awaited(item, select.paths[i]))
            else:  # a call on the executor
                task = asyncio.wrap_future(item)
            tasks[id(item)] = task
        mine.append(task)
    await asyncio.wait(mine, return_when=asyncio.FIRST_COMPLETED)
    answers = []
    for i, task in enumerate(mine):
        if task.done():
            del tasks[id(items[i])]
            answers.append(_answer(i, task))
    return answers


# The sync entry points' side: from `AwaitableOrValue` to a value.


def settle(result: AwaitableOrValue[Outcome]) -> Outcome:
    """The outcome itself, or the awaitable's, driven to its end on a private event loop."""
    if not is_awaitable(result):
        return result  # type: ignore[return-value]
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(result)  # type: ignore[arg-type]
    finally:
        loop.close()


def settle_many(result: Any) -> Any:
    """A list of outcomes, or the awaitable's, driven on a private event loop (see settle)."""
    if not is_awaitable(result):
        return result
    return settle(result)


def refuse_in_loop(name: str, instead: str) -> None:
    """AsyncInSyncContext when a sync entry point is called inside a running event loop."""
    if "asyncio" not in sys.modules:
        return  # no event loop can be running in a process that never imported asyncio
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    msg = f"{name}() was called inside a running event loop; use `await runtime.{instead}(...)`"
    raise AsyncInSyncContext(msg)
