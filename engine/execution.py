"""One run of a flow in progress: the live state, its new events, and the driver's services.

`Execution` is the only object the element generators talk to. It turns what they report into
events, folds each through the reducer and keeps them for the driver to persist. What touches
storage or encoding (`ledger`, `check`) is injected by the driver: the engine imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from .events import Event
from .reducer import apply
from .state import ContainerFrame, SessionState


class Ledger(Protocol):
    """Out-of-line storage for a ForEach's items and results, addressed by container path."""

    def put_items(self, path: tuple[Any, ...], items: list[Any]) -> None: ...
    def item(self, path: tuple[Any, ...], index: int) -> Any: ...
    def put_result(self, path: tuple[Any, ...], index: int, value: Any) -> None: ...
    def results(self, path: tuple[Any, ...], stop: int) -> list[Any]: ...


def _no_check(value: Any, where: Any) -> None:
    return None


class Execution:
    """The live side of a session while its generator tree runs."""

    __slots__ = (
        "session_id", "state", "now", "log", "restoring", "ledger", "check", "listener", "retry",
    )

    def __init__(
        self,
        state: SessionState,
        *,
        now: Callable[[], datetime],
        ledger: Ledger,
        check: Callable[[Any, Any], None] = _no_check,
        listener: Callable[[Event], None] | None = None,
        retry: Any = None,
    ) -> None:
        self.session_id = state.session_id
        self.state = state
        self.now = now
        self.log: list[Event] = []
        # Frames of the containers to fast-forward into, by path; emptied as they are entered.
        self.restoring: dict[tuple[Any, ...], ContainerFrame] = {
            frame.path: frame for frame in state.container_stack
        }
        self.ledger = ledger
        #: check(value, where) raises NotSerializable unless the codec can encode `value`;
        #: `where` is a str, or a (path, key) pair formatted only if the check fails.
        self.check = check
        self.listener = listener
        #: The retry policy of steps that have none of their own (the Runtime's default).
        self.retry = retry

    def emit(self, type: str, path: tuple[Any, ...], data: dict[str, Any]) -> Event:
        """Record one event: fold it into the live state and keep it for the driver."""
        state = self.state
        event = Event(state.last_seq + 1, type, self.session_id, self.now(), path, data)
        # The live state is ours alone: the reducer may update its dicts in place.
        self.state = apply(state, event, True)
        self.log.append(event)
        if self.listener is not None:
            self.listener(event)
        return event

    def take_frame(self, path: tuple[Any, ...]) -> ContainerFrame | None:
        """The frame this container left when the run stopped, if it is being resumed."""
        if self.restoring:
            return self.restoring.pop(path, None)
        return None
