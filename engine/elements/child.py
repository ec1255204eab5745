"""Child: a flow started as a session of its own, which the element waits for.

A `Child` reached asks the driver to start the child session (`Execution.children`): the
driver stores it queued, due at once, so that any process or worker sharing the store runs it
(a worker's timers round claims it like a due timer). The parent's lane then waits, holding no
process, on the child's end key (`end_key`): the save that ends the child queues its end there
(completed, failed or cancelled: `child_end`) in the same transaction, and that message resumes
the parent through the road of keyed delivery, exactly once. A child that ended before its
parent waited (a parent re-run after a crash, a child faster than its parent's save) is found
as it is: its end is taken at once and the element does not pause.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from tarry.engine.context import Scope
from tarry.engine.describe import describe
from tarry.engine.elements.element import Signal, check_name
from tarry.engine.elements.flow import Flow
from tarry.engine.elements.waits import _anything, _Waiting
from tarry.engine.errors import (
    ChildFailed,
    InvalidFlow,
    InvalidResumeValue,
    NotSerializable,
    TarryError,
)
from tarry.engine.execution import Execution
from tarry.engine.failure import completed, fail, record_failure
from tarry.engine.signals import NO_MAIL, Pause
from tarry.engine.state import events as ev
from tarry.engine.state.records import ErrorInfo

#: The prefix of the key a child's end is queued on: `end_key(child id)`.
END_KEY_PREFIX = "tarry/child/"

#: How a child ended, as its end message says (`child_end`).
ENDINGS = ("completed", "failed", "cancelled")


def end_key(session_id: str) -> str:
    """The key a child session's end is queued on, which its parent's lane waits on."""
    return END_KEY_PREFIX + session_id


def child_end(
    session_id: str, status: str, output: Any = None, error: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The message that a child's end queues for its parent: the child, its status and its
    output (or its error as data, when it failed)."""
    end: dict[str, Any] = {"session_id": session_id, "status": status}
    if status == "completed":
        end["output"] = output
    elif status == "failed":
        end["error"] = dict(error or {})
    return end


def _session_id(value: Any) -> str | None:
    if value is not None and (type(value) is not str or not value):
        raise ValueError("a non-empty str or None")
    return value


class Child(_Waiting):
    """Start `flow` as a session of its own and wait until it ends; its output is the child's.

    `input`: the child's input, a value or `fn(ctx)` (None by default, as `run(flow)` gives).
    `session_id`: the child's id, a str
    or `fn(ctx)`; by default derived from the parent's session id and the element's path, so a
    re-run after a crash finds the same child and never starts a second one.

    A failed child fails the element with `ChildFailed` (the child's error inside); a
    cancelled one fails it with an error of type "child_cancelled". Neither is retried: the
    child is the same session on a retry, and has ended (resume the child itself, then the
    parent, to go on). The child records its parent (`SessionView.parent`); the parent lists
    it (`SessionView.children`); cancelling or aborting the parent does the same to it."""

    kind = "child"
    what = "Child"
    pause_kind = "system"
    _checks = {"input": _anything, "session_id": _session_id}

    def __init__(self, name: str, flow: Any, input: Any = None, *, session_id: Any = None):
        self.name = check_name(name, "Child")
        if not isinstance(flow, Flow):
            msg = f"Child {name!r}: flow must be a Flow (got {describe(flow)})"
            raise InvalidFlow(msg)
        self.flow = flow
        self._args = {}
        self.input = self._argument("input", input)
        self.session_id = self._argument("session_id", session_id)

    def _describe(self) -> tuple[Any, ...]:
        # The child's flow by name: the parent waits for it, whatever its steps are (the
        # child session keeps its own fingerprint).
        return (self.kind, self.name, self.flow.name)

    def accept(self, value: Any) -> Any:
        if (
            not isinstance(value, dict)
            or value.get("status") not in ENDINGS
            or (value["status"] == "failed" and not isinstance(value.get("error"), dict))
        ):
            msg = (
                f"Child {self.name!r}: a resume value must be a child's end, a dict with a "
                f"'status' of {ENDINGS} (got {describe(value)})"
            )
            raise InvalidResumeValue(msg)
        return value

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        ex.emit(ev.NODE_STARTED, path, {"kind": self.kind})
        values = ex.scope(path).resume_values
        taken = False
        if values:
            end = values[0]
            child = end.get("session_id")
            if end.get("status") != "completed" and ex.children is not None:
                # A failed or cancelled child's end. Met again when the parent, failed here,
                # is resumed: the child may have been resumed since, so its end is read again
                # (a child that still failed fails the element again; one that is not there
                # any more leaves this end as it is). Nothing is started here.
                try:
                    _, latest, known = ex.children(path, child, self.flow, None, lookup=True)
                except TarryError as exc:
                    raise fail(ex, path, exc) from exc
                if known:
                    end, taken = self._latest(ex, child, latest)
                    if end is NO_MAIL:  # resumed, and not ended again: wait for its end
                        yield from self._wait(path, child)
        else:
            args = yield from self._evaluate(ex, path, prev, scope)
            if ex.children is None:
                msg = f"Child {self.name!r}: this run has no driver that starts child sessions"
                raise fail(ex, path, InvalidFlow(msg))
            try:
                child, end, known = ex.children(path, args["session_id"], self.flow, args["input"])
            except TarryError as exc:  # an id no store can hold or taken, an input too large
                raise fail(ex, path, exc) from exc
            if known:
                # It existed already (this element runs again, after a crash): its end may be
                # queued for us, and is taken from there (consumed with our next write) rather
                # than left behind; else, if it ended, its end comes from its record.
                end, taken = self._latest(ex, child, end)
            if end is NO_MAIL:
                yield from self._wait(path, child)
        try:
            end = self.accept(end)
        except InvalidResumeValue as exc:  # a message on its key that is no child's end
            raise fail(ex, path, exc) from exc
        return self._ended(ex, path, end, child, taken)

    @staticmethod
    def _latest(ex: Execution, child: str, end: Any) -> tuple[Any, bool]:
        """The end of the existing `child` to go on with: its end queued for the parent (taken,
        consumed with the next write), else `end` (from its record, or NO_MAIL while it has
        not ended); and whether it was taken from the mailbox."""
        if ex.mailbox is not None:
            mail = ex.mailbox(end_key(child))
            if mail is not NO_MAIL:
                return mail, True
        return end, False

    def _wait(self, path: tuple[Any, ...], child: str) -> Generator[Signal, Any, Any]:
        """Pause until the child's end arrives on its end key (a resume builds a new run)."""
        payload = {"session_id": child, "flow": self.flow.name}
        yield Pause("system", "child", path, payload, None, None, key=end_key(child))
        msg = "a paused element was sent a value; resume builds a new run instead"
        raise RuntimeError(msg)

    def _ended(
        self, ex: Execution, path: tuple[Any, ...], end: dict[str, Any], child: Any, taken: bool
    ) -> Any:
        status = end["status"]
        if status == "failed":
            raise fail(ex, path, ChildFailed(str(child), end.get("error")), retryable=False)
        if status == "cancelled":
            msg = f"child session {child!r} was cancelled"
            error = ErrorInfo(type="child_cancelled", message=msg, path=path, retryable=False)
            raise record_failure(ex, error)
        try:
            output, size = ex.take(end.get("output"), (path, "output"))
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
        data: dict[str, Any] = {"child": child}
        if taken:
            data["delivered"] = True
        completed(ex, path, output, size, data)
        if taken:
            ex.mail_taken.append(end_key(child))
        return output
