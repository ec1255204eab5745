"""Calling a container's own user callables (`items`, `when`, `until`) as part of the container."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from tarry.engine.context import Context, Interrupted, Scope, context_for
from tarry.engine.elements.element import Signal
from tarry.engine.errors import InvalidFlow
from tarry.engine.execution import Execution
from tarry.engine.failure import fail
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.signals import Await


def evaluate(
    ex: Execution,
    path: tuple[Any, ...],
    fn: Callable[[Context], Any],
    prev: Any,
    scope: Scope,
) -> Generator[Signal, Any, Any]:
    """Call `fn(ctx)`; a failure fails the container at `path`. Async callables are awaited."""
    ctx = context_for(prev)(ex, path, prev, scope)
    try:
        value = fn(ctx)
        if is_awaitable(value):
            value = yield Await(value)
    except Interrupted:
        ex.at = None  # user code ran: the next event reads the clock
        exc = InvalidFlow(f"{'/'.join(map(str, path))}: only steps may call ctx.interrupt")
        raise fail(ex, path, exc) from None
    except Exception as exc:
        ex.at = None
        raise fail(ex, path, exc) from exc
    ex.at = None
    return value


def check_callable(value: Any, what: str) -> Any:
    if not callable(value):
        msg = f"{what} must be a callable taking ctx (got {value!r})"
        raise InvalidFlow(msg)
    return value
