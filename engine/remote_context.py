"""The `ctx` of a step that runs in another process: what it is sent, and what comes back.

A sync step of a concurrent lane runs on the Runtime's executor. On a thread pool it gets the
live `ctx`; an executor of other processes (a process pool, a Dask cluster) gets this picklable
stand-in instead, built in the driving process when the step starts, since nothing there can
call back into the driver while it runs:

- it reads the values of the step's start: `input`, `item`, `index`, `iteration`, `prev`,
  `path`, `attempt`, `session_id`, `idempotency_key` and `state` (copies: changing one in place
  changes nothing in the session, as with the live `ctx`);
- what it does travels back with its result and is applied to the live `ctx` before the step
  completes, so it is recorded exactly as a step run in place: `ctx.state` assignments and
  deletions, `ctx.metric` sums, and `ctx.interrupt` (the resume values it may return are sent
  with it, so a resumed step gets them, in order, as in place);
- `ctx.outputs` is not sent (it may name every output of the flow so far, and each call would
  carry them all): reading it raises `NotSendable`. An `async def` step runs in the driving
  process with the live `ctx`, whatever the executor.

Its `input`, `item`, `prev` and `state` are sent with every call: a large flow input costs its
pickling per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from typing import Any

from tarry.engine.context import Context, Interrupted, SharedState
from tarry.engine.errors import NotSendable


class RemoteContext:
    """`ctx` of a step on an executor of other processes: a snapshot of the step's start, with
    `state`, `metric` and `interrupt` recorded for the driving process (see the module)."""

    __slots__ = (
        "path",
        "prev",
        "item",
        "index",
        "iteration",
        "attempt",
        "session_id",
        "idempotency_key",
        "input",
        "_shared",
        "_resume_values",
        "_state",
        "_metrics",
        "_interrupts",
    )

    def __init__(
        self,
        path: tuple[Any, ...],
        prev: Any,
        item: Any,
        index: int | None,
        iteration: int | None,
        attempt: int,
        session_id: str,
        idempotency_key: str,
        input: Any,
        shared: Mapping[str, Any],
        resume_values: tuple[Any, ...],
    ) -> None:
        self.path = path
        self.prev = prev
        self.item = item
        self.index = index
        self.iteration = iteration
        self.attempt = attempt
        self.session_id = session_id
        self.idempotency_key = idempotency_key
        self.input = input
        self._shared = shared
        self._resume_values = resume_values
        self._state: SharedState | None = None
        self._metrics: dict[str, float] | None = None
        self._interrupts = 0

    def __reduce__(self) -> Any:
        return (
            RemoteContext,
            (
                self.path,
                self.prev,
                self.item,
                self.index,
                self.iteration,
                self.attempt,
                self.session_id,
                self.idempotency_key,
                self.input,
                self._shared,
                self._resume_values,
            ),
        )

    @property
    def state(self) -> SharedState:
        """The session's shared dict as the step started: reads are copies; assignments and
        deletions are recorded and applied in the driving process when the step completes."""
        if self._state is None:
            self._state = SharedState(self._shared, deepcopy)
        return self._state

    @property
    def outputs(self) -> Any:
        raise NotSendable(
            self.path,
            "ctx.outputs",
            "is not sent to another process; pass what the step needs in its items or as "
            "ctx.prev, or make the step `async def` (it then runs in the driving process)",
        )

    metric = Context.metric  # the same check and sum, recorded here

    def interrupt(self, reason: str = "", *, kind: str = "human", payload: Any = None) -> Any:
        """As `Context.interrupt`: the resume values were sent with the step."""
        number = self._interrupts
        self._interrupts += 1
        values = self._resume_values
        if number < len(values):
            return deepcopy(values[number])
        if kind not in ("human", "external", "system"):
            msg = f"interrupt kind must be 'human', 'external' or 'system' (got {kind!r})"
            raise ValueError(msg)
        raise Interrupted(kind, reason, payload)

    def effects(self) -> dict[str, Any]:
        """What the step did to its `ctx`, for `apply_effects` in the driving process."""
        data: dict[str, Any] = {}
        if self._state is not None:
            self._state.effects(data)
        if self._metrics:
            data["metrics"] = self._metrics
        return data

    def __repr__(self) -> str:
        return f"<RemoteContext {'/'.join(map(str, self.path))} attempt={self.attempt}>"


def remote_context(ctx: Context) -> RemoteContext:
    """The stand-in of the live `ctx` to send with a step (read in the driving process)."""
    ex = ctx._ex
    return RemoteContext(
        ctx.path,
        ctx.prev,
        ctx.item,
        ctx.index,
        ctx.iteration,
        ctx.attempt,
        ex.session_id,
        ctx.idempotency_key,
        ctx.input,
        ex.state.shared,
        tuple(ex.scope(ctx.path).resume_values),
    )


def apply_effects(ctx: Context, data: Mapping[str, Any]) -> None:
    """Apply what a step did to its `RemoteContext` to its live `ctx`, which records it when
    the step completes (or fails: its metrics)."""
    changes = data.get("state")
    if changes:
        state = ctx.state
        for key, value in changes.items():
            state[key] = value
    deleted = data.get("state_deleted")
    if deleted:
        state = ctx.state
        for key in deleted:
            if key in state:
                del state[key]
    metrics = data.get("metrics")
    if metrics:
        for name, value in metrics.items():
            ctx.metric(name, value)
