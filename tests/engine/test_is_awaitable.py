"""`is_awaitable`, the one test of awaitability the engine and the driver share."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from tarry import Flow, Runtime, step
from tarry.engine.is_awaitable import is_awaitable


class Waitable:
    def __await__(self) -> Generator[Any, None, int]:
        yield from ()
        return 1


def test_coroutines_futures_and_awaitable_objects_are_awaitable() -> None:
    async def coro() -> None:
        return None

    c = coro()
    assert is_awaitable(c)
    c.close()
    loop = asyncio.new_event_loop()
    try:
        assert is_awaitable(loop.create_future())
    finally:
        loop.close()
    assert is_awaitable(Waitable())


def test_plain_values_and_classes_are_not() -> None:
    for value in (None, 1, "x", [], {}, Waitable, asyncio.Future, object()):
        assert not is_awaitable(value)


def test_a_step_returning_an_awaitable_class_fails_in_a_sync_run() -> None:
    # The class is the step's output, not something to await: the run stays sync and the
    # failure names the output, rather than a TypeError from awaiting a class.
    out = Runtime().run(Flow("f", [step(lambda ctx: Waitable, "s")]))
    assert out.failed
    assert out.error is not None and "s['output']" in out.error.message
