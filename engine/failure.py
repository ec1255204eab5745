"""How a failing node travels up the generator chain to the driver."""

from __future__ import annotations

from typing import Any

from . import events as ev
from .errors import TarryError
from .execution import Execution
from .reducer import error_to_data
from .state import ErrorInfo


class NodeFailure(Exception):
    """Raised by a node that failed; containers let it pass, the driver turns it into an outcome."""

    def __init__(self, error: ErrorInfo) -> None:
        self.error = error
        super().__init__(error.message)


def error_type(exc: BaseException) -> str:
    return type(exc).__name__


def fail(
    ex: Execution,
    path: tuple[Any, ...],
    exc: BaseException,
    *,
    attempt: int = 1,
    metrics: dict[str, float] | None = None,
    retryable: bool | None = None,
) -> NodeFailure:
    """Record `node.failed` for `exc` at `path` and return the exception to raise.

    `retryable` defaults to: a tarry error about the flow or a value will fail again
    unchanged, user code may not.
    """
    error = ErrorInfo(
        type=error_type(exc),
        message=str(exc),
        path=path,
        retryable=not isinstance(exc, TarryError) if retryable is None else retryable,
        attempts=attempt,
        traceback="".join(_format(exc)),
    )
    return record_failure(ex, error, metrics=metrics)


def record_failure(
    ex: Execution, error: ErrorInfo, *, metrics: dict[str, float] | None = None
) -> NodeFailure:
    """Emit `node.failed` for `error` (at `error.path`) and return the exception to raise."""
    data: dict[str, Any] = {"error": error_to_data(error), "attempt": max(error.attempts, 1)}
    if metrics:
        data["metrics"] = metrics
    ex.emit(ev.NODE_FAILED, error.path, data)
    return NodeFailure(error)


def _format(exc: BaseException) -> list[str]:
    import traceback  # only when a step fails: `import tarry` does not load it

    return traceback.format_exception(exc)
