"""Whether a value is awaitable: one test for the engine and the driver alike."""

from __future__ import annotations

from typing import Any


def is_awaitable(value: Any) -> bool:
    """True if `value` can be passed to an `await` expression: a coroutine, a task, a future,
    any object whose class defines `__await__`.

    Checking for an `__await__` attribute is much faster than `inspect.isawaitable` (an
    isinstance test against `collections.abc.Awaitable`), as graphql-core's
    `pyutils/is_awaitable.py` explains. The attribute alone would also accept a class that
    defines `__await__` (its instances are awaitable, the class is not): a step that returned
    such a class would then make a sync run async, and fail when awaited with a TypeError that
    says nothing of the step. So a class is a plain value here, as it is to
    `inspect.isawaitable`; the step then fails with NotSerializable naming its output. The
    test costs nothing on the common path: `isinstance` runs only for what has `__await__`.
    The driver's side (an outcome or the awaitable of one) never meets a class.
    """
    return hasattr(value, "__await__") and not isinstance(value, type)
