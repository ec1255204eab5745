"""BatchRequest: one request of a provider's batch API, waiting for its result.

The element is a keyed Wait (`kind="external"`): it pauses with `reason="batch:<via>"`, its
body in the payload and its key (the provider's `custom_id`) on the wait; the driver's batch
round (drivers/batches/) gathers such waits, submits them, and delivers each result to its key.
A delivered error (`{BATCH_ERROR: {...}}`) fails the element with `BatchItemFailed`, retryable:
resuming the session runs the element again, which waits again and is submitted again.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from tarry.engine.context import Scope
from tarry.engine.describe import describe
from tarry.engine.elements.element import Signal, check_name
from tarry.engine.elements.waits import _key, _text, _Waiting
from tarry.engine.errors import BatchItemFailed, InvalidBatchRequest, InvalidFlow, NotSerializable
from tarry.engine.execution import Execution
from tarry.engine.failure import completed, fail
from tarry.engine.short_hash import short_hash
from tarry.engine.signals import NO_MAIL, Pause
from tarry.engine.state import events as ev

#: The one key of a delivered value that carries a provider's error for a request instead of
#: its response body (what the batch round and `tarry deliver --format` deliver).
BATCH_ERROR = "tarry_batch_error"

#: What a BatchRequest's pause reason starts with; the adapter's name follows.
REASON = "batch:"


def _body(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("a dict (one request of the provider's batch format)")
    # Imported when a BatchRequest is first built: `import tarry` loads no JSON library.
    import json

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a dict that JSON can carry ({exc})") from None
    return value


def batch_key(session_id: str, path: tuple[Any, ...]) -> str:
    """The default key (custom_id) of the BatchRequest at `path` of a session: stable across
    retries, re-runs and processes, 35 characters of [a-z0-9-]."""
    return "tb-" + short_hash(f"{session_id}\x00{path!r}")


def error_of(value: Any) -> Any:
    """The provider's error a delivered value carries, or None for a response body."""
    if type(value) is dict and len(value) == 1 and BATCH_ERROR in value:
        return value[BATCH_ERROR]
    return None


class BatchRequest(_Waiting):
    """`BatchRequest(name, body, *, via, key=None)`: send `body` (a dict, or `fn(ctx)`) as one
    request of the batch API of the adapter registered as `via` (`Runtime(batches={via: ...})`)
    and pause (`kind="external"`) until its result arrives. The output is the provider's
    response body; a provider error fails the element with `BatchItemFailed` (retryable).
    `key` (a str or `fn(ctx)`; by default derived from the session and the path) is the
    provider's `custom_id`. A body the provider's format cannot carry, an unknown `via`, or a
    key over the provider's limit fails the element at once with `InvalidBatchRequest`."""

    kind = "wait"
    what = "BatchRequest"
    pause_kind = "external"
    # A computed body is checked in `_evaluate` (InvalidBatchRequest); a literal one here.
    _checks = {"body": lambda value: value, "via": _text, "key": _key}

    def __init__(self, name: str, body: Any, *, via: Any, key: Any = None) -> None:
        self.name = check_name(name, "BatchRequest")
        self._args = {}
        if not callable(body):
            try:
                _body(body)
            except ValueError as exc:
                msg = f"BatchRequest {self.name!r}: body must be {exc} (got {describe(body)})"
                raise InvalidFlow(msg) from None
        self.body = self._argument("body", body)
        self.via = self._argument("via", via)
        self.key = self._argument("key", key)

    def _evaluate(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, dict[str, Any]]:
        args = yield from super()._evaluate(ex, path, prev, scope)
        if args["key"] is None:
            args = {**args, "key": batch_key(ex.session_id, path)}
        problem = None
        try:
            _body(args["body"])
        except ValueError as exc:
            problem = f"body must be {exc} (got {describe(args['body'])})"
        check = ex.batch_check
        if problem is None and check is not None:
            problem = check(args["via"], args["key"], args["body"])
        if problem is not None:
            msg = f"BatchRequest {self.name!r}: {problem}"
            raise fail(ex, path, InvalidBatchRequest(msg), retryable=False)
        return args

    def _pause(self, ex: Execution, path: tuple[Any, ...], args: dict[str, Any]) -> Pause:
        payload = {"via": args["via"], "body": args["body"]}
        return Pause("external", REASON + args["via"], path, payload, None, None, key=args["key"])

    def _delivered(self, ex: Execution, args: dict[str, Any]) -> Any:
        if ex.mailbox is None:
            return NO_MAIL
        return ex.mailbox(args["key"])

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        ex.emit(ev.NODE_STARTED, path, {"kind": self.kind})
        values = ex.scope(path).resume_values
        data = None
        key = None
        if values:
            value = values[0]
        else:
            args = yield from self._evaluate(ex, path, prev, scope)
            key = args["key"]
            value = self._delivered(ex, args)
            if value is NO_MAIL:
                yield self._pause(ex, path, args)
                msg = "a paused element was sent a value; resume builds a new run instead"
                raise RuntimeError(msg)
            data = {"delivered": True}
            # Taken with the save that records this element's end, failed or completed.
            ex.mail_taken.append(key)
        error = error_of(value)
        if error is not None:
            if values:
                # The session keeps its resume values until the element completes: this one is
                # spent, so that a retry waits (and is submitted) again.
                ex.emit(ev.NODE_RETRYING, path, {"attempt": 1, "delay": 0.0, "spent": True})
            msg = f"BatchRequest {self.name!r}: the provider answered with an error: {describe(error)}"
            raise fail(ex, path, BatchItemFailed(msg, key=key, error=error), retryable=True)
        try:
            output, size = ex.take(value, (path, "output"))
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
        completed(ex, path, output, size, data)
        return output
