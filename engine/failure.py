"""How a failing node travels up the generator chain to the driver."""

from __future__ import annotations

from typing import Any

from tarry.engine.bounds import ENTRY_BYTES, INLINE, MARKER_BYTES
from tarry.engine.errors import PayloadTooLarge, SnapshotTooLarge, TarryError
from tarry.engine.execution import Execution
from tarry.engine.state import events as ev
from tarry.engine.state.records import ErrorInfo
from tarry.engine.state.reducer import error_to_data


class NodeFailure(Exception):
    """Raised by a node that failed; containers let it pass, the driver turns it into an outcome."""

    def __init__(self, error: ErrorInfo) -> None:
        self.error = error
        super().__init__(error.message)


#: The most characters of an error's message and of its traceback a session keeps: a failed
#: session's snapshot is its state plus its error, and stays readable however large the
#: exception's text (the message keeps its start, the traceback its end, where the error is).
MAX_ERROR_TEXT = 8192


def _head(text: str) -> str:
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[:MAX_ERROR_TEXT]}... ({len(text) - MAX_ERROR_TEXT} more characters)"


def _tail(text: str) -> str:
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"({len(text) - MAX_ERROR_TEXT} characters before) ...{text[-MAX_ERROR_TEXT:]}"


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
    began: int | None = None,
) -> NodeFailure:
    """Record `node.failed` for `exc` at `path` and return the exception to raise.

    `retryable` defaults to: a tarry error about the flow or a value will fail again
    unchanged, user code may not. `began`: when the attempt's call began on a pool thread
    (ns), recorded for stats as a completion's is.
    """
    error = ErrorInfo(
        type=error_type(exc),
        message=_head(str(exc)),
        path=path,
        retryable=not isinstance(exc, TarryError) if retryable is None else retryable,
        attempts=attempt,
        traceback=_tail("".join(_format(exc))),
    )
    return record_failure(ex, error, metrics=metrics, began=began)


def record_failure(
    ex: Execution,
    error: ErrorInfo,
    *,
    metrics: dict[str, float] | None = None,
    began: int | None = None,
) -> NodeFailure:
    """Emit `node.failed` for `error` (at `error.path`) and return the exception to raise."""
    data: dict[str, Any] = {"error": error_to_data(error), "attempt": max(error.attempts, 1)}
    if metrics:
        data["metrics"] = metrics
    if began is not None:
        data["began"] = began
    ex.emit(ev.NODE_FAILED, error.path, data)
    return NodeFailure(error)


def admit(
    ex: Execution,
    type: str,
    path: tuple[Any, ...],
    data: dict[str, Any],
    size: int,
    metrics: dict[str, float] | None = None,
) -> None:
    """Let the node at `path` record the event (type, path, data), which adds at most `size`
    bytes to the state, or fail it with SnapshotTooLarge: the session keeps what it held and a
    token, and no snapshot, a completed one included, is larger than `max_snapshot_bytes`."""
    if not ex.fits(size, type, path, data):
        limit = ex.bounds.state
        where = "/".join(map(str, path)) or "the flow"
        exc = SnapshotTooLarge(ex.session_id, limit - ex.room, limit, where)
        raise fail(ex, path, exc, metrics=metrics)


def completed(
    ex: Execution,
    path: tuple[Any, ...],
    output: Any,
    size: int,
    data: dict[str, Any] | None = None,
) -> None:
    """A container completes with `output` (`size` bytes encoded; `data`: more of the event's
    data): counted in the state, and recorded."""
    data = {"output": output, **data} if data else {"output": output}
    held = size > INLINE and len(path) == 1  # a large top-level output
    kept = size - hold(data, size) if held else size
    admit(ex, ev.NODE_COMPLETED, path, data, kept + ENTRY_BYTES + len(str(path[-1])))
    ex.out_value = output
    ex.out_size = size
    seq = ex.emit(ev.NODE_COMPLETED, path, data)
    if held:
        ex.held[seq] = output


def hold(data: dict[str, Any], size: int) -> int:
    """Mark the output of `data` (a top-level element's, `size` bytes encoded) to be kept out of
    the state (see state.OutOfLine); returns the bytes the state is spared."""
    data["out_of_line"] = True
    return size - MARKER_BYTES


def check_gathered(ex: Execution, path: tuple[Any, ...], size: int, note: str = "") -> None:
    """Fail the container at `path` with PayloadTooLarge if the output it gathers (`size`
    bytes, encoded) is larger than one value may be."""
    limit = ex.bounds.value
    if size > limit:
        where = f"{'/'.join(map(str, path))}['output']{note}"
        raise fail(ex, path, PayloadTooLarge(where, size, limit))


def _format(exc: BaseException) -> list[str]:
    import traceback  # only when a step fails: `import tarry` does not load it

    return traceback.format_exception(exc)
