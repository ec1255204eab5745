"""Elements that pause the run until resumed: Wait, Gate, Sleep.

Every argument but `name` and `on_timeout` may be a callable `fn(ctx)` (sync or async),
evaluated once, when the element is reached: a literal is checked when the flow is built, a
callable's result when it is evaluated (a bad one fails the element with InvalidFlow, resumable
like any failure). What the pause records (reason, payload, key, wake_at, expires_at, the
action on timeout) is the evaluated value: a resume, a timer or a timeout in another process
reads it from the session's pause, never from the flow, so nothing is evaluated again.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from datetime import datetime, timedelta
from typing import Any

import attrs
from tarry.engine.containers._callables import evaluate
from tarry.engine.context import Scope
from tarry.engine.describe import describe
from tarry.engine.elements.element import Element, Signal, check_name
from tarry.engine.errors import InvalidArgument, InvalidFlow, InvalidResumeValue, NotSerializable
from tarry.engine.execution import Execution
from tarry.engine.failure import completed, fail
from tarry.engine.keys import key_problem
from tarry.engine.signals import NO_MAIL, Pause
from tarry.engine.state import events as ev
from tarry.engine.state.records import PauseState

PAUSE_KINDS = ("human", "external", "system")


# --- checks of the arguments ------------------------------------------------------------------
# Each returns the value to use, or raises ValueError with what it expected: the message then
# reads "must be <expected> (got ...)" for a literal, "returned ..., expected <expected>" for
# a callable's result.


def _timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError("a positive number of seconds")
    return float(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("a str")
    return value


def _text_or_none(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError("a str or None")
    return value


def _key(value: Any) -> str | None:
    if value is None:
        return None
    if (problem := key_problem(value)) is not None:
        raise ValueError(problem)
    key: str = value
    return key


def _kind(value: Any) -> str:
    if value not in PAUSE_KINDS:
        raise ValueError(f"one of {PAUSE_KINDS}")
    kind: str = value  # one of PAUSE_KINDS
    return kind


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError("a number >= 0")
    return value


def _until(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError("a timezone-aware datetime")
    return value


def _anything(value: Any) -> Any:
    return value


def _dynamic(value: Any) -> bool:
    """Whether an argument is `fn(ctx)`, to evaluate when the element is reached."""
    return callable(value) and not isinstance(value, type)


@attrs.frozen
class Expiry:
    """What happens when a waiting element's timeout passes: the run goes on with `value`, or,
    when `error` is set, fails with an error of that type."""

    value: Any = None
    error: str | None = None
    message: str = ""


class _Waiting(Element):
    """Pauses once; on resume, completes with the (accepted) resume value.

    `_args` holds each argument that may be a callable, by name: a checked literal, or the
    callable. `_checks` names the check of each (see above)."""

    pause_kind = "external"
    what = "Waiting"
    _checks: dict[str, Callable[[Any], Any]] = {}
    _args: dict[str, Any]

    def _argument(self, name: str, value: Any) -> Any:
        """Keep argument `name`: a callable as it is, a literal checked (InvalidFlow)."""
        if not _dynamic(value):
            try:
                value = self._checks[name](value)
            except ValueError as exc:
                msg = f"{self.what} {self.name!r}: {name} must be {exc} (got {describe(value)})"
                raise InvalidFlow(msg) from None
        self._args[name] = value
        return value

    def _evaluate(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, dict[str, Any]]:
        """The arguments with every callable called (once, now) and its result checked; a bad
        result fails this element with InvalidFlow naming the argument."""
        args = self._args
        if not any(map(_dynamic, args.values())):
            return args
        values = {}
        for name, arg in args.items():
            if _dynamic(arg):
                result = yield from evaluate(ex, path, arg, prev, scope)
                try:
                    arg = self._checks[name](result)
                except ValueError as exc:
                    msg = (
                        f"{self.what} {self.name!r}: {name} returned {describe(result)}, "
                        f"expected {exc}"
                    )
                    if name == "key":  # computed from data: a retry after a fix may do
                        raise fail(ex, path, InvalidArgument(msg), retryable=True) from None
                    raise fail(ex, path, InvalidFlow(msg)) from None
            values[name] = arg
        return values

    def _pause(self, ex: Execution, path: tuple[Any, ...], args: dict[str, Any]) -> Pause:
        raise NotImplementedError

    def accept(self, value: Any) -> Any:
        """The output for a resume `value`, or InvalidResumeValue. Called before a resume commits."""
        return value

    def expire(self, pause: PauseState | None = None) -> Expiry:
        """What the element does when the timeout of its `pause` has passed (see `Expiry`).
        The pause records the action and the deadline it was reached with; `None` (or a
        pause written before they were recorded) falls back to the element's own."""
        return Expiry(None)

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        ex.emit(ev.NODE_STARTED, path, {"kind": self.kind})
        values = ex.scope(path).resume_values
        data = None
        if values:
            value = values[0]
        else:
            args = yield from self._evaluate(ex, path, prev, scope)
            value = self._delivered(ex, args)
            if value is NO_MAIL:
                yield self._pause(ex, path, args)
                msg = "a paused element was sent a value; resume builds a new run instead"
                raise RuntimeError(msg)
            data = {"delivered": True}
        try:
            output, size = ex.take(self.accept(value), (path, "output"))
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
        completed(ex, path, output, size, data)
        if data is not None:
            ex.mail_taken.append(args["key"])
        return output

    def _delivered(self, ex: Execution, args: dict[str, Any]) -> Any:
        """A value delivered for this element's key before it was reached (the driver's
        mailbox), or NO_MAIL: then it pauses."""
        return NO_MAIL


def _deadline(ex: Execution, timeout: float | None) -> datetime | None:
    return ex.now() + timedelta(seconds=timeout) if timeout else None


def _when(pause: PauseState | None) -> str:
    if pause is None or pause.expires_at is None:
        return "by its deadline"
    return f"by its deadline ({pause.expires_at.isoformat()})"


class Wait(_Waiting):
    """Pause until resumed with a value (`kind="external"` by default); the output is the value.

    With a `key`, the outside world may resume it by that name (`Runtime.deliver`); a value
    delivered for the key before the Wait is reached is taken at once and the Wait does not
    pause (`Execution.mailbox`)."""

    kind = "wait"
    what = "Wait"
    _checks = {
        "kind": _kind,
        "reason": _text,
        "payload": _anything,
        "key": _key,
        "timeout": _timeout,
    }

    def __init__(
        self,
        name: str,
        *,
        kind: Any = "external",
        reason: Any = "",
        payload: Any = None,
        key: Any = None,
        timeout: Any = None,
        on_timeout: Any = "fail",
    ) -> None:
        self.name = check_name(name, "Wait")
        self._args = {}
        kind = self._argument("kind", kind)
        self.pause_kind = kind if isinstance(kind, str) else "external"
        self.reason = self._argument("reason", reason)
        self.payload = self._argument("payload", payload)
        self.key = self._argument("key", key)
        self.timeout = self._argument("timeout", timeout)
        # on_timeout: "fail", or any other value, which becomes the output when time runs out.
        self.on_timeout = on_timeout

    def _action(self) -> Any:
        """The action on timeout as the pause records it: "fail" or {"value": the output}."""
        on = self.on_timeout
        return "fail" if isinstance(on, str) and on == "fail" else {"value": on}

    def _pause(self, ex: Execution, path: tuple[Any, ...], args: dict[str, Any]) -> Pause:
        timeout = args["timeout"]
        action = None
        if timeout:
            action = self._action()
            if type(action) is dict:  # it is recorded with the pause: encodable, and bounded
                try:
                    action["value"], _ = ex.take(action["value"], (path, "on_timeout"))
                except NotSerializable as exc:
                    raise fail(ex, path, exc) from exc
        return Pause(
            args["kind"],
            args["reason"],
            path,
            args["payload"],
            None,
            _deadline(ex, timeout),
            key=args["key"],
            on_timeout=action,
        )

    def _delivered(self, ex: Execution, args: dict[str, Any]) -> Any:
        key = args["key"]
        if key is None or ex.mailbox is None:
            return NO_MAIL
        return ex.mailbox(key)

    def expire(self, pause: PauseState | None = None) -> Expiry:
        action = pause.on_timeout if pause is not None and pause.on_timeout is not None else None
        if action is None:
            action = self._action()
        if type(action) is dict:
            return Expiry(action.get("value"))
        msg = f"Wait {self.name!r} got no value {_when(pause)}"
        return Expiry(error="wait_timeout", message=msg)


class Gate(_Waiting):
    """Pause for a human decision: `{"approved": bool, "by": str?, "comment": str?}` or a bool."""

    kind = "gate"
    what = "Gate"
    pause_kind = "human"
    _checks = {"message": _text, "assignee": _text_or_none, "timeout": _timeout}

    def __init__(
        self,
        name: str,
        message: Any = "",
        *,
        assignee: Any = None,
        timeout: Any = None,
        on_timeout: str = "reject",
    ) -> None:
        self.name = check_name(name, "Gate")
        self._args = {}
        self.message = self._argument("message", message)
        self.assignee = self._argument("assignee", assignee)
        self.timeout = self._argument("timeout", timeout)
        if on_timeout not in ("approve", "reject"):
            msg = f"Gate {name!r}: on_timeout must be 'approve' or 'reject' (got {on_timeout!r})"
            raise InvalidFlow(msg)
        self.on_timeout = on_timeout

    def _pause(self, ex: Execution, path: tuple[Any, ...], args: dict[str, Any]) -> Pause:
        timeout = args["timeout"]
        message = args["message"]
        payload = {"message": message, "assignee": args["assignee"]}
        action = self.on_timeout if timeout else None
        return Pause(
            "human", message, path, payload, None, _deadline(ex, timeout), on_timeout=action
        )

    def expire(self, pause: PauseState | None = None) -> Expiry:
        action = pause.on_timeout if pause is not None and pause.on_timeout else self.on_timeout
        if action == "approve":
            return Expiry({"approved": True, "by": "timeout"})
        msg = f"Gate {self.name!r} got no decision {_when(pause)}"
        return Expiry(error="gate_timeout", message=msg)

    def accept(self, value: Any) -> dict[str, Any]:
        if isinstance(value, bool):
            return {"approved": value}
        if not isinstance(value, dict) or not isinstance(value.get("approved"), bool):
            msg = (
                f"Gate {self.name!r}: a decision must be a bool or a dict with a bool 'approved' "
                f"(got {describe(value)})"
            )
            raise InvalidResumeValue(msg)
        extra = set(value) - {"approved", "by", "comment"}
        if extra:
            msg = (
                f"Gate {self.name!r}: unknown decision keys {describe(sorted(extra, key=describe))} "
                f"(allowed: approved, by, comment)"
            )
            raise InvalidResumeValue(msg)
        for key in ("by", "comment"):
            if key in value and value[key] is not None and not isinstance(value[key], str):
                msg = f"Gate {self.name!r}: decision {key!r} must be a str (got {describe(value[key])})"
                raise InvalidResumeValue(msg)
        return dict(value)


class Sleep(_Waiting):
    """A durable timer: pauses with `kind="system"` and a `wake_at`; the output is `None`."""

    kind = "sleep"
    what = "Sleep"
    pause_kind = "system"
    _checks = {"seconds": _seconds, "until": _until}

    def __init__(self, name: str, seconds: Any = None, *, until: Any = None):
        self.name = check_name(name, "Sleep")
        if (seconds is None) == (until is None):
            msg = f"Sleep {name!r}: give exactly one of seconds or until"
            raise InvalidFlow(msg)
        self._args = {}
        if seconds is not None:
            self.seconds = self._argument("seconds", seconds)
            self.until = None
        else:
            self.seconds = None
            self.until = self._argument("until", until)

    def _pause(self, ex: Execution, path: tuple[Any, ...], args: dict[str, Any]) -> Pause:
        until = args.get("until")
        wake = until if until is not None else ex.now() + timedelta(seconds=args["seconds"])
        return Pause("system", "sleep", path, None, wake, None)

    def accept(self, value: Any) -> None:
        return None
