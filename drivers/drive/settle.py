"""From `AwaitableOrValue` to a value: the sync entry points' side of the one pump."""

from __future__ import annotations

import sys
from typing import Any

from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue
from tarry.engine.errors import AsyncInSyncContext
from tarry.engine.is_awaitable import is_awaitable


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
