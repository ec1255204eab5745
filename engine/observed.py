"""What code running inside a flow can learn of where it runs, for whoever watches it (the
driver's log capture, drivers/logs.py), at no cost to a step that nobody asks about.

`WATCHER` is set by the driver once per drive (never per step) in the context the drive runs
in; `STEP_PATH` only where several steps run at once — a concurrent container's lane, whose
sync step is called on a pool thread and whose async step is awaited as a task of its own —
and only while a watcher is set. A sequential step is found from the run itself (`last_path`).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

#: The driver's watcher of this context's drive, or None.
WATCHER: ContextVar[Any] = ContextVar("tarry_watcher", default=None)
#: The path of the lane's step running in this context (a concurrent container's), or None.
STEP_PATH: ContextVar[tuple[Any, ...] | None] = ContextVar("tarry_step_path", default=None)


def last_path(ex: Any) -> tuple[Any, ...]:
    """The path of the run's latest event not yet written: while a sequential step runs, its
    own `node.started` (or `node.retrying`), since nothing else emits until it returns. () when
    the drive has just written its events."""
    try:
        return ex.rows[-1][3]  # type: ignore[no-any-return]  # (seq, type, at, path, data)
    except IndexError:  # written meanwhile (read from another thread)
        return ()


def call_in_lane(fn: Any, ctx: Any) -> Any:
    """A lane's sync step, on a pool thread, inside a copy of the drive's context."""
    STEP_PATH.set(ctx.path)
    return fn(ctx)


async def await_in_lane(awaitable: Any, path: tuple[Any, ...]) -> Any:
    """A lane's async step, as a task of its own (whose context is a copy of the drive's)."""
    STEP_PATH.set(path)
    return await awaitable
