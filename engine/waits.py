"""Elements that pause the run until resumed: Wait, Gate, Sleep."""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime, timedelta
from typing import Any

import attrs

from . import events as ev
from .context import Scope
from .describe import describe
from .element import Element, Signal, check_name
from .errors import InvalidFlow, InvalidResumeValue, NotSerializable
from .execution import Execution
from .failure import completed, fail
from .signals import Pause

PAUSE_KINDS = ("human", "external", "system")


def _check_timeout(owner: str, timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        msg = f"{owner}: timeout must be a positive number of seconds (got {timeout!r})"
        raise InvalidFlow(msg)
    return float(timeout)


@attrs.frozen
class Expiry:
    """What happens when a waiting element's timeout passes: the run goes on with `value`, or,
    when `error` is set, fails with an error of that type."""

    value: Any = None
    error: str | None = None
    message: str = ""


class _Waiting(Element):
    """Pauses once; on resume, completes with the (accepted) resume value."""

    pause_kind = "external"
    timeout: float | None = None

    def _pause(self, ex: Execution, path: tuple[Any, ...]) -> Pause:
        raise NotImplementedError

    def accept(self, value: Any) -> Any:
        """The output for a resume `value`, or InvalidResumeValue. Called before a resume commits."""
        return value

    def expire(self) -> Expiry:
        """What the element does when its timeout has passed (see `Expiry`)."""
        return Expiry(None)

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        ex.emit(ev.NODE_STARTED, path, {"kind": self.kind})
        values = ex.scope(path).resume_values
        if not values:
            yield self._pause(ex, path)
            msg = "a paused element was sent a value; resume builds a new run instead"
            raise RuntimeError(msg)
        try:
            output, size = ex.take(self.accept(values[0]), (path, "output"))
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
        completed(ex, path, output, size)
        return output


class Wait(_Waiting):
    """Pause until resumed with a value (`kind="external"` by default); the output is the value."""

    kind = "wait"

    def __init__(
        self,
        name: str,
        *,
        kind: str = "external",
        reason: str = "",
        payload: Any = None,
        timeout: float | None = None,
        on_timeout: Any = "fail",
    ) -> None:
        self.name = check_name(name, "Wait")
        if kind not in PAUSE_KINDS:
            msg = f"Wait {name!r}: kind must be one of {PAUSE_KINDS} (got {kind!r})"
            raise InvalidFlow(msg)
        self.pause_kind = kind
        self.reason = reason
        self.payload = payload
        self.timeout = _check_timeout(f"Wait {name!r}", timeout)
        # on_timeout: "fail", or any other value, which becomes the output when time runs out.
        self.on_timeout = on_timeout

    def _pause(self, ex: Execution, path: tuple[Any, ...]) -> Pause:
        expires = ex.now() + timedelta(seconds=self.timeout) if self.timeout else None
        return Pause(self.pause_kind, self.reason, path, self.payload, None, expires)

    def expire(self) -> Expiry:
        if isinstance(self.on_timeout, str) and self.on_timeout == "fail":
            msg = f"Wait {self.name!r} timed out after {self.timeout:g} s with no value"
            return Expiry(error="wait_timeout", message=msg)
        return Expiry(self.on_timeout)


class Gate(_Waiting):
    """Pause for a human decision: `{"approved": bool, "by": str?, "comment": str?}` or a bool."""

    kind = "gate"
    pause_kind = "human"

    def __init__(
        self,
        name: str,
        message: str = "",
        *,
        assignee: str | None = None,
        timeout: float | None = None,
        on_timeout: str = "reject",
    ) -> None:
        self.name = check_name(name, "Gate")
        self.message = message
        self.assignee = assignee
        self.timeout = _check_timeout(f"Gate {name!r}", timeout)
        if on_timeout not in ("approve", "reject"):
            msg = f"Gate {name!r}: on_timeout must be 'approve' or 'reject' (got {on_timeout!r})"
            raise InvalidFlow(msg)
        self.on_timeout = on_timeout

    def _pause(self, ex: Execution, path: tuple[Any, ...]) -> Pause:
        expires = ex.now() + timedelta(seconds=self.timeout) if self.timeout else None
        payload = {"message": self.message, "assignee": self.assignee}
        return Pause("human", self.message, path, payload, None, expires)

    def expire(self) -> Expiry:
        if self.on_timeout == "approve":
            return Expiry({"approved": True, "by": "timeout"})
        msg = f"Gate {self.name!r} got no decision within {self.timeout:g} s"
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
    pause_kind = "system"

    def __init__(self, name: str, seconds: float | None = None, *, until: datetime | None = None):
        self.name = check_name(name, "Sleep")
        if (seconds is None) == (until is None):
            msg = f"Sleep {name!r}: give exactly one of seconds or until"
            raise InvalidFlow(msg)
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0
        ):
            msg = f"Sleep {name!r}: seconds must be a number >= 0 (got {seconds!r})"
            raise InvalidFlow(msg)
        if until is not None and (not isinstance(until, datetime) or until.tzinfo is None):
            msg = f"Sleep {name!r}: until must be a timezone-aware datetime (got {until!r})"
            raise InvalidFlow(msg)
        self.seconds = seconds
        self.until = until

    def _pause(self, ex: Execution, path: tuple[Any, ...]) -> Pause:
        wake = self.until if self.until is not None else ex.now() + timedelta(seconds=self.seconds)
        return Pause("system", "sleep", path, None, wake, None)

    def accept(self, value: Any) -> None:
        return None
